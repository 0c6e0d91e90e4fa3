"""How a reading command prints its rows: the conventions of gh, sqlite-utils and DuckDB's CLI.

On a terminal, a table fitted to the width: lower-priority columns are dropped (and said so) before
anything is cut, ids are shown as their first 12 characters (a prefix every command accepts) and a run
name is never shortened. Anywhere else (a pipe, a file, a CI log), TSV: a header of field names, full
ids, RFC 3339 times, no colour, one line per row. `--format table|tsv|csv|json|jsonl` chooses
explicitly; `--json` is `--format json`. Formatting only: every value arrives computed.
"""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any, Callable, Iterable, Optional

import typer

from receipts.errors import UsageError

FORMATS = ("table", "tsv", "csv", "json", "jsonl")
ID_CHARS = 12  # a terminal shows an id's first 12 characters: `show`, `compare` and the rest accept a unique prefix


def format_option(piped: str = "tsv") -> Any:
    """The --format option; `piped`: what the command prints when stdout is not a terminal (tsv for the table
    commands, the text report, named `table`, for show, compare and check)."""
    default = "tsv otherwise" if piped == "tsv" else "the same text, without colour, otherwise"
    return typer.Option(None, "--format", metavar="table|tsv|csv|json|jsonl", show_default=False,
                        help=f"Output format (default: table on a terminal, {default}).")


def chosen_format(fmt: Optional[str], *, as_json: bool = False, piped: str = "tsv") -> str:
    """The format to print: --json is json; --format as given; else a table on a terminal and `piped` (tsv for
    the table commands, text for the reports) when stdout is anything else."""
    if fmt is not None:
        fmt = fmt.lower()
        if fmt not in FORMATS:
            raise UsageError(f"--format must be one of {', '.join(FORMATS)} (got {fmt!r})")
        if as_json and fmt != "json":
            raise UsageError(f"--json and --format {fmt} ask for two formats: give one")
        return fmt
    if as_json:
        return "json"
    return "table" if sys.stdout.isatty() else piped


@dataclass(frozen=True)
class Column:
    """One output column. `key`: the row's field and the TSV/CSV/JSON name; `title`: its terminal header;
    `drop`: on a terminal too narrow for the table, columns with the highest `drop` go first (0: never
    dropped); `kind`: 'id' (12 characters on a terminal, whole elsewhere), 'time' (RFC 3339), 'text';
    `show`: how a row's value reads on a terminal (default: the machine text); `only`: 'table' or 'data'
    for a column shown only on a terminal, or only in TSV/CSV/JSON; `fold`: a long text column that may be
    folded onto more lines down to this many characters wide before another column is dropped (0: never
    folded to fit; the text stays whole either way)."""

    key: str
    title: str = ""
    drop: int = 0
    kind: str = "text"
    show: Optional[Callable[[dict[str, Any]], str]] = None
    only: str = ""
    fold: int = 0


def rfc3339(value: Any) -> str:
    """A time as RFC 3339 (`2026-11-23T18:47:36.600000Z`). A clock that names no zone (a log line's local
    time) keeps no offset rather than a guessed one."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc)
            return value.replace(tzinfo=None).isoformat() + "Z"
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def machine_text(value: Any, kind: str = "text") -> str:
    """A value as TSV/CSV write it: empty for unknown, full precision, lists comma-joined, no tab or newline.
    A float keeps 15 significant digits, all a double carries reliably: `23.130000000000003`, the last bit
    of a sum, reads 23.13."""
    if value is None:
        return ""
    if kind == "time" or isinstance(value, (datetime, date)):
        return rfc3339(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(float(f"{value:.15g}"))
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(machine_text(v) for v in value)
    if isinstance(value, dict):
        import orjson

        return orjson.dumps(value, default=str).decode()
    return " ".join(str(value).replace("\t", " ").splitlines()) if isinstance(value, str) else str(value)


def _terminal_text(column: Column, row: dict[str, Any]) -> str:
    if column.show is not None:
        return column.show(row)
    value = row.get(column.key)
    if value is None:
        return "-"
    if column.kind == "id":
        return str(value)[:ID_CHARS]
    if column.kind == "time":
        return rfc3339(value).replace("T", " ")
    return machine_text(value)


def emit(rows: list[dict[str, Any]], columns: list[Column], fmt: str, *, title: str = "",
         json_rows: Optional[Iterable[Any]] = None, notes: Iterable[str] = ()) -> None:
    """Print `rows` in `fmt`. json/jsonl print `json_rows` when given (a command's documented JSON objects),
    else each row's column fields. `title` and `notes` are for the terminal table only: TSV and CSV are data."""
    from receipts.cli.context import console, print_json, print_jsonl

    data = [c for c in columns if c.only != "table"]
    if fmt in ("json", "jsonl"):
        objects = list(json_rows) if json_rows is not None else [{c.key: r.get(c.key) for c in data} for r in rows]
        (print_json if fmt == "json" else print_jsonl)(objects)
        return
    if fmt in ("tsv", "csv"):
        out = io.StringIO()
        if fmt == "csv":
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow([c.key for c in data])
            writer.writerows([machine_text(r.get(c.key), c.kind) for c in data] for r in rows)
        else:
            out.write("\t".join(c.key for c in data) + "\n")
            for r in rows:
                out.write("\t".join(machine_text(r.get(c.key), c.kind) for c in data) + "\n")
        sys.stdout.write(out.getvalue())
        sys.stdout.flush()
        return
    table, dropped = fitted_table(rows, [c for c in columns if c.only != "data"], width=console.width, title=title)
    console.print(table)
    notes = list(notes)
    if dropped:
        notes.append(f"{len(dropped)} column(s) left out to fit {console.width} columns: {', '.join(dropped)} "
                     "(a wider terminal, or --format tsv, shows them)")
    from rich.text import Text

    for note in notes:
        console.print(Text(note, style="dim"), soft_wrap=False)  # prose: wrapped at the terminal's width


def fitted_table(rows: list[dict[str, Any]], columns: list[Column], *, width: int, title: str = "") -> tuple[Any, list[str]]:
    """A rich table of `rows` no wider than `width`, and the titles of the columns dropped to get there.

    Columns go by falling `drop` (the last listed first among equals); ids and names are never cut with an
    ellipsis: what is left is folded onto more lines, whole."""
    from rich.console import Console

    measure = Console(width=100_000, file=io.StringIO(), color_system=None)  # the natural width, unclamped
    kept = list(columns)
    cells = [[_terminal_text(c, r) for c in columns] for r in rows]
    # measured as folded: a foldable column counts at its fold width, rich folds it when printing
    folded = [[text[:c.fold] if c.fold else text for c, text in zip(columns, row)] for row in cells]
    while True:
        table = _table(kept, columns, cells, title)
        if measure.measure(_table(kept, columns, folded, title)).maximum <= width:
            break
        candidates = [c for c in kept if c.drop > 0]
        if not candidates:
            break
        worst = max(candidates, key=lambda c: (c.drop, kept.index(c)))
        kept.remove(worst)
    return table, [c.title or c.key for c in columns if c not in kept]


def _table(kept: list[Column], columns: list[Column], cells: list[list[str]], title: str) -> Any:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title) if title else None, box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    for c in kept:
        table.add_column(escape(c.title or c.key), overflow="fold", no_wrap=c.kind in ("id", "time"))
    index = [columns.index(c) for c in kept]
    for row in cells:
        table.add_row(*(escape(row[i]) for i in index))
    return table


def flatten(value: Any, prefix: str = "") -> list[dict[str, Any]]:
    """A nested report as `field`/`value` rows with dotted field names (`machine.world_size`, `env.NCCL_ALGO`,
    `sources.0.path`): how `show` and `compare` read as TSV or CSV."""
    if hasattr(value, "__dataclass_fields__"):
        from dataclasses import asdict

        value = asdict(value)
    if isinstance(value, dict) and value:
        return [row for k, v in value.items() for row in flatten(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(value, (list, tuple)) and value and any(isinstance(v, (dict, list, tuple)) for v in value):
        return [row for i, v in enumerate(value) for row in flatten(v, f"{prefix}.{i}")]
    return [{"field": prefix, "value": value}]


RECORD_COLUMNS = [Column("field"), Column("value")]


def emit_record(report: Any, fmt: str) -> None:
    """A report (one object) in a data format: json as is, jsonl on one line, tsv/csv as field/value rows."""
    from receipts.cli.context import print_json, print_jsonl

    if fmt == "json":
        print_json(report)
    elif fmt == "jsonl":
        print_jsonl([report])
    else:
        emit(flatten(report), RECORD_COLUMNS, fmt)
