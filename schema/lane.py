"""The lane: the identity that decides which runs may be compared (host lineage, preset family, launch regime).

"Anything missing one of those three is a rumor. Anything carrying all three is a comparison." One type holds
what the rest of receipts needs of them: the fields in order (FIELDS), each one's raw column, the parameter a
user gives it by (OPTION) and its label, the canonical stored key (`Lane.key`, stored as receipts.lane_key and
matched by the lane queries, sql/lane_runs.sql and sql/lane_history.sql) and the display (`display`, a lane's
`str`). The claim before canonicalisation is here too (IdentityClaim: one value per field under its OPTION name),
and the commands' options are declared from it (cli/claim_options.py). Adding a field to the identity is a
change here, its columns (schema/tables.py, and a migration that fills receipts.lane_key again) and its
canonicalisation (schema/identity.py); tests/test_lane.py names the few files that may spell a field and
shows what follows such a change by itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import astuple, dataclass, fields
from typing import Any

# What one field occupies besides its canonical column: the raw value as claimed, the parameter that claims it
# (flags, receipt.toml, a RECEIPT header, retag), its words, and the columns resolved with it.
RAW = {"host_lineage": "raw_host_lineage", "preset_family": "raw_preset", "launch_regime": "raw_regime"}
OPTION = {"host_lineage": "host_lineage", "preset_family": "preset", "launch_regime": "regime"}
LABEL = {"host_lineage": "host lineage", "preset_family": "preset family", "launch_regime": "launch regime"}
# The dashboard's query parameters (?host=&preset=&regime=): links from `report` and the lanes view to a history.
URL_PARAM = {"host_lineage": "host", "preset_family": "preset", "launch_regime": "regime"}
RESOLVED_WITH = {"launch_regime": ("engine", "compile_mode", "parallel_json")}


@dataclass(frozen=True)
class Lane:
    """The three canonical values; a rumor's missing ones are None (it has no lane: `complete` is False)."""

    host_lineage: str | None
    preset_family: str | None
    launch_regime: str | None

    @classmethod
    def of(cls, source: Mapping[str, Any] | object) -> Lane:
        """The lane of a row (a mapping with the canonical columns), of a record holding it as `lane`, or of one
        with the canonical attributes."""
        held = getattr(source, "lane", None)
        if isinstance(held, Lane):
            return held
        if isinstance(source, Mapping):
            return cls(*(source[f] for f in FIELDS))
        return cls(*(getattr(source, f) for f in FIELDS))

    @classmethod
    def from_url(cls, params: Mapping[str, Any]) -> Lane:
        """The lane a dashboard link names (URL_PARAM); a missing parameter is None."""
        return cls(*(params.get(URL_PARAM[f]) for f in FIELDS))

    def url_params(self) -> dict[str, str | None]:
        return {URL_PARAM[f]: getattr(self, f) for f in FIELDS}

    @classmethod
    def from_key(cls, key: str) -> Lane:
        return cls(*json.loads(key))

    @property
    def key(self) -> str:
        """The canonical stored form (receipts.lane_key): compact JSON of the values in FIELDS' order, the same text
        the SQL builds: store/migrations/v0014_lane_key.py BACKFILL for the receipts stored before it, and
        sql/_macros.sql lane_values / lane_label read it back."""
        return json.dumps(list(astuple(self)), separators=(",", ":"), ensure_ascii=False)

    @property
    def complete(self) -> bool:
        return all(astuple(self))

    @property
    def missing(self) -> list[str]:
        return [f for f in FIELDS if not getattr(self, f)]

    def as_dict(self) -> dict[str, str | None]:
        return {f: getattr(self, f) for f in FIELDS}

    def values(self) -> tuple[str | None, ...]:
        """The values in FIELDS' order."""
        return astuple(self)

    def __str__(self) -> str:
        return display(astuple(self))


FIELDS = tuple(f.name for f in fields(Lane))
NO_LANE = Lane(*(None for _ in FIELDS))


def display(values: Iterable[Any]) -> str:
    """A lane's values as people read them (a lane's `str`, `report`, the dashboard's lane picker)."""
    return " · ".join(str(v) for v in values)


@dataclass(frozen=True)
class IdentityClaim:
    """The lane as the evidence (header, flags, receipt.toml) claims it, before canonicalisation: one value per
    field under its OPTION name, and the hostname a host lineage may be matched from."""

    host_lineage: str | None = None
    preset: str | None = None
    regime: str | None = None
    hostname: str | None = None

    @classmethod
    def of_options(cls, options: Mapping[str, Any], hostname: str | None = None) -> IdentityClaim:
        """The claim of a mapping keyed by OPTION names (a RECEIPT header, receipt.toml, a command's flags); a
        missing one is None."""
        return cls(**{OPTION[f]: options.get(OPTION[f]) for f in FIELDS}, hostname=hostname)

    def options(self) -> dict[str, str | None]:
        """The claimed values by OPTION name, in FIELDS' order (the RECEIPT header's identity)."""
        return {OPTION[f]: getattr(self, OPTION[f]) for f in FIELDS}

    def raw(self) -> Lane:
        """The claimed values as a lane (not canonical: what was said)."""
        return Lane(*self.options().values())

    def merged(self, override: IdentityClaim) -> IdentityClaim:
        """Fields of `override` that are set win (explicit flags beat what a file says)."""
        return IdentityClaim(**{f.name: getattr(override, f.name) or getattr(self, f.name) for f in fields(self)})


def lane_of(source: Mapping[str, Any] | object) -> Lane | None:
    """The lane of a receipt row or record; None for a rumor."""
    lane = Lane.of(source)
    return lane if lane.complete else None

