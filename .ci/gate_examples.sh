#!/usr/bin/env bash
# The gate over its own examples: every claim in examples/claims/true_*.yaml must be accepted and every
# claim in false_*.yaml rejected (real_*.yaml too, when ../shared/realdata/logs is present). Exits non-zero
# when a false claim passes, a true one fails, or the gate errors. Self-contained: a temp --db; < 30 s.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [[ -x .venv/bin/receipts ]]; then RECEIPTS=.venv/bin/receipts; PY=.venv/bin/python
else RECEIPTS=receipts; PY=python3; fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
DB="$TMP/gate_examples.duckdb"
LANE=(--host-lineage h200-usw1c-bench-01 --preset nam52_h200_dense_ref_v1 --regime ddp/full-compile)

"$RECEIPTS" --db "$DB" ingest examples/claims/receipts/*.log > "$TMP/ingest.log" 2>&1
FILES=(examples/claims/true_claims.yaml examples/claims/false_claims.yaml)
REAL="$ROOT/../shared/realdata/logs"
if [[ -d "$REAL" ]]; then
  # Real logs are read where they are, never copied; one identity for all so only the gate's rules decide.
  "$RECEIPTS" --db "$DB" ingest "${LANE[@]}" "$REAL/sft_run_gtx1660.log" \
    "$REAL/megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-baseline.log" \
    "$REAL"/track_1_short_2024-10-09_SOAP__*.txt "$REAL"/track_1_short_2025-09-10_Yarn__*.txt >> "$TMP/ingest.log" 2>&1
  FILES+=(examples/claims/real_true_claims.yaml examples/claims/real_false_claims.yaml)
else
  echo "note: $REAL not present; real-log examples skipped"
fi

set +e
"$RECEIPTS" --db "$DB" gate "${FILES[@]}" --json > "$TMP/gate.json" 2> "$TMP/gate.err"
rc=$?
set -e
if [[ $rc -ne 0 && $rc -ne 1 ]]; then   # 2: a malformed claims file or store error, never a verdict
  echo "gate failed with exit $rc:"; cat "$TMP/gate.err"; exit 2
fi
"$PY" - "$TMP/gate.json" <<'PY'
import json, os, sys
claims = json.load(open(sys.argv[1]))["claims"]
bad = []
for c in claims:
    want = os.path.basename(c["file"]).removeprefix("real_").startswith("true_")
    if c["accepted"] != want:
        bad.append(f"{c['file']}:{c['line']} {c['name']!r}: expected {'accepted' if want else 'rejected'}, got "
                   f"{'accepted' if c['accepted'] else 'rejected'} {c['reasons']}")
    else:
        print(f"ok   {'accepted' if want else 'rejected'}: {c['name']}" + (f"  [{', '.join(c['reason_codes'])}]" if not want else ""))
for line in bad:
    print("FAIL " + line)
print(f"{len(claims) - len(bad)}/{len(claims)} example claims judged as expected")
sys.exit(1 if bad else 0)
PY
