#!/bin/bash
# One job, one nsys export per rank, through the device tool from the repo root with
# `.nsys-libs` carried:
#     bash tests/gpu/device_run_multiexport.sh
# With one GPU the two ranks share it (gloo + DDP, see train_fsdp2.py --backend); with two or more each
# rank has its own (NCCL + FSDP2). Writes under $OUT: the run directory (run.log + rank{0,1}.sqlite.gz)
# and NVIDIA's own `nsys stats` of each export. See tests/data/gpu/multiexport/README.md.
set -u
export PYTHONUNBUFFERED=1
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/receipts && export PYTHONPATH=/tmp/pkg
export LD_LIBRARY_PATH=$PWD/.nsys-libs/x/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
NG=$(nvidia-smi -L | wc -l)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H100*) G=h100 ;; *H200*) G=h200 ;; *) G=gpu ;; esac
if [ "$NG" -ge 2 ]; then BACKEND=nccl; REGIME=fsdp2/no-compile; else BACKEND=gloo; REGIME=ddp/no-compile; fi
W=/tmp/multi; rm -rf $W; mkdir -p $W/stats
n=per_rank_${BACKEND}; d=$W/$n
python3 tests/gpu/receipts_run.py --host-lineage $G-device-x$NG --preset toy_fsdp2_v1 --regime $REGIME \
  --run-name $n --run-dir $d -- \
  torchrun --standalone --nproc_per_node=2 --no-python bash tests/gpu/nsys_per_rank.sh $d \
  python3 tests/gpu/train_fsdp2.py --steps 20 --backend $BACKEND > $W/$n.out 2>&1
echo "$n exit $?"; tail -5 $W/$n.out
for r in 0 1; do
  $NSYS export --type sqlite --force-overwrite true -o $d/rank$r.sqlite $d/rank$r.nsys-rep > /dev/null 2>&1
  $NSYS stats --report cuda_gpu_kern_sum,nvtx_sum,nvtx_pushpop_trace --format csv --output $W/stats/${n}_rank$r \
    $d/rank$r.sqlite > /dev/null 2>&1
done
mkdir -p $OUT/$n
cp $d/run.log $OUT/$n/
for r in 0 1; do gzip -c $d/rank$r.sqlite > $OUT/$n/rank$r.sqlite.gz; done
(cd $W && tar czf $OUT/stats.tar.gz stats)
cp $W/$n.out $OUT/
{ date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi -L; $NSYS --version; python3 -c 'import torch; print(torch.__version__)'; } > $OUT/machine.txt 2>&1
ls -la $OUT $OUT/$n
