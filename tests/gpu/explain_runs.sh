#!/bin/bash
# The explain experiment behind tests/data/explain/, in one device call on 2 GPUs (kind nvidia-h100-x2):
#     bash tests/gpu/explain_runs.sh        (through the device tool, from a copy of the repo root, with
#                                            .nsys-libs carried: shared/tools/NSYS_ON_DEVICE.md)
# Every run is the same FSDP2 toy (tests/gpu/train_fsdp2.py, GPU-bound shape) under nsys, launched with
# `receipts run` (tests/gpu/receipts_run.py: the device has no polars/duckdb), each its own processes:
#   base_N    the baseline: SDPA forced to flash, gradients reduce-scattered in bf16   (tag main)
#   aa_1      the baseline again, tagged as a candidate: an A/A run                      (tag pr-aa)
#   attn_N    SDPA forced to the memory-efficient kernel (a kernel swap inside attention) (tag pr-attn)
#   gemm_N    EXTRA_K extra bf16 matmuls of 4096 x 4096 after each backward               (tag pr-gemm)
#   stall_N   a STALL_MS host stall inside each step, the GPU idle                         (tag pr-stall)
#   fp32_N    gradients reduce-scattered in fp32 (FSDP2 reduce_dtype)                      (tag pr-fp32)
# Each export is trimmed (tests/gpu/trim_nsys_export.py: runtime calls that launched no GPU work, and two
# tables the ingest never reads, are dropped) and gzipped. Runs stop being started past BUDGET_S seconds;
# the order puts 3 baselines, the A/A run and one of each plant first.
set -u
export PYTHONUNBUFFERED=1
HERE=$PWD
mkdir -p /tmp/pkg && ln -sfn "$HERE" /tmp/pkg/receipts && export PYTHONPATH=/tmp/pkg
LIBS=${NSYS_LIBS:-$HERE/.nsys-libs}
export LD_LIBRARY_PATH=$LIBS/x/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NSYS=$(ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)
W=/tmp/explain; rm -rf $W; mkdir -p $W/runs
STEPS=${STEPS:-24}
WARMUP=${WARMUP:-4}
EXTRA_K=${EXTRA_K:-16}
STALL_MS=${STALL_MS:-5}
BUDGET_S=${BUDGET_S:-400}
T0=$(date +%s)
NG=$(nvidia-smi -L | wc -l)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H100*) HOST=h100-device-x$NG ;; *H200*) HOST=h200-device-x$NG ;; *) HOST=gpu-device-x$NG ;; esac
RUN="python3 tests/gpu/receipts_run.py --host-lineage $HOST --preset toy_fsdp2_v1 --regime fsdp2/no-compile"
BASE="--sdpa-backend flash --reduce-dtype bf16"
TRAIN="torchrun --standalone --nproc_per_node=$NG tests/gpu/train_fsdp2.py --steps $STEPS --warmup-steps $WARMUP --batch 16 --d-model 2048"

one() { # $1 = run name, $2 = tag, rest = train args
  local name=$1 tag=$2; shift 2
  local elapsed=$(( $(date +%s) - T0 ))
  if [ $elapsed -gt $BUDGET_S ]; then echo "$name skipped at ${elapsed}s"; return; fi
  local dir=$W/runs/$name
  $RUN --run-name $name --tag $tag --run-dir $dir -- \
    $NSYS profile -t cuda,nvtx --sample=none --cpuctxsw=none --force-overwrite true -o $dir/profile \
      $TRAIN "$@" > $W/runs/$name.out 2>&1
  local rc=$?
  echo "$name exit $rc at $(( $(date +%s) - T0 ))s"
  if [ $rc -ne 0 ]; then tail -25 $W/runs/$name.out; fi
  $NSYS export --type sqlite --force-overwrite true -o $dir/profile.sqlite $dir/profile.nsys-rep > /dev/null 2>&1
  python3 tests/gpu/trim_nsys_export.py $dir/profile.sqlite >> $W/runs/$name.out 2>&1
  gzip -9 $dir/profile.sqlite
  rm -f $dir/profile.nsys-rep
}

one base_1 main $BASE
[ -f $W/runs/base_1/profile.sqlite.gz ] || { echo "the first baseline failed: stopping"; exit 1; }
one base_2 main $BASE
one attn_1 pr-attn --sdpa-backend efficient --reduce-dtype bf16
one base_3 main $BASE
one gemm_1 pr-gemm $BASE --extra-matmuls $EXTRA_K --extra-matmul-size 4096
one aa_1 pr-aa $BASE
one stall_1 pr-stall $BASE --host-stall-ms $STALL_MS
one fp32_1 pr-fp32 --sdpa-backend flash --reduce-dtype fp32
one base_4 main $BASE
one attn_2 pr-attn --sdpa-backend efficient --reduce-dtype bf16
one gemm_2 pr-gemm $BASE --extra-matmuls $EXTRA_K --extra-matmul-size 4096
one stall_2 pr-stall $BASE --host-stall-ms $STALL_MS
one fp32_2 pr-fp32 --sdpa-backend flash --reduce-dtype fp32
one base_5 main $BASE
{ nvidia-smi; nvidia-smi topo -m; python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"; $NSYS --version; date -u +%Y-%m-%dT%H:%M:%SZ; } > $W/machine.txt 2>&1
echo "STEPS=$STEPS WARMUP=$WARMUP EXTRA_K=$EXTRA_K STALL_MS=$STALL_MS HOST=$HOST" >> $W/machine.txt

cd $W && tar czf $OUT/explain_runs.tar.gz machine.txt runs/*.out runs/*/run.log runs/*/profile.sqlite.gz 2>/dev/null
ls -la $OUT; du -sh $W/runs
