#!/bin/bash
# The memory-fit runs behind tests/data/memory/fit/ and docs/memory.md, in one device call on one GPU:
#     bash tests/gpu/memory_fit.sh        (through the device tool, from the root of a copy of the tree)
# For each factory of tests/gpu/memory_model.py (FSDP2 on 1 rank: adamw, sgd, adamw_fused, adamw_ckpt; and plain,
# a module without fully_shard): the model-based estimate (capture/model_estimate.py: FSDPMemTracker under
# FakeTensorMode with a fake process group; for 1 rank, and for adamw 8 ranks too) and a real run
# (tests/gpu/memory_fit_run.py: the recorder's footer and torch's max_memory_allocated). The runs share the GPU
# at once: each process has its own caching allocator, so each one's peaks are its own.
# Then a memory snapshot over 1 GB (tests/gpu/big_snapshot.py), and receipts' reader's peak RSS and time on it
# (tests/gpu/measure_ingest.py); the snapshot itself stays there.
# Brings back $OUT/memory_fit.tar.gz.
set -u
export PYTHONUNBUFFERED=1
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/receipts && export PYTHONPATH=/tmp/pkg
W=/tmp/fit; rm -rf $W; mkdir -p $W
{ date -u +%Y-%m-%dT%H:%M:%SZ; uname -a; nproc; nvidia-smi -L;
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } > $W/machine.txt 2>&1
FACTORIES="adamw sgd adamw_fused adamw_ckpt plain"
( timeout 200 python3 tests/gpu/big_snapshot.py --out /tmp/big.pickle > $W/big_snapshot.out 2>&1 ) &
BIG=$!
PORT=29510
PIDS=()
for f in $FACTORIES; do
  mkdir -p $W/$f; PORT=$((PORT + 1))
  ( timeout 240 python3 -c "
import json, sys
from receipts.capture.model_estimate import track
print(json.dumps(track('tests/gpu/memory_model.py:$f', world_size=1)))" > $W/$f/estimate.json 2> $W/$f/estimate.err ) &
  PIDS+=($!)
  ( MASTER_PORT=$PORT timeout 240 python3 tests/gpu/memory_fit_run.py --factory $f --out $W/$f > $W/$f/run.out 2>&1 ) &
  PIDS+=($!)
done
( timeout 240 python3 -c "
import json
from receipts.capture.model_estimate import track
print(json.dumps(track('tests/gpu/memory_model.py:adamw', world_size=8)))" > $W/adamw/estimate_8ranks.json 2> $W/adamw/estimate_8ranks.err ) &
PIDS+=($!)
wait "${PIDS[@]}"
for f in $FACTORIES; do echo "== $f"; head -c 600 $W/$f/estimate.json; tail -2 $W/$f/run.out; tail -3 $W/$f/estimate.err; done
tar -czf $OUT/memory_fit.tar.gz -C $W .
wait $BIG
cat $W/big_snapshot.out | tail -3
ls -la /tmp/big.pickle
timeout 200 /usr/bin/time -v python3 tests/gpu/measure_ingest.py /tmp/big.pickle > $W/ingest.out 2> $W/ingest.time
cat $W/ingest.out; grep -E "Maximum resident|Elapsed" $W/ingest.time; tail -3 $W/ingest.time
cp $W/ingest.out $W/ingest.time $W/big_snapshot.out $OUT/ 2>/dev/null
ls -la $OUT
