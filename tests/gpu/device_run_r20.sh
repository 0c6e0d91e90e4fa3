#!/bin/bash
# Round-20 captures on the GPU machine (issues 13 and 14), through the device tool from the repo root
# with `.nsys-libs` carried:
#     PART=graphs    bash tests/gpu/device_run_r20.sh   # CUDA graphs: nsys graph mode, node mode, profiler
#     PART=straggler bash tests/gpu/device_run_r20.sh   # 2 GPUs: FSDP2 with and without a planted straggler
#     PART=straggler RANK=0 bash tests/gpu/device_run_r20.sh   # the plant on the other rank, plant runs only
#     PART=kineto_long bash tests/gpu/device_run_r20.sh   # profiler traces of 12 steps: base, rank-0 and rank-1 plants
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

if [ "${PART:-graphs}" = kineto_long ]; then
  # Three profiled steps give a what-if from three numbers (one slow first profiled step moves it 2x);
  # twelve give a median that means something. Same shape as the straggler runs, 30 steps.
  RUN="python3 tests/gpu/receipts_run.py --host-lineage $G-device-x2 --preset toy_fsdp2_v1 --regime fsdp2/no-compile"
  TRAIN="torchrun --standalone --nproc_per_node=2 tests/gpu/train_fsdp2.py --steps 30 --batch 16 --d-model 2048"
  for spec in "base:" "rank0_plant:--straggler-rank 0 --straggler-matmuls 30" "plant:--straggler-rank 1 --straggler-matmuls 30"; do
    n=straggler_${spec%%:*}_kineto12; d=$W/$n
    $RUN --run-name $n --run-dir $d -- $TRAIN --profile-dir $d/traces --profile-active 12 ${spec#*:} > $d.out 2>&1
    echo "$n exit $?"; tail -1 $d.out
    mkdir -p $OUT/$n; cp $d/traces/*.pt.trace.json.gz $OUT/$n/
  done
  cd $W && tar czf $OUT/kineto_long_small.tar.gz straggler_*/run.log *.out
elif [ "${PART:-graphs}" = graphs ]; then
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
  PLANT="--straggler-rank ${RANK:-1} --straggler-matmuls ${K:-30}"
  P=${RANK:+rank${RANK}_}
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
  if [ -z "${RANK:-}" ]; then
    one straggler_base_nsys nsys
    one straggler_base_kineto kineto
    one straggler_base_plain plain
  fi
  one straggler_${P}plant_nsys nsys $PLANT
  one straggler_${P}plant_kineto kineto $PLANT
  one straggler_${P}plant_plain plain $PLANT
  nvidia-smi topo -m > $W/nvidia-smi_topo_m.txt 2>&1
  python3 -m torch.utils.collect_env > $W/collect_env.txt 2>&1
  cd $W && tar czf $OUT/straggler_small.tar.gz stats straggler_*/run.log *.out nvidia-smi_topo_m.txt collect_env.txt
fi
ls -la $OUT
