"""Golden numbers for the Kineto parser, produced by HolisticTraceAnalysis (an independent tool).

Run with HTA's own interpreter, never the project's (HTA pins pandas/plotly/jupyter):

    python3 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install holistictraceanalysis==0.5.0 "pandas<3"
    /tmp/hta-venv/bin/python benchmarks/hta_reference.py            # writes tests/data/hta_reference/*.json
    /tmp/hta-venv/bin/python benchmarks/hta_reference.py --time-only FILE... [--parser ijson]  # the benchmark's

HTA 0.6.1 is on GitHub (tag v0.6.1) but not in this machine's package index (which has 0.5.0; the project
renamed its PyPI package at 0.6.0): the benchmark's HTA is that tag's source, `pip install --no-deps` into the
same venv beside ijson (its C yajl2 backend) and the index's pandas 2.3.3, numpy, plotly, networkx, pydot.

Two parser configurations (--parser), both HTA's own, documented in hta/configs/parser_config.py:
- json: the default, ParserConfig's default args over the JSON backend (what the goldens are made with).
- ijson: the fastest documented one, "Use ParserBackend.IJSON_BATCH_AND_COMPRESS for best results", reading
  only ParserConfig.get_minimum_args() (cuda::stream, correlation::cpu_gpu): the two args the temporal
  breakdown and the comm/comp overlap read. It gives the goldens' numbers (the benchmark checks it).

The real traces are read where they lie (../shared/realdata/kineto); HTA wants one folder per trace
set, so each set is a temp folder of symlinks. HTA 0.5.0 does not run under pandas 3 (a TypeError
setting an int8 column in its symbol table); under pandas 2.3.3 it reproduces the goldens exactly.
What HTA computes, per rank (HTA 0.5.0 source):
- TraceAnalysis(trace_dir) keeps GPU activities whose launching CPU event starts before the LAST
  ProfilerStep (trace.py _filter_irrelevant_gpu_kernels; skipped when there are < 2 ProfilerSteps).
- get_temporal_breakdown: kernel_time = last GPU end - first GPU start (a span, not a sum);
  idle = kernel_time - union of all GPU activities (kernels, memcpy, memset).
- get_comm_comp_overlap: |union(comm) ∩ union(compute)| / |union(comm)|, where comm is ^nccl.*Kernel
  and compute is everything that is neither NCCL, Memcpy/Memset nor *Sync.
By default HTA shrinks every event to whole microseconds (ceil start, floor end: trace_parser.py
round_down_time_stamps, pytorch PR #122425), which loses up to 1 us per kernel: 2.4% of the busy
time on nccl_parser_config. Our parser keeps nanoseconds, so the goldens are made with HTA's own
switch HTA_DISABLE_NS_ROUNDING=1; numbers are stored in microseconds as HTA printed them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REALDATA = HERE.parents[1] / "shared" / "realdata" / "kineto"
OUT = HERE.parent / "tests" / "data" / "hta_reference"
GPU_TRACES = HERE.parent / "tests" / "data" / "gpu" / "fsdp2_2gpu_kineto" / "traces"  # our own 2 x H200 run

# Trace sets with GPU activity (HTA's temporal breakdown needs at least one GPU event per rank).
# name -> files; a set of several files is one multi-rank run.
_REAL: dict[str, list[str]] = {
    "df_index_resolver": ["df_index_resolver__df_index_resolver.json.gz"],
    "nccl_parser_config": ["nccl_parser_config__nccl_data.json.gz"],
    "negative_queue_length": ["negative_queue_length_values_check__rank0.json.gz"],
    "trace_diff_control": ["trace_diff__control__control.json.gz"],
    "trace_diff_test": ["trace_diff__test__test.json.gz"],
    "trace_filter": ["trace_filter__sampled_rank-0.json.gz", "trace_filter__sampled_rank-1.json.gz"],
    "resnet50": ["resnet50_num_workers_0__worker0.1623143566756.pt.trace.json.gz"],
    "mi300": ["mi300__ddp_resnet18_no_pool__train_resnet18.json.gz"],
    "torch_compile_triton": ["torch_compile_triton__trace.json.gz"],
    "triton_example": ["triton_example__triton_example.json.gz"],
}
TRACE_SETS: dict[str, list[Path]] = {name: [REALDATA / n for n in names] for name, names in _REAL.items()}
if GPU_TRACES.is_dir():
    TRACE_SETS["fsdp2_2gpu_h200"] = sorted(GPU_TRACES.glob("*.pt.trace.json.gz"))


GPU_CATS = ["kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"]


def configure(parser: str) -> None:
    """HTA's parser configuration for this process (see the module docstring); before any trace is read."""
    if parser == "json":
        return
    from hta.configs.parser_config import ParserBackend, ParserConfig

    cfg = ParserConfig(ParserConfig.get_minimum_args())
    cfg.set_parser_backend(ParserBackend.IJSON_BATCH_AND_COMPRESS)
    ParserConfig.set_default_cfg(cfg)


def analyse(files: list[Path]) -> tuple[dict, float]:
    """HTA load + temporal breakdown + comm/comp overlap on one trace set; (result, seconds)."""
    from hta.trace_analysis import TraceAnalysis
    from hta.utils.utils import merge_kernel_intervals

    with tempfile.TemporaryDirectory(prefix="hta-") as tmp:
        for f in files:
            os.symlink(f.resolve(), Path(tmp) / f.name)
        t0, c0, k0 = time.perf_counter(), time.process_time(), _children_cpu()
        analyzer = TraceAnalysis(trace_dir=tmp)
        breakdown = analyzer.get_temporal_breakdown(visualize=False)
        overlap = analyzer.get_comm_comp_overlap(visualize=False)
        seconds = time.perf_counter() - t0
        # CPU seconds too: HTA parses several ranks in a process pool, hence the children's share.
        cpu_seconds = time.process_time() - c0 + _children_cpu() - k0
        ranks = {}
        for rank in analyzer.t.get_ranks():
            df = analyzer.t.get_trace(rank)
            gpu = df[df["stream"].ne(-1)]
            sym = analyzer.t.symbol_table.get_sym_table()
            cats = gpu["cat"].map(lambda i: sym[i])
            # HTA counts any event with args.stream as GPU work, including the cpu_op of a Triton
            # launcher; the union of the true GPU activities alone, with HTA's own merge:
            true_gpu = merge_kernel_intervals(gpu[cats.isin(GPU_CATS)].copy())
            b = breakdown[breakdown["rank"] == rank].iloc[0]
            o = overlap[overlap["rank"] == rank].iloc[0]
            pct = float(o["comp_comm_overlap_pctg"])  # HTA rounds it to 2 decimals
            ranks[str(rank)] = {
                "kernel_time_us": float(b["kernel_time(us)"]),
                "idle_time_us": float(b["idle_time(us)"]),
                "busy_time_us": float(b["kernel_time(us)"] - b["idle_time(us)"]),
                "compute_time_us": float(b["compute_time(us)"]),
                "non_compute_time_us": float(b["non_compute_time(us)"]),
                # NaN when the rank has no NCCL kernel: stored as null.
                "comm_comp_overlap_pct": None if pct != pct else pct,
                "gpu_events": int(len(gpu)),
                "gpu_events_by_cat": {str(k): int(v) for k, v in cats.value_counts().items()},
                "busy_time_gpu_cats_only_us": float((true_gpu["end"] - true_gpu["ts"]).sum()),
                "iterations": [int(i) for i in analyzer.t.get_iterations(rank)],
            }
    return {"ranks": ranks, "cpu_seconds": cpu_seconds, "max_rss_mib": _max_rss_mib()}, seconds


def _max_rss_mib() -> float:
    """Peak RSS of this process or of the largest worker HTA forked to parse ranks (Linux: KiB)."""
    import resource

    return max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024


def _children_cpu() -> float:
    import resource

    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def main() -> None:
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"  # read by HTA at parse time; see the module docstring
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-only", nargs="+", type=Path, help="analyse these files as one set; print JSON")
    parser.add_argument("--parser", choices=("json", "ijson"), default="json",
                        help="HTA's default parser, or its ijson batch-and-compress backend with the minimum args")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # HTA logs every parse at WARNING
    import hta

    version = getattr(hta, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("HolisticTraceAnalysis")
    configure(args.parser)
    if args.time_only:
        result, seconds = analyse(args.time_only)
        print(json.dumps({"seconds": seconds, "hta_version": version, "parser": args.parser, **result}))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    for name, files in TRACE_SETS.items():
        result, seconds = analyse(files)
        result.pop("cpu_seconds")
        result.pop("max_rss_mib")
        golden = {"trace_set": name, "files": [f.name for f in files], "tool": f"HolisticTraceAnalysis {version}",
                  "command": "benchmarks/hta_reference.py", **result}
        (OUT / f"{name}.json").write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {seconds:.2f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
