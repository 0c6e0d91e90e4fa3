#!/bin/bash
# Round-20 captures on the GPU machine (issues 13 and 14), through the device tool from the repo root
# with `.nsys-libs` carried:
#     PART=graphs    bash tests/gpu/device_run_r20.sh   # CUDA graphs: nsys graph mode, node mode, profiler
#     PART=straggler bash tests/gpu/device_run_r20.sh   # 2 GPUs: FSDP2 with and without a planted straggler
# Writes small artifacts under $OUT; see tests/data/gpu/cudagraph/README.md and tests/data/gpu/straggler/README.md.
set -u
export PYTHONUNBUFFERED=1
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/receipts && export PYTHONPATH=/tmp/pkg
export LD_LIBRARY_PATH=$PWD/.nsys-libs/x/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
W=/tmp/r20; rm -rf $W; mkdir -p $W/stats
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H100*) G=h100 ;; *H200*) G=h200 ;; *) G=gpu ;; esac
NSYS_ARGS="-t cuda,nvtx --sample=none --cpuctxsw=none --force-overwrite true"

export_stats() { # $1 = run dir (holds profile.nsys-rep)
  local d=$1 n=$(basename $1)
  $NSYS export --type sqlite --force-overwrite true -o $d/profile.sqlite $d/profile.nsys-rep > /dev/null
  $NSYS stats --report cuda_gpu_kern_sum,nvtx_sum,nvtx_pushpop_trace --format csv --output $W/stats/$n $d/profile.sqlite > /dev/null 2>&1
  gzip -c $d/profile.sqlite > $OUT/$n.sqlite.gz
}

if [ "${PART:-graphs}" = graphs ]; then
  export CUDA_VISIBLE_DEVICES=0
  RUN="python3 tests/gpu/receipts_run.py --host-lineage $G-device-x1 --preset toy_gpt_graphs_v1 --regime single/full-compile"
  # Warm the inductor cache once (not kept) so the three captured runs compile alike; if the compiled
  # loop fails on this torch, fall back to one manually captured graph per step.
  CAPTURE=${CAPTURE:-compile}
  python3 tests/gpu/train_graphs.py --steps 12 --capture $CAPTURE > $W/warm.out 2>&1 || CAPTURE=manual
  echo "capture: $CAPTURE" | tee $W/capture.txt
  TRAIN="python3 tests/gpu/train_graphs.py --steps 30 --capture $CAPTURE"
  for mode in graph node; do
    d=$W/graphs_nsys_$mode
    $RUN --run-name graphs_nsys_$mode --run-dir $d -- \
      $NSYS profile $NSYS_ARGS --cuda-graph-trace=$mode -o $d/profile $TRAIN > $d.out 2>&1
    echo "graphs_nsys_$mode exit $?"; tail -3 $d.out
    export_stats $d
  done
  d=$W/graphs_kineto
  $RUN --run-name graphs_kineto --run-dir $d -- $TRAIN --profile-dir $d/traces > $d.out 2>&1
  echo "graphs_kineto exit $?"; tail -3 $d.out
  cp $d/traces/*.pt.trace.json.gz $OUT/ 2>/dev/null
  cd $W && tar czf $OUT/graphs_small.tar.gz stats capture.txt graphs_*/run.log *.out
else
  RUN="python3 tests/gpu/receipts_run.py --host-lineage $G-device-x2 --preset toy_fsdp2_v1 --regime fsdp2/no-compile"
  # GPU-bound shape (see tests/gpu/noise_runs.sh): extra GPU work on one rank then delays the others.
  TRAIN="torchrun --standalone --nproc_per_node=2 tests/gpu/train_fsdp2.py --steps 20 --batch 16 --d-model 2048"
  PLANT="--straggler-rank 1 --straggler-matmuls ${K:-30}"
  one() { # $1 = name, $2 = nsys|kineto|plain, rest = extra train args
    local n=$1 how=$2; shift 2; local d=$W/$n
    case $how in
      nsys) $RUN --run-name $n --run-dir $d -- $NSYS profile $NSYS_ARGS -o $d/profile $TRAIN "$@" > $d.out 2>&1 ;;
      kineto) $RUN --run-name $n --run-dir $d -- $TRAIN --profile-dir $d/traces "$@" > $d.out 2>&1 ;;
      plain) $RUN --run-name $n --run-dir $d -- $TRAIN "$@" > $d.out 2>&1 ;;
    esac
    echo "$n exit $?"; tail -2 $d.out
    [ $how = nsys ] && export_stats $d
    if [ $how = kineto ]; then mkdir -p $OUT/$n; cp $d/traces/*.pt.trace.json.gz $OUT/$n/; fi
  }
  one straggler_base_nsys nsys
  one straggler_plant_nsys nsys $PLANT
  one straggler_base_kineto kineto
  one straggler_plant_kineto kineto $PLANT
  one straggler_base_plain plain
  one straggler_plant_plain plain $PLANT
  cd $W && tar czf $OUT/straggler_small.tar.gz stats straggler_*/run.log *.out
fi
ls -la $OUT
