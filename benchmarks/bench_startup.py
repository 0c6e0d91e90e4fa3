"""Start-up time of the CLI and the size of the slim install against the one with the dashboard.

    .venv/bin/python benchmarks/bench_startup.py [--repeat 15] [--no-install]

Start-up, median of --repeat fresh processes each (the CLI of this checkout's .venv):
  reference        `python -c pass`: the bare interpreter start of the same Python
  --version        `receipts --version`
  --help           `receipts --help` (the command list comes from cli/main.py, no command module loads)
  gate --help      `receipts gate --help`: one command module and the gate's imports
  import           `python -c "import receipts.cli.main"`
  eager            every command module imported: what each start-up paid before commands loaded lazily
Ratios are against the bare interpreter start measured in the same run.

Install size (skipped with --no-install; needs the package index): two fresh venvs, one with
`pip install .` (what a CI gate needs) and one with `pip install .[dashboard]`; reports the installed
distributions and the size of site-packages of each, and the ratio. A fresh venv's own pip is counted
in both, so the difference is what the extra adds.
"""

from __future__ import annotations

import argparse
import os
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


def median_wall_s(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def startup(repeat: int) -> None:
    cases = [
        ("reference: python -c pass", [sys.executable, "-c", "pass"]),
        ("receipts --version", [str(RECEIPTS), "--version"]),
        ("receipts --help", [str(RECEIPTS), "--help"]),
        ("receipts gate --help", [str(RECEIPTS), "gate", "--help"]),
        ("python -c 'import receipts.cli.main'", [sys.executable, "-c", "import receipts.cli.main"]),
        # what every start-up cost before commands loaded lazily: each command module imported
        ("every command module imported (eager)", [sys.executable, "-c", EAGER]),
    ]
    median_wall_s(cases[1][1], 2)  # warm the OS page cache; not timed
    print(f"start-up, median of {repeat} fresh processes")
    base = None
    for label, cmd in cases:
        t = median_wall_s(cmd, repeat)
        base = base or t
        print(f"  {label:<40} {t * 1000:7.1f} ms  {t / base:5.1f}x the bare interpreter")


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
