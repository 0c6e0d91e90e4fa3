"""Output that pipes: the conventions of gh, sqlite-utils and DuckDB's CLI (cli/output.py).

In a pipe a table is TSV with full ids and RFC 3339 times, no colour; `--format` picks any of table, tsv,
csv, json, jsonl; NO_COLOR / CLICOLOR_FORCE are honoured; on a terminal a table fits its width by dropping
columns, never by cutting an id or a run name; under --json an error is a JSON object on stdout; `anatomy
--json` keeps per-step rows and window totals apart; help shows no `<bool>`; shell completion answers.
Real runs: the noise set's H100 logs and the 2-GPU nsys export.
"""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.cli_helpers import cli, cli_json
from tests.conftest import GPU_DATA, REPO

NOISE = REPO / "tests" / "data" / "noise"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-9]|9[0-7]|38;)[0-9;]*m")
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    db = str(tmp_path_factory.mktemp("out") / "o.duckdb")
    runs = [str(NOISE / n / "run.log") for n in ("aa_01", "aa_02", "aa_03", "slow_1")]
    assert cli(db, "--registry", str(REPO / "tests" / "data" / "registry.toml"), "ingest", *runs).exit_code == 0
    return db


def run(db: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI as a shell runs it, stdout a pipe."""
    return subprocess.run([sys.executable, "-m", "receipts.cli.main", "--db", db, *args], capture_output=True,
                          text=True, cwd=REPO, timeout=120, env={**os.environ, **(env or {})})


def run_here(db: str, *args: str) -> subprocess.CompletedProcess:
    """The CLI in this process (CliRunner: stdout and stderr apart, neither a terminal), where what is under test
    is what a command prints, not what reaches a pipe from a process (`run`)."""
    result = cli(db, *args)
    return subprocess.CompletedProcess(["receipts", *args], result.exit_code, result.stdout, result.stderr)


def on_a_terminal(db: str, *args: str, columns: int = 80, env: dict | None = None) -> str:
    """The CLI with stdout on a pseudo-terminal `columns` wide, as a person at a shell sees it."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec the CLI on the terminal
        os.chdir(REPO)
        os.environ.update({"COLUMNS": str(columns), "LINES": "50", **(env or {})})
        os.execv(sys.executable, [sys.executable, "-m", "receipts.cli.main", "--db", db, *args])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    return out.decode().replace("\r\n", "\n")


def test_list_in_a_pipe_is_tsv_with_full_ids_and_rfc3339_times(store):
    done = run(store, "list")
    assert done.returncode == 0, done.stderr
    assert not ANSI.search(done.stdout)
    rows = list(csv.DictReader(io.StringIO(done.stdout), delimiter="\t"))
    listed = cli_json(store, "list")[1]
    assert [r["id"] for r in rows] == [r["id"] for r in listed]  # whole ids: a pasted one resolves
    assert all(len(r["id"]) == 16 for r in rows)
    assert {r["run_name"] for r in rows} == {"aa_01", "aa_02", "aa_03", "slow_1"}
    assert all(RFC3339.match(r["ingested_at"]) and RFC3339.match(r["started_at"]) for r in rows)
    # 15 significant digits, all a double carries reliably (JSON keeps the shortest repr that round-trips)
    assert [float(r["median_step_ms"]) for r in rows] == pytest.approx([r["median_step_ms"] for r in listed], rel=1e-14)
    assert all(len(r["median_step_ms"].replace(".", "")) <= 15 for r in rows)
    first = rows[0]["id"]
    assert run(store, "show", first).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("command", [["list"], ["history", "aa_01"], ["show", "aa_01"], ["compare", "aa_01", "aa_02"],
                                     ["check", "slow_1", "--against", "tag:main"]])
def test_every_reading_command_takes_every_format(store, command):
    # in this process: the formats are asked for by name (a pipe's default is test_list_in_a_pipe_...'s)
    as_json = json.loads(run_here(store, *command, "--json").stdout)
    for fmt in ("table", "tsv", "csv", "json", "jsonl"):
        done = run_here(store, *command, "--format", fmt)
        assert done.returncode in (0, 1), (fmt, done.stderr)
        assert done.stdout.strip(), fmt
        if fmt == "json":
            assert json.loads(done.stdout) == as_json
        elif fmt == "jsonl":
            lines = [json.loads(line) for line in done.stdout.splitlines()]
            assert lines and all(isinstance(o, dict) for o in lines)
        elif fmt in ("tsv", "csv"):
            rows = list(csv.reader(io.StringIO(done.stdout), delimiter="\t" if fmt == "tsv" else ","))
            assert len({len(r) for r in rows}) == 1 and len(rows) >= 2, (fmt, rows[:3])
    bad = run_here(store, *command, "--format", "xml")
    assert bad.returncode == 2 and "--format must be one of table, tsv, csv, json, jsonl" in bad.stderr


def test_the_terminal_table_fits_80_columns_without_cutting_ids_or_names(store):
    shown = on_a_terminal(store, "list", columns=80, env={"NO_COLOR": "1"})
    text = ANSI.sub("", shown)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "…" not in text
    for r in cli_json(store, "list")[1]:
        line = next(line for line in text.splitlines() if r["id"][:12] in line)
        assert r["run_name"] in line.split() and r["id"][:12] in line.split()  # on the row's one line, whole
    assert "left out to fit 80 columns" in text
    wide = ANSI.sub("", on_a_terminal(store, "list", columns=200))
    assert "preset family" in wide and "left out" not in wide


@pytest.mark.slow
def test_a_kernel_name_takes_a_line_or_two_on_a_terminal_and_stays_whole_in_tsv(tmp_path):
    db = str(tmp_path / "k.duckdb")
    assert cli(db, "ingest", str(GPU_DATA / "fsdp2_2gpu_nsys" / "run.log")).exit_code == 0
    assert cli(db, "ingest", str(GPU_DATA / "fsdp2_2gpu_nsys.sqlite.gz"), "--attach", "fsdp2_2gpu_nsys").exit_code == 0
    text = ANSI.sub("", on_a_terminal(db, "anatomy", "fsdp2_2gpu_nsys", "--by", "kernel", "--top", "2", columns=80))
    table = text[text.index("top 2 kernels"):]
    rows = [line for line in table.splitlines()[3:] if line.strip()]
    starts = [i for i, line in enumerate(rows) if re.match(r"\s*[a-z_]+\s+[\d,.]+\s", line)]
    assert starts and max(b - a for a, b in zip(starts, [*starts[1:], len(rows)])) <= 3, table
    assert "ncclDevKernel_AllGather_RING_LL(…)" in text
    tsv = list(csv.DictReader(io.StringIO(cli(db, "anatomy", "fsdp2_2gpu_nsys", "--by", "kernel").stdout),
                              delimiter="\t"))
    assert any(r["name"] == "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)"
               for r in tsv)

    # --json: the per-step rows and the steady window's totals apart; the steps sum to the totals
    code, report = cli_json(db, "anatomy", "fsdp2_2gpu_nsys")
    assert code == 0 and "rows" not in report
    assert all(r["step"] is not None for r in report["step_rows"])
    assert report["window_totals"] and all("step" not in r for r in report["window_totals"])
    summed: dict[tuple, float] = defaultdict(float)
    for r in report["step_rows"]:
        if not r["warmup"]:
            summed[r["rank"], r["category"]] += r["time_ms"]
    for t in report["window_totals"]:
        assert summed[t["rank"], t["category"]] == pytest.approx(t["time_ms"], rel=1e-9, abs=1e-9)


def test_colour_follows_no_color_and_clicolor_force(store):
    plain = run(store, "check", "slow_1", "--against", "tag:main")
    assert plain.returncode in (0, 1) and "POOLED" in plain.stdout and not ANSI.search(plain.stdout)
    forced = run(store, "check", "slow_1", "--against", "tag:main", env={"CLICOLOR_FORCE": "1"})
    assert COLOUR.search(forced.stdout), forced.stdout
    both = run(store, "check", "slow_1", "--against", "tag:main", env={"CLICOLOR_FORCE": "1", "NO_COLOR": "1"})
    assert "POOLED" in both.stdout and not COLOUR.search(both.stdout)
    terminal = on_a_terminal(store, "check", "slow_1", "--against", "tag:main")
    assert COLOUR.search(terminal)
    assert not COLOUR.search(on_a_terminal(store, "check", "slow_1", "--against", "tag:main", env={"NO_COLOR": "1"}))


@pytest.mark.parametrize("command", [["list"], ["show", "nope"], ["compare", "nope", "aa_01"], ["history", "nope"],
                                     ["check", "nope", "--against", "tag:main"], ["anatomy", "aa_01"]])
def test_an_error_under_json_is_a_json_object_on_stdout(store, command):
    db = store if command != ["list"] else str(Path(store).with_name("absent.duckdb"))
    # A process of its own for an error before the store opens and one after it (what reaches the process's stdout
    # and stderr, whoever writes it); the other commands' errors in this process.
    call = run if command[0] in ("list", "show") else run_here
    for flags in (["--json"], ["--format", "jsonl"]):
        done = call(db, *command, *flags)
        assert done.returncode == 2, done.stdout
        error = json.loads(done.stdout)["error"]
        assert error["exit_code"] == 2 and error["message"] and error["type"]
        assert done.stderr.count("\n") == 1  # the one line for a person stays on stderr


def test_help_shows_no_type_placeholders():
    """A flag takes no value (`--json`, not `--json <bool>`); a repeatable option reads `--tag <str>`, a bounded
    number `<int>` with its bounds beside it (not `<list[str]>`, `<int range>`)."""
    import click
    import typer.main

    from receipts.cli.main import app

    # In this process: the placeholders are set as a command's module loads (cli/main.py), the same in a shell, and a
    # fresh interpreter per command cost ~1 s of CPU each.
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        helped = cli(":memory:", name, "--help")
        assert helped.exit_code == 0, (name, helped.stdout)
        for placeholder in ("<bool>", "<list[", " range>"):
            assert placeholder not in helped.stdout, (name, placeholder, helped.stdout)
    assert "--json" in cli(":memory:", "list", "--help").stdout
    explain = " ".join(cli(":memory:", "explain", "--help").stdout.split())
    assert "--level <str>" in explain and "--last <int> [x>=1]" in explain


def test_shell_completion_answers_commands_and_options():
    """Completion as an installed `receipts` runs it (the program name picks the variable _RECEIPTS_COMPLETE)."""
    command = [sys.executable, "-c", "import sys; sys.argv[0] = 'receipts'; from receipts.cli.main import main; main()"]
    env = {"_RECEIPTS_COMPLETE": "complete_bash", "COMP_WORDS": "receipts li", "COMP_CWORD": "1"}
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env={**os.environ, **env}, timeout=60)
    assert done.stdout.split() == ["list"], done.stdout + done.stderr
    env.update(COMP_WORDS="receipts list --fo", COMP_CWORD="2")
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env={**os.environ, **env}, timeout=60)
    assert done.stdout.split() == ["--format"], done.stdout + done.stderr
    # The script for a named shell, as docs/cli.md gives it (`--show-completion` detects the shell it runs in
    # from the process tree, which a test run under another process need not have)
    script = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=60,
                            env={**os.environ, "_RECEIPTS_COMPLETE": "source_bash"})
    assert "_RECEIPTS_COMPLETE=complete_bash" in script.stdout, script.stdout + script.stderr


def test_colour_settings_read_the_conventions():
    from receipts.cli.context import colour_settings

    assert colour_settings({}) == {}
    assert colour_settings({"NO_COLOR": "1"}) == {"no_color": True}
    assert colour_settings({"NO_COLOR": ""}) == {}  # set but empty: not asked for (no-color.org)
    assert colour_settings({"CLICOLOR_FORCE": "1"}) == {"force_terminal": True}
    assert colour_settings({"CLICOLOR_FORCE": "0"}) == {}
    assert colour_settings({"CLICOLOR_FORCE": "1", "NO_COLOR": "1"}) == {"no_color": True}
    assert colour_settings({"CLICOLOR": "0"}) == {"no_color": True}


def test_rfc3339_keeps_a_zone_it_knows_and_never_invents_one():
    from receipts.cli.output import machine_text, rfc3339

    assert rfc3339("2026-11-23T18:47:36.600+00:00") == "2026-11-23T18:47:36.600000Z"
    assert rfc3339("2026-11-23T19:47:36+01:00") == "2026-11-23T18:47:36Z"
    assert rfc3339("2026-11-20 10:00:01.123") == "2026-11-20T10:00:01.123000"  # a log clock without a zone
    assert machine_text("a\tb\nc") == "a b c" and machine_text(None) == "" and machine_text(0.1 + 0.2) == "0.3"


def test_reports_read_at_80_columns_in_a_pipe_and_errors_stay_one_line(tmp_path):
    """`check`, `compare` and `show` piped into `cat`: every line fits 80 columns, a wrapped line continues
    indented under its own; an error is still one line, however long."""
    db = str(tmp_path / "noise.duckdb")
    noise = REPO / "tests" / "data" / "noise"
    lane = ["--host-lineage", "h100-device-x1", "--preset", "toy_fsdp2_v1", "--regime", "fsdp2/no-compile"]
    assert run(db, "ingest", *sorted(str(p / "run.log") for p in noise.glob("aa_0[1-5]")), "--tag", "main",
               *lane).returncode == 0
    assert run(db, "ingest", str(noise / "slow_1" / "run.log"), *lane).returncode == 0
    for args in (("check", "slow_1", "--against", "tag:main"), ("compare", "aa_01", "slow_1"), ("show", "slow_1")):
        done = run(db, *args)
        assert done.returncode in (0, 1), done.stderr
        lines = done.stdout.splitlines()
        assert lines and max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
        if args[0] == "check":  # its `  +2.59% (slower), beyond the noise: ...` wraps, continued under its own
            assert any(line.startswith("    ") and not line.startswith("     ") for line in lines), lines
    long_name = "x" * 200
    done = run(db, "show", long_name)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and long_name in done.stderr
