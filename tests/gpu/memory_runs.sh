#!/bin/bash
# The memory-geometry runs behind tests/data/memory/, in one device call on 2 GPUs:
#     bash tests/gpu/memory_runs.sh           (through the device tool, from the root of a copy of the tree)
# Four runs of tests/gpu/train_fsdp2.py under `receipts run` (tests/gpu/receipts_run.py: the device has no
# polars/duckdb), each with the recorder's memory geometry (--watch-memory) and a memory snapshot of two
# steady steps per rank:
#   adamw_2gpu        FSDP2 over 2 GPUs, AdamW (foreach: its step counter stays on the host)
#   sgd_2gpu          the same with SGD, momentum 0.9: one state buffer per parameter against AdamW's two
#   adamw_2gpu_ckpt   the same as adamw_2gpu with full activation checkpointing
#   adamw_1gpu        adamw_2gpu on one GPU (FSDP2 over one rank: nothing sharded)
# Brings back $OUT/memory_runs.tar.gz: each run's directory (run.log, snapshot/rank<N>.pickle.gz) and machine.txt.
set -u
export PYTHONUNBUFFERED=1
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/receipts && export PYTHONPATH=/tmp/pkg
W=/tmp/memory; rm -rf $W; mkdir -p $W
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H100*) HOST=h100-device ;; *H200*) HOST=h200-device ;; *) HOST=gpu-device ;; esac
{ date -u +%Y-%m-%dT%H:%M:%SZ; uname -a; nproc; nvidia-smi -L;
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } > $W/machine.txt 2>&1
# A small shape: each run is a few seconds of steps; 8 steps, 2 of them warm-up, the snapshot over steps 3-4.
SHAPE="--steps 8 --warmup-steps 2 --batch 4 --seq 1024 --d-model 1024 --layers 4 --vocab 8192"

one() { # $1 = run name, $2 = GPUs, rest = extra train args
  local name=$1 np=$2; shift 2
  python3 tests/gpu/receipts_run.py --host-lineage $HOST-x$np --preset toy_fsdp2_v1 --regime fsdp2/no-compile \
    --run-name $name --run-dir $W/$name -- torchrun --standalone --nproc_per_node=$np tests/gpu/train_fsdp2.py \
    $SHAPE --watch-memory --memory-snapshot $W/$name/snapshot "$@" > $W/$name.out 2>&1
  echo "$name exit $?"
  gzip -9 -f $W/$name/snapshot/*.pickle 2>/dev/null
  ls -la $W/$name/snapshot 2>&1
}

one adamw_2gpu 2 --optimizer adamw
one sgd_2gpu 2 --optimizer sgd
one adamw_2gpu_ckpt 2 --optimizer adamw --activation-checkpointing
one adamw_1gpu 1 --optimizer adamw
grep -h -E "^(TORCH_MEMORY|SNAPSHOT_PEAKS|TORCH_PEAKS)" $W/*/run.log | cut -c1-300
tail -5 $W/*.out
tar -czf $OUT/memory_runs.tar.gz -C $W .
ls -la $OUT
