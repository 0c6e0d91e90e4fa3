#!/bin/bash
# The planted explain corpus behind benchmarks/bench_explain_power.py and tests/data/explain_corpus/, on ONE GPU
# (kind nvidia-h200), through the device tool, from a copy of the repo's files with .nsys-libs carried
# (shared/tools/NSYS_ON_DEVICE.md):
#     bash tests/gpu/explain_corpus.sh dry       2 runs (a baseline under each profiler) to catch errors cheaply
#     bash tests/gpu/explain_corpus.sh nsys      every run under Nsight Systems      (one device call each:
#     bash tests/gpu/explain_corpus.sh kineto    every run under the PyTorch profiler  nsys and Kineto cannot
#                                                                                      share CUPTI)
#     ONLY="recompute base_1" bash tests/gpu/explain_corpus.sh nsys    only the runs named (a run redone)
# Writes $OUT/corpus_<profiler>.tar.gz (split into 15 MiB parts when larger) and $OUT/machine_<profiler>.txt.
#
# Every run is the FSDP2 toy tests/gpu/train_fsdp2.py on 1 GPU (4 blocks, d_model 2048, batch 12 x seq 1024,
# bf16, fused AdamW), STEPS steps of which WARMUP are the warm-up (the recorder's `warmup` phase), each step an NVTX
# range `step N` (and a ProfilerStep#N under Kineto), the loss read with .item() at the end of each step (as a loop
# logging its loss does: the host waits for the GPU there). Launched with `receipts run --no-ingest`
# (tests/gpu/receipts_run.py), each run its own processes, baselines interleaved with the plants:
#   base_N        --sdpa-backend flash --reduce-dtype bf16 --loss-item                   tag aa
#   gemm2/4/16    + K extra bf16 4096 x 4096 matmuls after each backward                 tag plant
#   stall05       + a 0.5 ms host stall between forward and backward (queue drained: GPU idle inside its span)
#   stall1        + a 1 ms host stall there
#   stall3        + a 3 ms host stall there
#   stall1start   + a 1 ms host stall first thing inside the `step N` range, before the first launch (outside
#                   the step's GPU span)
#   attn          SDPA forced to the memory-efficient kernel instead of flash
#   dtype         the output projection in fp32 (its own FSDP2 unit, TF32 matmuls)
#   recompute     activation recompute of the first block (of 4)
#   d2h           + a 32 MiB device-to-host copy per step (pinned, non-blocking) after the forward
#   loader        + a 2 ms dataloader-style host stall between steps (outside every `step N` range)
# nsys: `nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none`, exported to SQLite after all runs (in parallel,
# the GPU idle by then), trimmed by tests/gpu/trim_nsys_export.py, gzipped. Kineto: --profile-all (every step but
# the profiler's own first), traces trimmed by tests/gpu/trim_kineto_trace.py. Runs stop being started past
# BUDGET_S seconds. TRIM=0 leaves the Kineto traces whole (to be trimmed where they come back).
set -u
export PYTHONUNBUFFERED=1
MODE=${1:?dry, nsys or kineto}
HERE=$PWD
mkdir -p /tmp/pkg && ln -sfn "$HERE" /tmp/pkg/receipts && export PYTHONPATH=/tmp/pkg
LIBS=${NSYS_LIBS:-$HERE/.nsys-libs}
export LD_LIBRARY_PATH=$LIBS/x/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NSYS=$(ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)
W=/tmp/corpus; rm -rf $W; mkdir -p $W/runs
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-4}
BATCH=${BATCH:-12}
BASES=${BASES:-8}
BUDGET_S=${BUDGET_S:-470}
T0=$(date +%s)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H100*) HOST=h100-device-x1 ;; *H200*) HOST=h200-device-x1 ;; *) HOST=gpu-device-x1 ;; esac
RUN="python3 tests/gpu/receipts_run.py --host-lineage $HOST --preset toy_fsdp2_v1 --regime fsdp2/no-compile"
BASE="--sdpa-backend flash --reduce-dtype bf16 --loss-item"
TRAIN="torchrun --standalone --nproc_per_node=1 tests/gpu/train_fsdp2.py --steps $STEPS --warmup-steps $WARMUP --batch $BATCH --d-model 2048"

one() { # $1 = profiler, $2 = run name, $3 = tag, rest = train args
  local prof=$1 name=${1}_$2 tag=$3; shift 3
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" ${name#*_} "* ]]; then return; fi
  local elapsed=$(( $(date +%s) - T0 ))
  if [ $elapsed -gt $BUDGET_S ]; then echo "$name skipped at ${elapsed}s"; return; fi
  local dir=$W/runs/$name
  if [ $prof = nsys ]; then
    $RUN --run-name $name --tag $tag --run-dir $dir -- \
      $NSYS profile -t cuda,nvtx --sample=none --cpuctxsw=none --force-overwrite true -o $dir/profile \
        $TRAIN "$@" > $W/runs/$name.out 2>&1
  else
    $RUN --run-name $name --tag $tag --run-dir $dir -- $TRAIN "$@" --profile-dir $dir --profile-all \
      > $W/runs/$name.out 2>&1
  fi
  local rc=$?
  echo "$name exit $rc at $(( $(date +%s) - T0 ))s: $(grep -o '"step_ms":[0-9.]*' $dir/run.log 2>/dev/null | tail -1)"
  if [ $rc -ne 0 ]; then tail -25 $W/runs/$name.out; fi
}

nsys_post() { # export, trim, gzip: after the runs, in parallel
  local rep=$1 dir; dir=$(dirname $rep)
  $NSYS export --type sqlite --force-overwrite true -o $dir/profile.sqlite $rep > /dev/null 2>&1
  python3 tests/gpu/trim_nsys_export.py $dir/profile.sqlite && gzip -9 $dir/profile.sqlite && rm -f $rep
}
export -f nsys_post; export NSYS

plants() { # $1 = profiler: baselines interleaved with the 12 plants
  local p=$1 b=0
  base() { b=$((b + 1)); one $p base_$b aa $BASE; }
  base
  one $p gemm2 plant $BASE --extra-matmuls 2 --extra-matmul-size 4096
  one $p stall05 plant $BASE --host-stall-ms 0.5
  base
  one $p attn plant --sdpa-backend efficient --reduce-dtype bf16 --loss-item
  one $p loader plant $BASE --loader-stall-ms 2
  base
  one $p gemm4 plant $BASE --extra-matmuls 4 --extra-matmul-size 4096
  one $p stall1start plant $BASE --host-stall-ms 1 --host-stall-at start
  base
  one $p dtype plant $BASE --head-fp32
  one $p d2h plant $BASE --extra-d2h-mib 32
  base
  one $p gemm16 plant $BASE --extra-matmuls 16 --extra-matmul-size 4096
  one $p stall3 plant $BASE --host-stall-ms 3
  base
  one $p recompute plant $BASE --checkpoint-layers 1
  one $p stall1 plant $BASE --host-stall-ms 1
  while [ $b -lt $BASES ]; do base; done
}

case $MODE in
  dry) one nsys base_1 aa $BASE; one kineto base_1 aa $BASE
       cp $W/runs/kineto_base_1/*.pt.trace.json.gz $W/untrimmed.pt.trace.json.gz 2>/dev/null ;;
  nsys|kineto) plants $MODE ;;
esac
echo "runs done at $(( $(date +%s) - T0 ))s"
ls $W/runs/*/profile.nsys-rep 2>/dev/null | xargs -r -P 8 -I{} bash -c 'nsys_post {}' > $W/trimmed_nsys.txt 2>&1
[ "${TRIM:-1}" = 0 ] || ls $W/runs/*/*.pt.trace.json.gz 2>/dev/null | xargs -r -P 8 -n 1 python3 tests/gpu/trim_kineto_trace.py \
  > $W/trimmed_kineto.txt 2>&1
echo "post-processing done at $(( $(date +%s) - T0 ))s"
{ nvidia-smi; python3 -c "import torch; print(torch.__version__, torch.version.cuda)"; python3 --version
  $NSYS --version; date -u +%Y-%m-%dT%H:%M:%SZ
  echo "MODE=$MODE STEPS=$STEPS WARMUP=$WARMUP BATCH=$BATCH BASES=$BASES HOST=$HOST"; } > $W/machine_$MODE${ONLY:+_redo}.txt 2>&1
cp $W/machine_$MODE${ONLY:+_redo}.txt $OUT/
cd $W && tar czf $W/corpus_$MODE${ONLY:+_redo}.tar.gz machine_*.txt trimmed_*.txt runs/*.out runs/*/run.log \
  runs/*/profile.sqlite.gz runs/*/*.pt.trace.json.gz $(ls untrimmed.pt.trace.json.gz 2>/dev/null) 2>/dev/null
TAR=$W/corpus_$MODE${ONLY:+_redo}.tar.gz
if [ $(stat -c %s $TAR) -gt 15728640 ]; then split -b 15M -d $TAR $OUT/$(basename $TAR).part; else cp $TAR $OUT/; fi
ls -la $OUT; du -sh $W/runs; cat $W/trimmed_*.txt | tail -4
