"""Our Kineto parser against HolisticTraceAnalysis on the same real traces, in the same run.

    .venv/bin/python benchmarks/bench_kineto_vs_hta.py [--repeat 3] [--hta-python /tmp/hta-venv/bin/python]

For each trace set of benchmarks/hta_reference.py: our `parse_files` (read, attribute, anatomy rows)
against HTA's TraceAnalysis load + get_temporal_breakdown + get_comm_comp_overlap, HTA timed inside
its own process (imports excluded) by `hta_reference.py --time-only`. Each side runs --repeat times
and the best wall time is kept (the machine is shared: best-of is the least noisy estimate). CPU
seconds are printed beside wall seconds: on a shared, loaded machine they are the steadier measure.
Peak RSS per trace set: ours in a fresh process that parses only that set (`--rss-of FILE...`, beside
the RSS of the same process after its imports, and the set's decompressed JSON size: the stream
keeps a block and the kept columns, never the whole document), HTA's in its own --time-only process.

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


def hta_seconds(python: str, files: list[Path], repeat: int) -> tuple[float, float, dict]:
    best, cpu, result = float("inf"), float("inf"), {}
    for _ in range(repeat):
        env = {**os.environ, "HTA_DISABLE_NS_ROUNDING": "1"}  # as for the goldens
        out = subprocess.run([python, str(HERE / "hta_reference.py"), "--time-only", *map(str, files)],
                             check=True, capture_output=True, text=True, env=env).stdout
        result = json.loads(out.strip().splitlines()[-1])
        best, cpu = min(best, result["seconds"]), min(cpu, result["cpu_seconds"])
    return best, cpu, result


def ours_seconds(files: list[Path], repeat: int):
    best, cpu, anatomy = float("inf"), float("inf"), None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()  # process_time counts polars' threads too
        # The rules are loaded inside the timing, as an ingest does: they remember the names they classified.
        anatomy = parse_files(files, rules=load_category_rules())
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return best, cpu, anatomy


def _status_mib(key: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process from /proc (Linux), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def rss_of(files: list[Path]) -> None:
    """Child mode: parse one set in this fresh process; print its RSS after the imports and the peak while
    parsing (the import-time peak is reset first through clear_refs, so it cannot hide the parser's)."""
    rules = load_category_rules()
    imports = _status_mib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # Linux >= 4.0: VmHWM := VmRSS
    anatomy = parse_files(files, rules=rules)
    print(json.dumps({"imports_mib": imports, "peak_mib": _status_mib("VmHWM"), "steps": anatomy.steps.height,
                      "kernels": int(anatomy.steps["kernels"].sum())}))


def ours_rss(files: list[Path]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--rss-of", *map(str, files)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


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
            rss = ours_rss([path])
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hta-python", default="/tmp/hta-venv/bin/python")
    parser.add_argument("--rss-of", nargs="+", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--scale", nargs="+", type=int, help="copies of a real trace per file: peak RSS vs size")
    args = parser.parse_args()
    if args.rss_of:
        rss_of(args.rss_of)
        return
    if args.scale:
        print("command: " + " ".join([Path(sys.executable).name, *sys.argv]) + f"   (load average {os.getloadavg()[0]:.1f})")
        scale(args.scale)
        return
    print("command: " + " ".join([Path(sys.executable).name, *sys.argv]) + f"   (load average {os.getloadavg()[0]:.1f})")
    print(f"{'trace set':22s} {'MB gz':>6s} {'MB json':>7s} {'ours s':>7s} {'HTA s':>7s} {'ratio':>6s} {'ours cpu':>8s} "
          f"{'HTA cpu':>8s} {'ratio':>6s} {'RSS MiB ours (imports)':>22s} {'HTA':>5s}  idle ms ours/HTA   overlap % ours/HTA")
    total = [0.0, 0.0, 0.0, 0.0]
    peaks: list[float] = []
    for name, files in TRACE_SETS.items():
        size_mb = sum(f.stat().st_size for f in files) / 1e6
        ours, ours_cpu, anatomy = ours_seconds(files, args.repeat)
        hta, hta_cpu, result = hta_seconds(args.hta_python, files, args.repeat)
        rss = ours_rss(files)
        peaks.append(rss["peak_mib"])
        total = [a + b for a, b in zip(total, (ours, hta, ours_cpu, hta_cpu))]
        cmp = [hta_comparable(anatomy, int(rank)) for rank in result["ranks"]]
        idle = sum(c["idle_us"] for c in cmp) / 1e3
        hta_idle = sum(r["idle_time_us"] for r in result["ranks"].values()) / 1e3
        ov = [c["overlap_pct"] for c in cmp]
        hov = [r["comm_comp_overlap_pct"] for r in result["ranks"].values()]
        fmt = lambda xs: "/".join("-" if x is None else f"{x:.1f}" for x in xs)  # noqa: E731
        ours_mem = f"{rss['peak_mib']:.0f} ({rss['imports_mib']:.0f})"
        print(f"{name:22s} {size_mb:6.2f} {json_mb(files):7.1f} {ours:7.3f} {hta:7.3f} {hta / ours:5.1f}x {ours_cpu:8.3f} "
              f"{hta_cpu:8.3f} {hta_cpu / ours_cpu:5.1f}x {ours_mem:>22s} {result['max_rss_mib']:5.0f}  "
              f"{idle:8.1f}/{hta_idle:<8.1f}  {fmt(ov)}/{fmt(hov)}")
    o, h, oc, hc = total
    print(f"{'all':22s} {'':6s} {'':7s} {o:7.3f} {h:7.3f} {h / o:5.1f}x {oc:8.3f} {hc:8.3f} {hc / oc:5.1f}x "
          f"{'max ' + format(max(peaks), '.0f'):>22s}")


if __name__ == "__main__":
    main()
