"""Every kernel name in the real files the tests read, and the category each is given.

The corpus test (tests/test_kernel_corpus.py) compares today's categorisation of every name with the
reviewed expectation file tests/data/kernel_categories_expected.tsv, so a new name that falls to `other`
(or moves category) is a visible diff, not a silent change in an anatomy. After reviewing a change:

    .venv/bin/python -m tests.kernel_corpus --write

Names are read with sqlite3 / json directly (not through the project's parsers): kernel rows of nsys
exports (demangled name), `cat == "kernel"` events of Kineto traces.
"""

from __future__ import annotations

import gzip
import sqlite3
import sys
import tempfile
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
REALDATA = REPO.parent / "shared" / "realdata"
EXPECTED = REPO / "tests" / "data" / "kernel_categories_expected.tsv"


def _nsys_names(path: Path) -> set[str]:
    if path.suffix == ".gz":
        with tempfile.TemporaryDirectory() as tmp:
            plain = Path(tmp) / "x.sqlite"
            plain.write_bytes(gzip.decompress(path.read_bytes()))
            return _nsys_names(plain)
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        cols = {r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
        col = "demangledName" if "demangledName" in cols else "shortName"
        return {n for (n,) in con.execute(f"SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                          f"JOIN StringIds s ON s.id = k.{col}") if n}
    finally:
        con.close()


def _kineto_names(path: Path) -> set[str]:
    data = path.read_bytes()
    # orjson: the traces' JSON is most of the corpus's cost (Python's json took 4.7 s of its 6)
    events = orjson.loads(gzip.decompress(data) if path.name.endswith(".gz") else data).get("traceEvents", [])
    return {e["name"] for e in events if isinstance(e, dict) and e.get("cat") == "kernel" and e.get("name")}


def sources() -> list[Path]:
    found = sorted(REPO.glob("tests/data/**/*.sqlite.gz")) + sorted(REPO.glob("tests/data/**/*.pt.trace.json.gz"))
    if REALDATA.is_dir():
        found += sorted(REALDATA.glob("nsys/*.sqlite")) + sorted(REALDATA.glob("kineto/*.json.gz"))
    return found


def corpus() -> set[str]:
    names: set[str] = set()
    for path in sources():
        names |= _nsys_names(path) if ".sqlite" in path.name else _kineto_names(path)
    return names


def categorised() -> dict[str, str]:
    from receipts.schema.categories import load_category_rules

    rules = load_category_rules(cwd=Path(tempfile.gettempdir()))  # shipped rules only, no ./receipts.toml
    return {name: rules.classify(name) for name in sorted(corpus())}


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def write(path: Path = EXPECTED) -> None:
    lines = [f"{category}\t{_cell(name)}" for name, category in sorted(categorised().items(), key=lambda kv: (kv[1], kv[0]))]
    path.write_text("# category<TAB>kernel name; reviewed; regenerate with: .venv/bin/python -m tests.kernel_corpus --write\n"
                    + "\n".join(lines) + "\n")


def read(path: Path = EXPECTED) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            category, name = line.split("\t", 1)
            out[name.replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")] = category
    return out


if __name__ == "__main__":
    if "--write" in sys.argv:
        write()
        print(f"wrote {EXPECTED}")
    else:
        for name, category in categorised().items():
            print(f"{category}\t{name[:160]}")
