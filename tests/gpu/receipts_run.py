"""Device-side stand-in for `receipts run --no-ingest`.

The GPU machine's python3 has torch but not polars/duckdb, which the CLI's store layer imports;
this calls the same library function the `run` command calls (receipts.launch.launcher.run)
with ingest off. The run directories come back and are ingested here, on the CPU side.

    python3 tests/gpu/receipts_run.py --host-lineage h200-device-x2 --preset toy_fsdp2_v1 \
        --regime "fsdp2/no-compile" --run-dir DIR -- torchrun --standalone --nproc_per_node=2 tests/gpu/train_fsdp2.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from receipts.launch.launcher import run
from receipts.schema.lane import IdentityClaim
from receipts.errors import ReceiptsError


def main() -> int:
    ap = argparse.ArgumentParser()
    for flag in ("--host-lineage", "--preset", "--regime", "--run-name", "--run-dir"):
        ap.add_argument(flag)
    ap.add_argument("--tag", action="append", default=[])
    ap.add_argument("--telemetry-interval", type=float, default=1.0)
    ap.add_argument("--telemetry-series", action="store_true")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        result = run(command=command, run_dir=Path(args.run_dir) if args.run_dir else None,
                     claim=IdentityClaim(args.host_lineage, args.preset, args.regime),
                     run_name=args.run_name, tags=tuple(args.tag), ingest=False, echo=sys.stdout.buffer,
                     echo_err=sys.stderr.buffer, telemetry_interval_s=args.telemetry_interval,
                     telemetry_series=args.telemetry_series)
    except ReceiptsError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"run finished: exit code {result.exit_code}; log {result.log_path}", file=sys.stderr)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
