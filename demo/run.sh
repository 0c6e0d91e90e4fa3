#!/usr/bin/env bash
# The README's first command: set up, then ingest the bundled real sample data (genuine runs on
# H200 machines, tests/data/gpu/), show a receipt, compare a same-lane pair, watch a cross-lane pair
# get refused, print the step-time anatomy from the attached Nsight Systems export, show verdicts
# that know the run-to-run noise on repeated H100 runs (lane history, compare, check against tag:main),
# explain why a run is slower, open a slow step to its kernels, and show a run's memory geometry.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e ".[dashboard]"

export RECEIPTS_DB=${RECEIPTS_DB:-demo.duckdb}
rm -f "$RECEIPTS_DB"
R=".venv/bin/receipts --registry tests/data/registry.toml"  # the lanes of the bundled data
G=tests/data/gpu

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

step $R ingest $G/fsdp2_2gpu_nsys/run.log $G/fsdp2_2gpu_kineto/run.log $G/fsdp2_1gpu_nsys/run.log
step $R ingest $G/fsdp2_2gpu_nsys.sqlite.gz --attach fsdp2_2gpu_nsys
step $R ingest $G/fsdp2_2gpu_kineto/traces --attach fsdp2_2gpu_kineto
step $R list
step $R show fsdp2_2gpu_nsys
step $R compare fsdp2_2gpu_nsys fsdp2_2gpu_kineto
step $R compare fsdp2_2gpu_nsys fsdp2_1gpu_nsys || echo "(exit $?: refused, as it should be: different host lineage)"
step $R anatomy fsdp2_2gpu_nsys --by step

# Verdicts that know the noise (tests/data/noise/): ten unchanged runs of one configuration on one H100
# (tag main), two with a slowdown under the noise floor, three with a planted 2.5% slowdown.
N=tests/data/noise
step $R ingest $N/aa_* $N/subfloor_* $N/slow_*
step $R history aa_01
step $R compare aa_01 aa_08
step $R check slow_1 subfloor_1 --against tag:main --last 10 || echo "(exit $?: slow_1 is slower beyond the lane's noise; subfloor_1 is not)"
# Production exports read right: a torch.compile(mode="reduce-overhead") loop whose CUDA-graph
# replays are busy time, an MLPerf result with time to train as its headline, and a planted straggler.
C=$G/cudagraph
step $R ingest $C/graphs_nsys_graph/run.log
step $R ingest $C/graphs_nsys_graph.sqlite.gz --attach graphs_nsys_graph
step $R anatomy graphs_nsys_graph
step $R ingest tests/data/mlperf/v5.1__Dell_1xXE9680x8H200-SXM-141GB_retinanet_result_0.txt --run-name retinanet_h200x8 \
  --host-lineage dell-xe9680-h200 --preset mlperf_retinanet --regime "ddp/unknown-compile"
step $R show retinanet_h200x8
S=$G/straggler
step $R ingest $S/straggler_base_nsys/run.log $S/straggler_plant_nsys/run.log --preset toy_fsdp2_gpubound_v1
step $R ingest $S/straggler_base_nsys.sqlite.gz --attach straggler_base_nsys
step $R ingest $S/straggler_plant_nsys.sqlite.gz --attach straggler_plant_nsys
step $R stragglers straggler_plant_nsys
step $R compare straggler_base_nsys straggler_plant_nsys
# One job profiled one nsys report per rank: the run directory holds run.log and rank{0,1}.sqlite.gz,
# read as ONE anatomy of both ranks (one task per export), each export's clock moved onto the job's.
step $R ingest $G/multiexport/per_rank_gloo --workers 2
step $R anatomy per_rank_gloo --by rank
# Why a run is slower (tests/data/explain/): five profiled baseline runs on 2 x H200 and one with the attention
# backend forced from flash to the memory-efficient kernel; explain names the kernels that vanished and appeared.
E=tests/data/explain
step $R ingest $E/base_1 $E/base_2 $E/base_3 $E/base_4 $E/base_5 $E/attn_1
step $R explain attn_1 --against tag:main --level category --level kernel
# From a slow step to its kernels (tests/data/slow_step/): one 2 x H100 run with 48 extra GEMMs planted in step 12
# and a 25 ms host stall in step 17; the drill-down sets each against the run's typical steady step.
step $R ingest tests/data/slow_step/slowstep_1
step $R anatomy slowstep_1 --step 12 --top 5
# Memory geometry (tests/data/memory/): the same FSDP2 model with AdamW and with SGD, captured with their
# snapshots; the optimizer bucket halves, and compare names it.
M=tests/data/memory
step $R ingest $M/adamw_2gpu $M/sgd_2gpu
step $R show sgd_2gpu
step $R estimate --params 67170304 --shard-degree 2 --optimizer sgd --master-dtype fp32
# GPU telemetry recorded on an H200 (tests/data/telemetry/): the clocks held by its 700 W power cap, per rank.
step $R ingest tests/data/telemetry/launched
step $R show launched
# The morning report over the week these runs ran in: change points with their commits, regressions, quiet lanes.
step $R report --since 7d --until 2026-11-28
printf '\nOpen the dashboard on this store:\n  %s --db %s dashboard\n' "$R" "$RECEIPTS_DB"
