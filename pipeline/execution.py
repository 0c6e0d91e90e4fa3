"""Execution strategy for the files of one profile: one task per rank's trace (or per nsys export of a job),
run in this process, in worker processes or on Dask, and a small reduce into one anatomy.

The map is ingest/kineto.read_rank (one Kineto trace into its rank's rows: per step and category, the per-step
kernel totals, the GPU intervals the straggler analysis matches across ranks) or ingest/nsys_job.read_export
(one export of a job, one per rank or node, into its anatomy); the file itself never leaves the worker. The
reduce is kineto.combine / nsys_job.combine, the same functions the serial path ends in, so the anatomy is the
same whichever way the files were read (tests/test_ranks_parallel.py, tests/test_nsys_job.py).

Where the tasks run (RankMap):
- in this process, one rank after the other: one trace, `workers=1`, or (by default) a set too small to
  pay for starting worker processes (AUTO_MIN_BYTES);
- in a pool of worker processes on this machine (`workers=N`; by default one per core, at most one per rank
  and AUTO_MAX_WORKERS);
- on Dask (`dask=`): 'local' starts a LocalCluster of `workers` processes, a scheduler file (.json) or a
  scheduler address (tcp://..., also DASK_SCHEDULER_ADDRESS) uses a running cluster, whose workers must
  reach the trace paths and import `receipts`. Dask is the optional extra `gpu-receipts[dask]`.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, TypeAlias, TypeVar, cast

from receipts.errors import InputError, Remedy, UsageError

if TYPE_CHECKING:  # imported where the map runs: `receipts --help` and log ingest never load the trace reader
    from receipts.ingest import kineto, nsys_job
    from receipts.schema.categories import CategoryRules
    from receipts.schema.model import Anatomy
    from receipts.schema.secrets import EnvRules

# Below this many bytes of traces the default stays in-process. benchmarks/bench_ranks.py on a 32-core host:
# starting the workers (spawn + importing polars) costs ~0.9 s before any trace is read; 3.2 MiB of gzipped
# traces (8 ranks) read faster serially (0.63 s), 6.4 MiB (16 ranks) break even (1.25 s serial, 0.99 s with
# 4 workers), 25.4 MiB (64 ranks) read 3.5x faster with 8 workers. 16 MiB keeps a margin over break-even.
AUTO_MIN_BYTES = 16 << 20
AUTO_MAX_WORKERS = 16  # the same runs: 8 and 16 workers tie (1.20 vs 1.22 s), more only add start-up
# A job's nsys exports follow the same rule (bench_ranks.py --format nsys, per-rank exports of 2.1 MB, results in
# benchmarks/results/bench_ranks_nsys*): on a 16-core host 32 exports (66 MiB) read 1.94x faster with 4 workers,
# 2.10x with 16, and 8 exports (16.5 MiB) break even; on the 2-core machine 16 exports (33 MiB) 1.18x with 2.


@dataclass(frozen=True)
class RankMap:
    """How the ranks of one profile are read: `workers` processes (None: one per core when the set is large
    enough to pay for them, see AUTO_MIN_BYTES), or on Dask (`dask`: 'local', a scheduler file or address).
    `raw_staging`: with keep_raw, a folder where each task off this process writes its rank's raw events as
    Parquet (`<position>.parquet`), so only the small per-step rows travel back; the reduce then scans those
    files lazily and the store streams them into place (tasks on a remote Dask cluster must reach it).
    `progress`: called with the bytes of the profile's files read so far, as each file's task is in (the
    progress bar's; a 64-rank profile otherwise sat at 0 until its last rank was read)."""

    workers: int | None = None
    dask: str | None = None
    raw_staging: Path | None = None
    progress: Callable[[int], None] | None = field(default=None, compare=False)
    # Run first in each worker process this map starts (a module-level function: it travels by name): the
    # command line passes its own start-up policy (cli/lean_imports.py), so its workers import what it imports.
    worker_start: Callable[[], object] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise UsageError(f"{self.workers}: give 1 (read the ranks one after the other) or more", option="workers")


@dataclass
class MapStats:
    """What a map cost: where it ran and each worker's peak RSS (KiB, its high-water mark after its last task)."""

    where: str = "serial"
    peak_rss_kib: dict[str, int] = field(default_factory=dict)


def parse_kineto(paths: list[Path], *, rules: CategoryRules, keep_raw: bool = False,
                 plan: RankMap = RankMap(), stats: MapStats | None = None) -> Anatomy:
    """One run's Kineto traces (one per rank, in run order) into one anatomy, the ranks read as `plan` says."""
    if not paths:
        raise InputError(".", "no trace files given; expected one PyTorch profiler trace per rank")
    from receipts.ingest import kineto

    parts = _map("kineto", paths, rules=rules, keep_raw=keep_raw, env_rules=None, plan=plan, stats=stats)
    return replace(kineto.combine(cast("list[kineto.RankTrace]", parts)), category_rules=rules)


def parse_nsys_job(paths: list[Path], *, rules: CategoryRules, keep_raw: bool = False,
                   env_rules: EnvRules | None = None, plan: RankMap = RankMap(),
                   stats: MapStats | None = None) -> Anatomy:
    """One job's nsys exports (one per rank or per node, in name order) into one anatomy, read as `plan` says."""
    if not paths:
        raise InputError(".", "no nsys exports given; expected one export per rank or per node of one job")
    from receipts.ingest import nsys_job

    parts = _map("nsys", paths, rules=rules, keep_raw=keep_raw, env_rules=env_rules, plan=plan, stats=stats)
    return replace(nsys_job.combine(cast("list[nsys_job.ExportPart]", parts)), category_rules=rules)


def read_ranks(paths: list[Path], *, rules: CategoryRules, keep_raw: bool = False, plan: RankMap = RankMap(),
               stats: MapStats | None = None) -> list[kineto.RankTrace]:
    """The map alone over Kineto traces: each into its rank's rows, in the order of `paths`."""
    return cast("list[kineto.RankTrace]", _map("kineto", paths, rules=rules, keep_raw=keep_raw, env_rules=None,
                                               plan=plan, stats=stats))


def _map(reader: str, paths: list[Path], *, rules: CategoryRules, keep_raw: bool, env_rules: EnvRules | None,
         plan: RankMap, stats: MapStats | None) -> list[_Part]:
    """Each file read by `reader` ('kineto' | 'nsys'), results in the order of `paths`; the first failing file
    (in that order) raises its error here."""
    stats = stats if stats is not None else MapStats()
    workers = 0 if plan.dask is not None else _workers(paths, plan.workers)
    # Raw events stay where they were read unless this process reads them (serial): a frame per rank through
    # a pipe would be the bulk of what travels.
    staging = plan.raw_staging if keep_raw and workers != 1 else None
    tasks = [(reader, Path(p), i, rules, keep_raw, env_rules, staging) for i, p in enumerate(paths)]
    if plan.dask is not None:
        results = _on_dask(tasks, plan, stats)
    else:
        results = _in_pool(tasks, workers, stats, plan.worker_start) if workers > 1 else _serial(tasks, stats)
    parts: list[_Part] = []
    done = 0
    with closing(results):  # a failure stops the map here: the pool or the cluster is let go at once
        for outcome, path in zip(results, paths):
            if isinstance(outcome, _Failed):
                raise InputError(outcome.path, outcome.message, outcome.line, outcome.table)
            parts.append(outcome)
            if plan.progress is not None:
                done += _size(path)
                plan.progress(done)
    return parts


def _size(path: Path) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


def _workers(paths: list[Path], asked: int | None) -> int:
    if asked is not None:
        return min(asked, len(paths))
    size = sum(p.stat().st_size for p in map(Path, paths) if p.is_file())
    return min(os.cpu_count() or 1, len(paths), AUTO_MAX_WORKERS) if size >= AUTO_MIN_BYTES else 1


@dataclass(frozen=True)
class _Failed:
    """A task's InputError, carried back field by field (a dataclass exception does not survive pickling
    with its keyword fields)."""

    path: str
    message: str
    line: int | None
    table: str | None


_Part: TypeAlias = "kineto.RankTrace | nsys_job.ExportPart"  # one file read: a rank's rows, or an export's
_Outcome: TypeAlias = "_Part | _Failed"
_Task = tuple[str, Path, int, "CategoryRules", bool, "EnvRules | None", "Path | None"]
_Result = tuple[_Outcome, str, int]


def _read_task(reader: str, path: Path, position: int, rules: CategoryRules, keep_raw: bool,
               env_rules: EnvRules | None, staging: Path | None) -> _Result:
    """One file, in whichever process runs it; returns its rows (or its input error), the process and its peak RSS.
    With `staging`, its raw events are written there as Parquet and come back as a lazy scan of that file."""
    import dataclasses

    from receipts.ingest import kineto, nsys_job

    out: _Outcome
    try:
        if reader == "nsys":
            out = nsys_job.read_export(path, rules=rules, keep_raw=keep_raw, env_rules=env_rules)
        else:
            out = kineto.read_rank(path, position, rules=rules, keep_raw=keep_raw)
    except InputError as exc:
        out = _Failed(str(exc.path), exc.message, exc.line, exc.table)
    if staging is not None and isinstance(out, nsys_job.ExportPart):
        out = dataclasses.replace(out, anatomy=_staged(out.anatomy, staging / f"{position}.parquet"))
    elif staging is not None and isinstance(out, kineto.RankTrace):
        out = _staged(out, staging / f"{position}.parquet")
    return out, f"pid {os.getpid()}", _peak_rss_kib()


_Holder = TypeVar("_Holder", "kineto.RankTrace", "Anatomy")


def _staged(holder: _Holder, parquet: Path) -> _Holder:
    """`holder` with its raw events written to `parquet` and replaced by a lazy scan of that file."""
    import dataclasses

    import polars as pl

    if not isinstance(holder.raw_events, pl.DataFrame):
        return holder
    holder.raw_events.write_parquet(parquet)
    return dataclasses.replace(holder, raw_events=pl.scan_parquet(parquet))


def _peak_rss_kib() -> int:
    """This process's own peak RSS: VmHWM (reset at exec); ru_maxrss would report a spawned worker's parent's."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _collect(results: Iterator[_Result], stats: MapStats) -> Iterator[_Outcome]:
    for out, worker, rss in results:
        stats.peak_rss_kib[worker] = max(stats.peak_rss_kib.get(worker, 0), rss)
        yield out


# Each runner yields the tasks' outcomes in task order, as they come in: the caller says its progress file by file.
def _serial(tasks: list[_Task], stats: MapStats) -> Generator[_Outcome, None, None]:
    stats.where = "serial"
    for out in _collect((_read_task(*t) for t in tasks), stats):
        yield out
        if isinstance(out, _Failed):
            break  # serial reading stops at the first bad trace, as the pool's caller does


def _in_pool(tasks: list[_Task], workers: int, stats: MapStats,
             worker_start: Callable[[], object] | None) -> Generator[_Outcome, None, None]:
    # spawn, not fork: polars' thread pool in a forked child can deadlock (polars' own warning).
    stats.where = f"{workers} worker processes"
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(_threads_each(workers), worker_start))
    try:
        yield from _collect(pool.map(_read_task, *zip(*tasks)), stats)
    except BrokenProcessPool as exc:
        raise UsageError(f"a worker process reading the traces died ({exc}); out of memory?",
                         remedy=Remedy("fewer_workers")) from exc
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _threads_each(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // workers)


def _start_worker(threads: int, worker_start: Callable[[], object] | None) -> None:
    """In a fresh worker, before polars starts its thread pool: the machine's cores shared among the workers
    (16 workers each running polars on every core of a 32-core host ran 3.6x the serial path; see
    benchmarks/bench_ranks.py). DuckDB's threads (nsys exports) follow RECEIPTS_THREADS (duck.connect). What the
    user set is kept."""
    os.environ.setdefault("POLARS_MAX_THREADS", str(threads))
    os.environ.setdefault("RECEIPTS_THREADS", str(threads))
    if worker_start is not None:
        worker_start()


def _on_dask(tasks: list[_Task], plan: RankMap, stats: MapStats) -> Generator[_Outcome, None, None]:
    client, close = _dask_client(plan)
    stats.where = f"Dask ({plan.dask}, {len(client.scheduler_info().get('workers', {}))} workers)"
    try:
        futures = client.map(_read_task, *zip(*tasks), pure=False)
        yield from _collect((future.result() for future in futures), stats)
    finally:
        close()


def _dask_client(plan: RankMap) -> tuple[Any, Callable[[], None]]:
    """A Dask client for `plan.dask` and how to let it go: a LocalCluster is ours to close, a running
    cluster is only disconnected from."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UsageError("needs Dask's distributed scheduler, an optional extra: pip install 'gpu-receipts[dask]'",
                         option="dask", remedy=Remedy("without_dask")) from None
    target = str(plan.dask)
    try:
        if target == "local":
            n = plan.workers or min(os.cpu_count() or 1, 8)
            threads = os.environ.get("POLARS_MAX_THREADS", str(_threads_each(n)))
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                                   env={"POLARS_MAX_THREADS": threads,
                                        "RECEIPTS_THREADS": os.environ.get("RECEIPTS_THREADS", threads)})
            client = Client(cluster)

            def close() -> None:
                client.close()
                cluster.close()
            return client, close
        if target.endswith(".json"):
            if not Path(target).is_file():
                raise UsageError(f"{target}: no such scheduler file (written by `dask scheduler "
                                 "--scheduler-file FILE`)", option="dask")
            client = Client(scheduler_file=target, timeout="20s")
        else:
            client = Client(address=target, timeout="20s")
    except UsageError:
        raise
    except (OSError, TimeoutError, ValueError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"{target}: cannot reach the Dask scheduler ({why}); give 'local', a scheduler "
                         "file (.json) or an address such as tcp://host:8786", option="dask") from exc
    return client, client.close
