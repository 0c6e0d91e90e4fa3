"""Start-up time of the CLI and the size of the slim install against the one with the dashboard.

    .venv/bin/python benchmarks/bench_startup.py [--repeat 15] [--no-install]

Start-up, median of --repeat fresh processes each (the CLI of this checkout's .venv), CPU seconds (user + system
of the child, from getrusage: the steadier figure on a shared machine) beside wall seconds:
  references       `python -c pass` (the bare interpreter), `python -c 'import duckdb'` (what every command
                   that opens a store pays whatever receipts does) and that with Typer and rich imported too (the
                   CLI's libraries: what every command pays before any of receipts' code runs)
  --version        `receipts --version`
  --help           `receipts --help` (the command list comes from cli/main.py, no command module loads)
  gate --help      `receipts gate --help`: one command module and the gate's imports
  show, compare,   on a small store made first from tests/data/explain (base_1..base_3 and attn_1: real 2 x H200
  explain          runs, each log with its nsys export): `show base_1`, `compare base_1 attn_1` (a verdict against
                   the lane's measured noise floor, and the pairwise explain), `explain attn_1 --against tag:main`
  compare, logs    `compare base_1 attn_1` on a store of the same four runs' logs alone (no profile: the verdict,
                   drift and memory, no explanation)
  import           `python -c "import receipts.cli.main"`
  eager            every command module imported: what each start-up paid before commands loaded lazily
Each command's CPU is also given over `import duckdb`'s, measured in the same run (aim: show, compare and explain
within 0.1 s of it), and split: Typer and rich's imports, the command itself in a process that has run it once
already (`warm`: the store's queries, the statistics, the rendering), and the rest (receipts' own imports and
first calls).

Install size (skipped with --no-install; needs the package index): two fresh venvs, one with
`pip install .` (what a CI gate needs) and one with `pip install .[dashboard]`; reports the installed
distributions and the size of site-packages of each, and the ratio. A fresh venv's own pip is counted
in both, so the difference is what the extra adds.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RECEIPTS = BIN / "receipts"


EAGER = ("import importlib\nfrom receipts.cli.main import COMMAND_MODULES\n"
         "for m in COMMAND_MODULES: importlib.import_module('receipts.cli.' + m)")


# One process runs a command `repeat` + 1 times (the first pays every import and is not counted): what the command
# costs once all is imported, the part no import order can take away (the store's queries, the statistics, the
# rendering). Its stdout goes to /dev/null as a fresh process's does.
WARM = """
import os, statistics, sys, time
from receipts.cli.main import app, prepare_process
prepare_process()  # as main() does
args, repeat, took = sys.argv[2:], int(sys.argv[1]), []
sys.stdout = open(os.devnull, "w")
for _ in range(repeat + 1):
    start = time.process_time()
    try:
        app(args, standalone_mode=False)
    except SystemExit as done:
        assert done.code in (0, None), done.code
    took.append(time.process_time() - start)
sys.stderr.write(f"{statistics.median(took[1:])}\\n")
"""

LIBRARIES = "import duckdb, typer, rich.console, rich.markup, rich.table"

EXPLAIN_RUNS = REPO / "tests" / "data" / "explain"
STORE_RUNS = ("base_1", "base_2", "base_3", "attn_1")


def _children_cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def median_s(cmd: list[str], repeat: int) -> tuple[float, float]:
    """(median CPU seconds, median wall seconds) of `cmd` in `repeat` fresh processes; it must exit 0."""
    cpu, wall = [], []
    for _ in range(repeat):
        c0, t0 = _children_cpu_s(), time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
        wall.append(time.perf_counter() - t0)
        cpu.append(_children_cpu_s() - c0)
    return statistics.median(cpu), statistics.median(wall)


def small_store(folder: Path, *, logs_only: bool = False) -> str:
    """A store of four real runs of tests/data/explain, each log with its nsys export attached (or the logs alone)."""
    db = str(folder / ("logs.duckdb" if logs_only else "small.duckdb"))
    paths = [EXPLAIN_RUNS / r / "run.log" if logs_only else EXPLAIN_RUNS / r for r in STORE_RUNS]
    subprocess.run([str(RECEIPTS), "--db", db, "ingest", *map(str, paths)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    return db


def startup(repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        cli = [str(RECEIPTS)]
        on = [*cli, "--db", small_store(Path(tmp))]
        logs = [*cli, "--db", small_store(Path(tmp), logs_only=True)]
        cases = [
            ("reference: python -c pass", [sys.executable, "-c", "pass"]),
            ("reference: python -c 'import duckdb'", [sys.executable, "-c", "import duckdb"]),
            # the CLI's own libraries, which every command loads before any of receipts' code runs
            ("reference: + import typer, rich", [sys.executable, "-c", LIBRARIES]),
            ("receipts --version", [*cli, "--version"]),
            ("receipts --help", [*cli, "--help"]),
            ("receipts gate --help", [*cli, "gate", "--help"]),
            ("receipts show base_1", [*on, "show", "base_1"]),
            ("receipts compare base_1 attn_1", [*on, "compare", "base_1", "attn_1"]),
            ("receipts explain attn_1 --against tag:main", [*on, "explain", "attn_1", "--against", "tag:main"]),
            ("receipts compare base_1 attn_1 (logs only)", [*logs, "compare", "base_1", "attn_1"]),
            ("python -c 'import receipts.cli.main'", [sys.executable, "-c", "import receipts.cli.main"]),
            # what every start-up cost before commands loaded lazily: each command module imported
            ("every command module imported (eager)", [sys.executable, "-c", EAGER]),
        ]
        median_s(cases[2][1], 2)  # warm the OS page cache; not timed
        print(f"start-up, median of {repeat} fresh processes (load average {os.getloadavg()[0]:.1f})")
        print(f"  {'':<44} {'CPU ms':>7} {'wall ms':>8}  {'CPU over import duckdb':>22}")
        duck, fresh = None, {}
        for label, cmd in cases:
            cpu, wall = median_s(cmd, repeat)
            duck = cpu if "import duckdb" in label else duck
            fresh[label] = cpu
            over = f"{(cpu - duck) * 1000:+7.0f} ms" if duck is not None and "import duckdb" not in label else ""
            print(f"  {label:<44} {cpu * 1000:7.0f} {wall * 1000:8.0f}  {over:>22}")
        libraries = fresh["reference: + import typer, rich"] - fresh["reference: python -c 'import duckdb'"]
        print(f"\nwhere a command's CPU over import duckdb goes: Typer and rich's imports ({libraries * 1000:.0f} ms, "
              f"measured above), the\ncommand itself in a process that has imported everything (median of {repeat} "
              f"calls after a first),\nand the rest: receipts' own imports and first calls")
        print(f"  {'':<44} {'over duckdb':>11} {'libraries':>10} {'warm':>6} {'rest':>6}")
        for label, cmd in cases:
            if not label.startswith("receipts ") or "--" in label.split()[1]:
                continue
            over = fresh[label] - fresh["reference: python -c 'import duckdb'"]
            warm = warm_s(cmd[len(cli):], repeat)
            print(f"  {label:<44} {over * 1000:+8.0f} ms {libraries * 1000:7.0f} ms {warm * 1000:3.0f} ms "
                  f"{(over - libraries - warm) * 1000:3.0f} ms")


def warm_s(args: list[str], repeat: int) -> float:
    """Median CPU seconds of one call of the CLI with `args` in a process that has already run it once."""
    done = subprocess.run([sys.executable, "-c", WARM, str(repeat), *args], check=True, cwd=REPO,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return float(done.stderr.strip().splitlines()[-1])


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def install(spec: str, venv: Path) -> tuple[int, int, float]:
    """(distributions, site-packages bytes, seconds) of a fresh venv at `venv` with `pip install spec`."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    start = time.perf_counter()
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-cache-dir", spec], check=True, cwd=REPO,
                   env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    took = time.perf_counter() - start
    site = next((venv / "lib").glob("python*/site-packages"))
    dists = len(list(site.glob("*.dist-info")))
    return dists, _dir_bytes(site), took


def install_sizes() -> None:
    print("install size: fresh venv, pip install (no cache)")
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        rows = [(spec, *install(spec, Path(tmp) / name)) for name, spec in (("slim", "."), ("dash", ".[dashboard]"))]
    slim_bytes = rows[0][2]
    for spec, dists, size, took in rows:
        print(f"  pip install {spec:<14} {dists:3d} distributions  {size / 2**20:7.1f} MiB site-packages  "
              f"{size / slim_bytes:4.2f}x the slim install  ({took:.0f} s to install)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--no-install", action="store_true", help="skip the two fresh-venv installs")
    args = ap.parse_args()
    if not RECEIPTS.exists():
        sys.exit(f"{RECEIPTS} not found: run this with the .venv's python (.venv/bin/python {sys.argv[0]})")
    startup(args.repeat)
    if not args.no_install:
        install_sizes()


if __name__ == "__main__":
    main()
