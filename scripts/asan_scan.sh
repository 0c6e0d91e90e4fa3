#!/usr/bin/env bash
# Megatron's native line scanner (ingest/_megatron_lines.c) under AddressSanitizer: builds it with
# -fsanitize=address into a temporary copy of the package and runs its tests there (real logs, cuts, edge lines,
# hypothesis logs and mutated real logs), so a read past a line, a block or a buffer stops the run with a report.
# Needs gcc with libasan (Debian's gcc does) and the .venv that scripts/test.sh makes.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/pkgroot"
cp -r . "$work/receipts" 2>/dev/null || true  # the tree as it is (ignored files included: .venv is not used from here)
rm -rf "$work/receipts/.venv" "$work/receipts/.git"
ln -s ../receipts "$work/pkgroot/receipts"
ln -s "$(cd .. && pwd)/shared" "$work/shared"  # the real logs, where the tests look for them (../shared)
include=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suffix=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
rm -f "$work"/receipts/ingest/_megatron_lines*.so
gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer -fsanitize=address -Wall -Wextra -I"$include" \
  ingest/_megatron_lines.c -o "$work/receipts/ingest/_megatron_lines$suffix"

# The interpreter is not built with ASan: the runtime is preloaded, and leak checking (Python's own allocations
# at exit) is off; any invalid read or write still aborts with its report. PYTHONMALLOC=malloc: every Python
# object (a small block of a log too) from malloc, whose edges ASan guards, not from pymalloc's arenas.
# --capture=sys: pytest leaves file descriptor 2 alone, so the report is seen (an fd capture died with the run).
cd "$work/receipts"
LD_PRELOAD=$(gcc -print-file-name=libasan.so) PYTHONMALLOC=malloc ASAN_OPTIONS=detect_leaks=0 RECEIPTS_REQUIRE_NATIVE=1 \
  PYTHONPATH="$work/pkgroot" "$OLDPWD/.venv/bin/python" -m pytest -q -p no:cacheprovider --capture=sys tests/test_megatron_scan.py "$@"
