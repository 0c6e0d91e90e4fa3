#!/bin/bash
# The drill-down experiment behind tests/data/slow_step/, in one device call (any kind; 2 GPUs give 2 ranks):
#     bash tests/gpu/slow_step_runs.sh      (through the device tool, from a copy of the repo root, with
#                                            .nsys-libs carried: shared/tools/NSYS_ON_DEVICE.md)
# One run of the explain experiment's baseline (tests/gpu/explain_runs.sh: the FSDP2 toy, SDPA flash, bf16
# reduce-scatter) under nsys, with two planted slow steps and every other step unchanged:
#   step SLOW_STEP   SLOW_K extra bf16 matmuls of 4096 x 4096 after the backward: more GPU work in that
#                    step only, one GEMM kernel with SLOW_K more calls than in a typical step
#   step STALL_STEP  a STALL_MS host stall between forward and backward (the queue drained first): the GPU
#                    idle inside that step, no kernel different
# The export is trimmed (tests/gpu/trim_nsys_export.py) and gzipped, as the explain runs'.
set -u
export PYTHONUNBUFFERED=1
HERE=$PWD
mkdir -p /tmp/pkg && ln -sfn "$HERE" /tmp/pkg/receipts && export PYTHONPATH=/tmp/pkg
LIBS=${NSYS_LIBS:-$HERE/.nsys-libs}
export LD_LIBRARY_PATH=$LIBS/x/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NSYS=$(ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)
W=/tmp/slow_step; rm -rf $W; mkdir -p $W/runs
STEPS=${STEPS:-24}
WARMUP=${WARMUP:-4}
SLOW_STEP=${SLOW_STEP:-12}
SLOW_K=${SLOW_K:-48}
STALL_STEP=${STALL_STEP:-17}
STALL_MS=${STALL_MS:-25}
NG=$(nvidia-smi -L | wc -l)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H100*) HOST=h100-device-x$NG ;; *H200*) HOST=h200-device-x$NG ;; *) HOST=gpu-device-x$NG ;; esac
RUN="python3 tests/gpu/receipts_run.py --host-lineage $HOST --preset toy_fsdp2_v1 --regime fsdp2/no-compile"
TRAIN="torchrun --standalone --nproc_per_node=$NG tests/gpu/train_fsdp2.py --steps $STEPS --warmup-steps $WARMUP --batch 16 --d-model 2048"
name=slowstep_1; dir=$W/runs/$name
$RUN --run-name $name --tag pr-slowstep --run-dir $dir -- \
  $NSYS profile -t cuda,nvtx --sample=none --cpuctxsw=none --force-overwrite true -o $dir/profile \
    $TRAIN --sdpa-backend flash --reduce-dtype bf16 --extra-matmul-size 4096 \
      --slow-step $SLOW_STEP --slow-step-matmuls $SLOW_K --stall-step $STALL_STEP --stall-step-ms $STALL_MS \
    > $W/runs/$name.out 2>&1
echo "$name exit $?"; tail -5 $W/runs/$name.out
$NSYS export --type sqlite --force-overwrite true -o $dir/profile.sqlite $dir/profile.nsys-rep > /dev/null 2>&1
$NSYS stats --report cuda_gpu_kern_sum --format csv --output $dir/kern_sum $dir/profile.sqlite > /dev/null 2>&1
python3 tests/gpu/trim_nsys_export.py $dir/profile.sqlite >> $W/runs/$name.out 2>&1
gzip -9 $dir/profile.sqlite
rm -f $dir/profile.nsys-rep
{ nvidia-smi; nvidia-smi topo -m; python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"; $NSYS --version; date -u +%Y-%m-%dT%H:%M:%SZ; } > $W/machine.txt 2>&1
echo "STEPS=$STEPS WARMUP=$WARMUP SLOW_STEP=$SLOW_STEP SLOW_K=$SLOW_K STALL_STEP=$STALL_STEP STALL_MS=$STALL_MS HOST=$HOST" >> $W/machine.txt
cd $W && tar czf $OUT/slow_step_runs.tar.gz machine.txt runs/*.out runs/*/run.log runs/*/profile.sqlite.gz runs/*/kern_sum*.csv 2>/dev/null
ls -la $OUT; du -sh $W/runs
