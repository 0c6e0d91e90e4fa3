#!/bin/bash
# The noise experiment behind tests/data/noise/, in one device call on one GPU:
#     bash tests/gpu/noise_runs.sh            (through the device tool, from the repo root)
# 1. calibrate: one discarded run for the step time, then the time of one extra bf16 matmul;
# 2. N_AA unchanged runs (A/A), 2 runs with a planted slowdown under the noise floor (~0.3% of a
#    step), 3 runs with a planted 2.5% slowdown, all the same script, separate processes, launched
#    with `receipts run` (tests/gpu/receipts_run.py: the device has no polars/duckdb).
# Brings back one tarball of the run logs plus calibration.json.
set -u
export PYTHONUNBUFFERED=1
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/receipts && export PYTHONPATH=/tmp/pkg
W=/tmp/noise; rm -rf $W; mkdir -p $W/runs
STEPS=${STEPS:-120}
N_AA=${N_AA:-10}
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H100*) HOST=h100-device-x1 ;; *H200*) HOST=h200-device-x1 ;; *) HOST=gpu-device-x1 ;; esac
RUN="python3 tests/gpu/receipts_run.py --host-lineage $HOST --preset toy_fsdp2_v1 --regime fsdp2/no-compile"
# GPU-bound on purpose: at the default shape (batch 8, d_model 1024) one H100 waits on the host's
# kernel launches (host_ms == step_ms, 22-31 ms run medians in a first try on a VM), so extra GPU work
# hides under launch time and the run-to-run spread is the host's, not the training's.
SHAPE=${SHAPE:---batch 16 --d-model 2048}
TRAIN="torchrun --standalone --nproc_per_node=1 tests/gpu/train_fsdp2.py --steps $STEPS $SHAPE"

one() { # $1 = run name, $2 = tag, rest = extra train args
  local name=$1 tag=$2; shift 2
  $RUN --run-name $name --tag $tag --run-dir $W/runs/$name -- $TRAIN "$@" > $W/runs/$name.out 2>&1
  echo "$name exit $?"
}

# Calibration: a discarded run, then the extra matmul's time.
one calibration calibration
python3 - "$W" <<'EOF' > $W/calibration.json
import json, statistics, sys, torch
w = sys.argv[1]
steps = [json.loads(l[8:]) for l in open(f"{w}/runs/calibration/run.log") if l.startswith("RECEIPT ")]
ms = [r["step_ms"] for r in steps if r.get("kind") == "step" and r["step"] >= 10]
host = [r["host_ms"] for r in steps if r.get("kind") == "step" and r["step"] >= 10 and "host_ms" in r]
step_ms = statistics.median(ms)
out = {"gpu": torch.cuda.get_device_name(), "step_ms": step_ms, "host_ms": statistics.median(host) if host else None}
for size in (4096, 2048):
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        torch.mm(a, a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(200):
        torch.mm(a, a)
    end.record(); torch.cuda.synchronize()
    out[f"mm{size}_ms"] = start.elapsed_time(end) / 200
out["slow_k"] = max(1, round(0.025 * step_ms / out["mm4096_ms"]))            # ~2.5% of a step
out["subfloor_k"] = max(1, round(0.003 * step_ms / out["mm2048_ms"]))        # ~0.3% of a step
out["slow_pct"] = 100 * out["slow_k"] * out["mm4096_ms"] / step_ms
out["subfloor_pct"] = 100 * out["subfloor_k"] * out["mm2048_ms"] / step_ms
print(json.dumps(out))
EOF
cat $W/calibration.json
SLOW_K=$(python3 -c "import json; print(json.load(open('$W/calibration.json'))['slow_k'])")
SUB_K=$(python3 -c "import json; print(json.load(open('$W/calibration.json'))['subfloor_k'])")

for i in $(seq -w 1 $N_AA); do one aa_$i main; done
for i in 1 2; do one subfloor_$i pr-subfloor --extra-matmuls $SUB_K --extra-matmul-size 2048; done
for i in 1 2 3; do one slow_$i pr-slow --extra-matmuls $SLOW_K --extra-matmul-size 4096; done
{ nvidia-smi; date -u +%Y-%m-%dT%H:%M:%SZ; } > $W/machine.txt 2>&1

cd $W && tar czf $OUT/noise_runs.tar.gz calibration.json machine.txt runs/*/run.log runs/*/receipt.toml runs/*.out 2>/dev/null
ls -la $OUT
