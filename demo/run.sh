#!/usr/bin/env bash
# The README's first command: set up, then ingest the bundled real sample data (genuine runs on
# H200 machines, tests/data/gpu/), show a receipt, compare a same-lane pair, watch a cross-lane pair
# get refused, and print the step-time anatomy from the attached Nsight Systems export.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e ".[dashboard]"

export RECEIPTS_DB=${RECEIPTS_DB:-demo.duckdb}
rm -f "$RECEIPTS_DB"
R=.venv/bin/receipts
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
printf '\nDashboard: %s dashboard   (store: %s)\n' "$R" "$RECEIPTS_DB"
