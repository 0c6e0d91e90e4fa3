#!/bin/bash
# Everything this project runs on the GPU machine, in one call (device time is scarce).
# Invoked through the device tool from the repo root, with `.nsys-libs` carried:
#     bash tests/gpu/device_run.sh
# Writes small artifacts under $OUT (see tests/data/gpu/README.md for what each is).
set -u
export PYTHONUNBUFFERED=1
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/receipts && export PYTHONPATH=/tmp/pkg
export LD_LIBRARY_PATH=$PWD/.nsys-libs/x/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
W=/tmp/work; rm -rf $W; mkdir -p $W/sysinfo $W/stats
S=$W/sysinfo
NG=$(nvidia-smi -L | wc -l)
TAG=h200x${NG}

{ date -u +%Y-%m-%dT%H:%M:%SZ; uname -a; nproc; } > $S/machine.txt
nvidia-smi > $S/nvidia-smi.txt 2>&1
nvidia-smi topo -m > $S/nvidia-smi_topo_m.txt 2>&1
python3 -m torch.utils.collect_env > $S/collect_env.txt 2>&1
cat /proc/sys/kernel/numa_balancing > $S/numa_balancing.txt 2>&1
$NSYS --version > $S/nsys_version.txt 2>&1
python3 -c "import importlib.util as u; print({m: bool(u.find_spec(m)) for m in ('polars','duckdb','nvtx','typer','sqlalchemy')})" > $S/python_modules.txt 2>&1
env | grep -E '^(NCCL|TORCH_|CUDA|PYTORCH|NVSHMEM)' | sort > $S/env_watched.txt

RUN="python3 tests/gpu/receipts_run.py --preset toy_fsdp2_v1 --regime fsdp2/no-compile"
profile() { # $1 = run dir, $2 = nproc, rest = extra train args
  local dir=$1 np=$2; shift 2
  $RUN --host-lineage h200-device-x$np --run-name $(basename $dir) --run-dir $dir -- \
    $NSYS profile -t cuda,nvtx --sample=none --cpuctxsw=none --force-overwrite true -o $dir/profile \
    torchrun --standalone --nproc_per_node=$np tests/gpu/train_fsdp2.py --steps 20 "$@"
  echo "exit code $? for $dir"
  $NSYS export --type sqlite --force-overwrite true -o $dir/profile.sqlite $dir/profile.nsys-rep
  $NSYS stats --report cuda_gpu_kern_sum,nvtx_sum,nvtx_gpu_proj_sum,nvtx_pushpop_trace --format csv \
    --output $W/stats/$(basename $dir) $dir/profile.sqlite > /dev/null
  $NSYS stats --report cuda_gpu_kern_sum,nvtx_sum --format csv $dir/profile.sqlite > $W/stats/$(basename $dir)_stats.csv
}

# (a) 2 GPUs under nsys; (b) the same on 1 GPU; (a') 2 GPUs with torch.profiler instead of nsys
if [ "$NG" -ge 2 ]; then
  profile $W/fsdp2_2gpu_nsys 2
  $RUN --host-lineage h200-device-x2 --run-name fsdp2_2gpu_kineto --run-dir $W/fsdp2_2gpu_kineto -- \
    torchrun --standalone --nproc_per_node=2 tests/gpu/train_fsdp2.py --steps 20 --profile-dir $W/fsdp2_2gpu_kineto/traces
  echo "exit code $? for kineto"
fi
profile $W/fsdp2_1gpu_nsys 1
# (e) recorder overhead on a real loop, one GPU
python3 benchmarks/bench_capture_overhead.py --out $W/overhead.json > $W/overhead.txt 2>&1
tail -30 $W/overhead.txt

# Bring back: one tarball of the small text artifacts, the exports gzipped one per file.
cd $W
tar czf $OUT/gpu_small.tar.gz sysinfo stats overhead.json overhead.txt */run.log
for d in fsdp2_2gpu_nsys fsdp2_1gpu_nsys; do
  [ -f $d/profile.sqlite ] && gzip -c $d/profile.sqlite > $OUT/${d}.sqlite.gz
done
[ -f fsdp2_2gpu_nsys/profile.nsys-rep ] && cp fsdp2_2gpu_nsys/profile.nsys-rep $OUT/fsdp2_2gpu_nsys.nsys-rep
for f in fsdp2_2gpu_kineto/traces/*.pt.trace.json.gz; do [ -f "$f" ] && cp "$f" $OUT/; done
ls -la $OUT; du -sh $W/*/
