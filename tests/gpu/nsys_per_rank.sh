#!/bin/bash
# One Nsight Systems session per rank: torchrun starts this once per rank (`torchrun --no-python bash
# tests/gpu/nsys_per_rank.sh OUTDIR CMD...`), so each export holds ONE process and names its rank in
# the captured environment (RANK), the layout of a multi-node job profiled one report per rank or node.
set -u
out=$1; shift
exec "$NSYS" profile -t cuda,nvtx --sample=none --cpuctxsw=none --force-overwrite true \
  -o "$out/rank${RANK}" "$@"
