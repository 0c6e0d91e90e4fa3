#!/bin/bash
# What a forwarded signal does under torchrun, on the GPU machine (torch there, no polars/duckdb):
#     bash tests/gpu/signals_torchrun.sh        (through the device tool, from the repo root)
# Two CPU-only workers under `torchrun --nproc_per_node=2`, launched by `receipts run`
# (tests/gpu/receipts_run.py), each trapping SIGUSR1 (Slurm's pre-emption warning) and SIGTERM.
#   a) USR1 to `receipts run` only: forwarded to torchrun, its direct child;
#   b) USR1 to every process of the job, as Slurm's proctrack/cgroup signals a step;
#   c) TERM to `receipts run` only (scancel / a time limit): torchrun's own handler passes it on.
# Each worker writes a marker per signal it saw; the run logs and markers come back in $OUT.
set -u
export PYTHONUNBUFFERED=1
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/receipts && export PYTHONPATH=/tmp/pkg
W=/tmp/sig; rm -rf $W; mkdir -p $W
cat > $W/worker.py <<'PY'
import os, signal, sys, time
rank, out = os.environ.get("RANK", "?"), sys.argv[1]
seen = []
def handler(signum, frame):
    seen.append(signal.Signals(signum).name)
    with open(f"{out}/rank{rank}.{signal.Signals(signum).name}", "a") as f:
        f.write(f"{time.time():.3f}\n")
for sig in (signal.SIGUSR1, signal.SIGTERM):
    signal.signal(sig, handler)
print(f"rank {rank} ready", flush=True)
deadline = time.monotonic() + 20
while time.monotonic() < deadline and not ("SIGTERM" in seen or (seen and sys.argv[2] == "usr1")):
    time.sleep(0.05)
time.sleep(1)  # a second forwarded copy, if any, lands before we leave
print(f"rank {rank} saw {seen}", flush=True)
sys.exit(0)
PY
scenario() { # $1 name, $2 signal, $3 who (launcher|all), $4 worker mode
  local d=$W/$1; mkdir -p $d
  python3 tests/gpu/receipts_run.py --run-dir $d/run -- torchrun --standalone --nproc_per_node=2 $W/worker.py $d $4 \
      > $d/out.txt 2>&1 &
  local pid=$!
  for _ in $(seq 200); do [ "$(grep -c ' ready$' $d/run/run.log 2>/dev/null)" = 2 ] && break; sleep 0.1; done
  ps -o pid,ppid,pgid,sid,comm -g "$(ps -o sid= -p $(pgrep -P $pid | head -1) | tr -d ' ')" | sed 's/^/  ps: /'
  if [ "$3" = all ]; then kill -$2 $pid $(pgrep -P $pid) $(pgrep -P $(pgrep -P $pid)) 2>/dev/null
  else kill -$2 $pid; fi
  wait $pid; echo "$1: receipts run exit $?"; ls $d | grep rank | sed 's/^/  marker /'
  grep -E 'saw|SignalException|got signal|exitcode|Traceback' $d/run/run.log | cut -c1-160 | sed 's/^/  log: /'
  tail -1 $d/run/run.log | cut -c1-200 | sed 's/^/  footer: /'
}
scenario a_usr1_launcher USR1 launcher usr1
scenario b_usr1_all USR1 all usr1
scenario c_term_launcher TERM launcher term
mkdir -p "${OUT:-/tmp/out}" && tar czf "${OUT:-/tmp/out}/signals.tgz" -C $W .
