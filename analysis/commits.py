"""From a change to the commits: the last good and the first bad run's `git_rev` and the range between them, so a
bisection starts at once (`git log A..B` lists the commits the first bad run has and the last good one lacks).

`receipts run` records the working folder's commit (launch/provenance.py); a log from elsewhere names none, and the
range then says which side is unknown rather than guessing. Two runs of the same commit put the change outside the
committed code: the command and its flags, the machine, the data or the environment.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

SHORT = 12  # characters of a commit id shown; git accepts any unique prefix


@dataclass(frozen=True)
class CommitRange:
    last_good: str                # run name
    last_good_rev: str | None
    first_bad: str
    first_bad_rev: str | None

    @property
    def range(self) -> str | None:
        """`A..B` (git's range: the commits of B not in A), or None when a side is unknown or both are one commit."""
        a, b = self.last_good_rev, self.first_bad_rev
        return f"{a}..{b}" if a and b and a != b else None

    @property
    def note(self) -> str:
        a, b = self.last_good_rev, self.first_bad_rev
        if a and b and a == b:
            return (f"{self.last_good} and {self.first_bad} ran the same commit {a[:SHORT]}: the change is not in the "
                    "committed code (the command and its flags, the machine, the data or the environment)")
        if a and b:
            return f"commits {a[:SHORT]}..{b[:SHORT]} (last good {self.last_good}, first bad {self.first_bad})"
        unknown = " and ".join(n for n, r in ((self.last_good, a), (self.first_bad, b)) if not r)
        return f"no commit range: {unknown} recorded no git_rev (receipts run records the working folder's)"


def between(last_good: str, last_good_rev: str | None, first_bad: str, first_bad_rev: str | None) -> CommitRange:
    return CommitRange(last_good, last_good_rev or None, first_bad, first_bad_rev or None)


def to_json(c: CommitRange) -> dict[str, Any]:
    return {**asdict(c), "range": c.range, "note": c.note}
