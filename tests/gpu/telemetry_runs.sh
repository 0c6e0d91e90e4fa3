#!/bin/bash
# The GPU telemetry recording behind tests/data/telemetry/, in one device call on one GPU (kind nvidia-h200):
#     bash tests/gpu/telemetry_runs.sh        (through the device tool, from a copy of the repo root)
# The machine's clocks and power settings are left as they are: this records what they are.
#   launched   `receipts run` (tests/gpu/receipts_run.py: the device has no polars/duckdb) around the FSDP2 toy on
#              one GPU, GPU-bound, sampling every TEL_S seconds with the series kept (telemetry.csv), and a
#              torch.profiler trace of its last steps
#   recorder   the same loop without the launcher: the in-training Recorder samples its own GPU
set -u
export PYTHONUNBUFFERED=1
HERE=$PWD
mkdir -p /tmp/pkg && ln -sfn "$HERE" /tmp/pkg/receipts && export PYTHONPATH=/tmp/pkg
W=/tmp/telemetry; rm -rf $W; mkdir -p $W
STEPS=${STEPS:-400}
TEL_S=${TEL_S:-0.25}
TRAIN="tests/gpu/train_fsdp2.py --steps $STEPS --warmup-steps 4 --batch 16 --d-model 2048 --sdpa-backend flash --reduce-dtype bf16"
{ date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi; nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE,ECC;
  python3 -c "import pynvml, torch; print('nvidia-ml-py', pynvml.__version__ if hasattr(pynvml, '__version__') else '?', 'torch', torch.__version__)"; } > $W/machine.txt 2>&1
T0=$(date +%s)
python3 tests/gpu/receipts_run.py --host-lineage h200-device-x1 --preset toy_fsdp2_v1 --regime fsdp2/no-compile \
  --run-name telemetry_launched --tag main --run-dir $W/launched --telemetry-interval $TEL_S --telemetry-series -- \
  torchrun --standalone --nproc_per_node=1 $TRAIN --profile-dir $W/launched/traces > $W/launched.out 2>&1
echo "launched exit $? at $(( $(date +%s) - T0 ))s"; tail -5 $W/launched.out
torchrun --standalone --nproc_per_node=1 $TRAIN --steps 200 --telemetry-interval $TEL_S > $W/recorder.log 2> $W/recorder.err
echo "recorder exit $? at $(( $(date +%s) - T0 ))s"; tail -5 $W/recorder.err
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv >> $W/machine.txt
cd $W && tar czf $OUT/telemetry.tar.gz machine.txt launched/run.log launched/telemetry.csv launched/traces recorder.log
ls -la $OUT; grep -c . launched/telemetry.csv; grep -o '"telemetry":{.*' launched/run.log | head -c 1500; echo
grep -o '"telemetry":{.*' recorder.log | head -c 800
