"""Our Kineto parser against HolisticTraceAnalysis on the same real traces, in the same run.

    .venv/bin/python benchmarks/bench_kineto_vs_hta.py [--repeat 3] [--hta-python /tmp/hta-venv/bin/python]

For each trace set of benchmarks/hta_reference.py, the same files for every contender, each run in a fresh
process of its own and timed inside it, imports excluded, the same way on both sides:
  ours        `parse_files` (read, attribute, anatomy rows), the category rules loaded inside the timing as an
              ingest does (`--child FILE...`)
  HTA json    TraceAnalysis load + get_temporal_breakdown + get_comm_comp_overlap under HTA's default parser
              (`hta_reference.py --time-only`)
  HTA ijson   the same under HTA's fastest documented configuration: the ijson batch-and-compress backend
              reading only the two args those analyses read (`hta_reference.py --time-only --parser ijson`)
What each side reads of every trace event: ours cat, name, pid, ts, dur and five args (device, stream,
correlation, grid, block: ingest/kineto_trace.py's _Event and _Args; every other key skipped in C); HTA every
top-level key (it drops ph, id, bp and s once read) and the args its configuration names (two under ijson).
Each contender runs --repeat times and its least wall and least CPU seconds are kept (the same rule for all).
CPU seconds (the process's, its threads and HTA's worker processes included) are the figure to read on a
shared, loaded machine; the ratios are against the faster HTA configuration. Ours is also given in MB of
decompressed JSON per CPU-second. Peak RSS per trace set: ours in its fresh process (beside the RSS after its
imports, and the set's decompressed JSON size: the stream keeps a block and the kept columns, never the whole
document), HTA's in its own process.

    .venv/bin/python benchmarks/bench_kineto_vs_hta.py --scale 1 4 16

Bounded memory on traces larger than the real ones: a real trace (df_index_resolver, 53.7 MB of JSON)
written N times over into one file, each copy shifted in time past the previous one with its
correlation ids and ProfilerStep numbers renumbered (so the anatomy has N times the steps and
kernels), then parsed in a fresh process: wall time and peak RSS against the file's size. HTA is not
run on these (it loads the whole trace into pandas: 335 MiB for the 1x trace).
The idle and overlap columns show both sides' numbers over HTA's window (benchmarks/hta_compare.py,
the comparison tests/test_kineto.py makes); where they differ, the cause is a documented definitional
difference (that test module's docstring): negative_queue_length / trace_diff_test (HTA drops
activities without a launch record), fsdp2_2gpu_h200 (HTA's last-step cut-off at the GPU-side
ProfilerStep copy).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from hta_compare import hta_comparable  # noqa: E402
from hta_reference import TRACE_SETS  # noqa: E402

from receipts.ingest.kineto import parse_files  # noqa: E402
from receipts.schema.categories import load_category_rules  # noqa: E402


def _least(runs: list[dict]) -> dict:
    """One contender's result over its fresh-process runs: the least wall and CPU seconds, the last run's rest."""
    return {**runs[-1], "seconds": min(r["seconds"] for r in runs), "cpu_seconds": min(r["cpu_seconds"] for r in runs)}


def hta_run(python: str, files: list[Path], parser: str, repeat: int) -> dict:
    runs = []
    for _ in range(repeat):
        env = {**os.environ, "HTA_DISABLE_NS_ROUNDING": "1"}  # as for the goldens
        out = subprocess.run([python, str(HERE / "hta_reference.py"), "--time-only", *map(str, files),
                              "--parser", parser], check=True, capture_output=True, text=True, env=env).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    return _least(runs)


def ours_run(files: list[Path], repeat: int) -> dict:
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, __file__, "--child", *map(str, files)],
                             check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    return _least(runs)


def _status_mib(key: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process from /proc (Linux), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def child(files: list[Path]) -> None:
    """Child mode: parse one set in this fresh process, timed from after the imports; print the seconds, the
    RSS after the imports and the peak while parsing (the import-time peak is reset first through clear_refs, so
    it cannot hide the parser's), and our numbers over HTA's window per rank."""
    imports = _status_mib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # Linux >= 4.0: VmHWM := VmRSS
    t0, c0 = time.perf_counter(), time.process_time()  # process_time counts polars' threads too
    # The rules are loaded inside the timing, as an ingest does: they remember the names they classified.
    anatomy = parse_files(files, rules=load_category_rules())
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    ranks = sorted(anatomy.steps["rank"].unique().to_list())
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "imports_mib": imports,
                      "peak_mib": _status_mib("VmHWM"), "steps": anatomy.steps.height,
                      "kernels": int(anatomy.steps["kernels"].sum()),
                      "hta_window": {str(r): hta_comparable(anatomy, r) for r in ranks}}))


def scaled_trace(src: Path, copies: int, out: Path) -> None:
    """`copies` back-to-back copies of src's events in one uncompressed trace (see the module docstring)."""
    import re

    import orjson

    with gzip.open(src) as f:
        trace = orjson.loads(f.read())
    events = trace.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    shift = max(e["ts"] + (e.get("dur") or 0) for e in timed) - min(e["ts"] for e in timed) + 1000.0
    corr = max((e["args"]["correlation"] for e in events if isinstance(e.get("args"), dict)
                and isinstance(e["args"].get("correlation"), int)), default=0) + 1
    step = re.compile(r"^ProfilerStep#(\d+)$")
    steps = max((int(m.group(1)) for e in events if (m := step.match(str(e.get("name", ""))))), default=0) + 1
    with open(out, "wb") as w:
        w.write(orjson.dumps(trace)[:-1] + b', "traceEvents": [\n  ')
        first = True
        for k in range(copies):
            for e in events:
                if k:
                    e = dict(e)
                    if isinstance(e.get("ts"), (int, float)):
                        e["ts"] += k * shift
                    if isinstance(e.get("args"), dict) and isinstance(e["args"].get("correlation"), int):
                        e["args"] = {**e["args"], "correlation": e["args"]["correlation"] + k * corr}
                    if m := step.match(str(e.get("name", ""))):
                        e["name"] = f"ProfilerStep#{int(m.group(1)) + k * steps}"
                w.write((b"" if first else b",\n  ") + orjson.dumps(e))
                first = False
        w.write(b"\n]}\n")


def scale(copies: list[int]) -> None:
    import tempfile

    src = next(f for f in TRACE_SETS["df_index_resolver"])
    print(f"{'copies':>6s} {'MB json':>8s} {'ours s':>7s} {'RSS MiB ours (imports)':>22s}  steps  kernels")
    with tempfile.TemporaryDirectory(prefix="kineto-scale-") as tmp:
        for n in copies:
            path = Path(tmp) / f"x{n}.pt.trace.json"
            scaled_trace(src, n, path)
            t0 = time.perf_counter()
            rss = ours_run([path], 1)
            wall = time.perf_counter() - t0  # the child's start-up and imports included
            mem = f"{rss['peak_mib']:.0f} ({rss['imports_mib']:.0f})"
            print(f"{n:6d} {path.stat().st_size / 1e6:8.1f} {wall:7.2f} {mem:>22s}  {rss['steps']:5d}  {rss['kernels']:7d}")
            path.unlink()


def json_mb(files: list[Path]) -> float:
    """Decompressed size of the set's JSON, streamed (what loading the whole document would hold as text)."""
    total = 0
    for f in files:
        with gzip.open(f) if f.name.endswith(".gz") else open(f, "rb") as stream:
            while chunk := stream.read(8 << 20):
                total += len(chunk)
    return total / 1e6


def _same(a: dict, b: dict) -> bool:
    """HTA's two configurations give the same per-rank figures (its goldens' units, to 1e-6 relative)."""
    keys = ("kernel_time_us", "idle_time_us", "comm_comp_overlap_pct")
    return a.keys() == b.keys() and all(
        (x is None and y is None) or (x is not None and y is not None and abs(x - y) <= 1e-6 * max(1.0, abs(x)))
        for r in a for x, y in ((a[r][k], b[r][k]) for k in keys))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hta-python", default="/tmp/hta-venv/bin/python")
    parser.add_argument("--child", nargs="+", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--scale", nargs="+", type=int, help="copies of a real trace per file: peak RSS vs size")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    print("command: " + " ".join([Path(sys.executable).name, *sys.argv]) + f"   (load average {os.getloadavg()[0]:.1f})")
    if args.scale:
        scale(args.scale)
        return
    print("seconds: wall / CPU, each contender's least of its fresh-process runs; x: the faster HTA's over ours")
    print(f"{'trace set':22s} {'MB json':>7s} {'ours':>12s} {'HTA json':>12s} {'HTA ijson':>12s} {'x wall':>6s} "
          f"{'x CPU':>6s} {'MB/CPU-s':>8s} {'RSS MiB ours (imports)':>22s} {'HTA':>5s}  same  idle ms ours/HTA   "
          f"overlap % ours/HTA")
    total = {"ours": [0.0, 0.0], "json": [0.0, 0.0], "ijson": [0.0, 0.0]}
    json_total, peaks, version = 0.0, [], None
    for name, files in TRACE_SETS.items():
        mb = json_mb(files)
        ours = ours_run(files, args.repeat)
        hta = {p: hta_run(args.hta_python, files, p, args.repeat) for p in ("json", "ijson")}
        version = hta["json"]["hta_version"]
        for key, r in (("ours", ours), *hta.items()):
            total[key] = [total[key][0] + r["seconds"], total[key][1] + r["cpu_seconds"]]
        json_total += mb
        peaks.append(ours["peak_mib"])
        fast_wall = min(h["seconds"] for h in hta.values())
        fast_cpu = min(h["cpu_seconds"] for h in hta.values())
        ranks = hta["ijson"]["ranks"]
        cmp = [ours["hta_window"][r] for r in ranks]
        idle = sum(c["idle_us"] for c in cmp) / 1e3
        hta_idle = sum(r["idle_time_us"] for r in ranks.values()) / 1e3
        ov = [c["overlap_pct"] for c in cmp]
        hov = [r["comm_comp_overlap_pct"] for r in ranks.values()]
        fmt = lambda xs: "/".join("-" if x is None else f"{x:.1f}" for x in xs)  # noqa: E731
        pair = lambda r: f"{r['seconds']:.2f}/{r['cpu_seconds']:.2f}"  # noqa: E731
        ours_mem = f"{ours['peak_mib']:.0f} ({ours['imports_mib']:.0f})"
        same = "yes" if _same(hta["json"]["ranks"], ranks) else "NO"
        print(f"{name:22s} {mb:7.1f} {pair(ours):>12s} {pair(hta['json']):>12s} {pair(hta['ijson']):>12s} "
              f"{fast_wall / ours['seconds']:5.1f}x {fast_cpu / ours['cpu_seconds']:5.1f}x "
              f"{mb / ours['cpu_seconds']:8.1f} {ours_mem:>22s} {max(h['max_rss_mib'] for h in hta.values()):5.0f}  "
              f"{same:4s}  {idle:8.1f}/{hta_idle:<8.1f}  {fmt(ov)}/{fmt(hov)}")
    o, j, i = total["ours"], total["json"], total["ijson"]
    fast = min((j, i), key=lambda t: t[1])
    print(f"{'all':22s} {json_total:7.1f} {o[0]:5.2f}/{o[1]:<6.2f} {j[0]:5.2f}/{j[1]:<6.2f} {i[0]:5.2f}/{i[1]:<6.2f} "
          f"{fast[0] / o[0]:5.1f}x {fast[1] / o[1]:5.1f}x {json_total / o[1]:8.1f} {'max ' + format(max(peaks), '.0f'):>22s}")
    print(f"HTA {version}; in CPU seconds HTA json is {j[1] / o[1]:.1f}x ours, HTA ijson {i[1] / o[1]:.1f}x; "
          f"ours reads {json_total / o[1]:.1f} MB of JSON per CPU-second")


if __name__ == "__main__":
    main()
