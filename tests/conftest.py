"""Shared fixtures: paths to the real data beside the project, native-log writers, temp stores."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.slow_tier import is_slow

REPO = Path(__file__).resolve().parents[1]
REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"
GPU_DATA = REPO / "tests" / "data" / "gpu"
EXPLAIN_DATA = REPO / "tests" / "data" / "explain"
NOISE = REPO / "tests" / "data" / "noise"


def realdata(*parts: str) -> Path:
    path = REALDATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data not present: {path}")
    return path


def write_native_log(path: Path, step_ms: list[float], *, host_lineage: str | None = "h200-usw1c-bench-01",
                     preset: str | None = "nam52_h200_dense_ref_v1", regime: str | None = "fsdp2/regional-compile",
                     warmup_steps: int = 0, footer: bool = True, env: dict | None = None,
                     software: dict | None = None, features: dict | None = None,
                     gpu_model: str = "NVIDIA H200", gpu_count: int = 8) -> Path:
    """A RECEIPT-format log, for edge cases only; real logs come from realdata/ and tests/data/gpu/."""
    identity = {k: v for k, v in (("host_lineage", host_lineage), ("preset", preset), ("regime", regime)) if v}
    header = {"v": 1, "kind": "header", "identity": identity, "hostname": "h200-usw1c-bench-01",
              "gpu_model": gpu_model, "gpu_count": gpu_count, "world_size": gpu_count,
              "env": env or {}, "software": software or {}, "features": features or {}}
    lines = ["booting", "RECEIPT " + json.dumps(header)]
    if warmup_steps:
        lines.append("RECEIPT " + json.dumps({"v": 1, "kind": "phase", "phase": "compile", "first_step": 1,
                                              "last_step": warmup_steps}))
    for i, ms in enumerate(step_ms, start=1):
        lines.append("RECEIPT " + json.dumps({"v": 1, "kind": "step", "step": i, "rank": 0, "step_ms": ms,
                                              "tokens_per_s": 1e6 / ms}))
    if footer:
        lines.append("RECEIPT " + json.dumps({"v": 1, "kind": "footer", "rank": 0,
                                              "peak_allocated_bytes": 40 << 30, "peak_reserved_bytes": 48 << 30}))
    path.write_text("\n".join(lines) + "\n")
    return path


# Hypothesis examples of the slow tier's property tests and fuzz campaigns: the full count with RECEIPTS_FUZZ=full,
# else a quarter of it (at least 10). A derandomised test runs the same cases on every run, so the full count adds
# cases, not a check: every property runs either way, at a quarter of the CPU.
FULL_EXAMPLES = os.environ.get("RECEIPTS_FUZZ") == "full"


def examples(full: int) -> int:
    return full if FULL_EXAMPLES else max(10, full // 4)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "receipts.duckdb")


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `build(folder)` fills, made once per test run. Under pytest-xdist each worker is a process with
    its own session fixtures: the first worker to ask builds the folder in the run's shared temp root, under a
    lock, and the others wait for it and reuse it, so a store of real data is ingested once, not once per worker."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # pytest-of-USER/pytest-N, shared by the run's workers (each has its own popen-gwN)
    folder = root / f"built-{name}"
    with open(root / f"built-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / ".built").touch()
    return folder


def store_built_once(tmp_path_factory, name: str, build: Callable[[str], None]) -> str:
    """A DuckDB store that `build(path)` fills, ingested once per test run (`built_once`); each worker gets its
    own copy, so a test that writes to it by mistake changes no other worker's store."""
    built = built_once(tmp_path_factory, name, lambda folder: build(str(folder / "store.duckdb")))
    copy = tmp_path_factory.mktemp(name) / "store.duckdb"
    shutil.copy(built / "store.duckdb", copy)
    return str(copy)


@pytest.fixture(scope="session")
def explain_lane(tmp_path_factory) -> str:
    """A store of the explain experiment's 14 real 2-GPU runs (tests/data/explain: baselines tagged main, an A/A
    run and planted changes), each run.log with its nsys export, ingested once per test run.
    Read-only for the tests: copy it before writing."""
    from cli_helpers import cli

    def build(path: str) -> None:
        result = cli(path, "ingest", *sorted(str(p) for p in EXPLAIN_DATA.iterdir() if p.is_dir()))
        assert result.exit_code == 0, result.output

    return store_built_once(tmp_path_factory, "explain", build)


@pytest.fixture(scope="session")
def noise_db(tmp_path_factory) -> str:
    """A store of the 18 real H100 runs in tests/data/noise (ten A/A runs of one configuration, two with a
    planted slowdown under the noise floor, three with a planted 2.5% slowdown; README.md there), ingested once
    per test run. Identity, run names and tags come from the RECEIPT headers. Read-only for the tests."""
    from cli_helpers import cli

    logs = sorted(NOISE.glob("*/run.log"))
    if len(logs) < 15:
        pytest.skip(f"real data not present: {NOISE}")

    def build(path: str) -> None:
        result = cli(path, "ingest", *map(str, logs))
        assert result.exit_code == 0, result.stdout + result.stderr

    return store_built_once(tmp_path_factory, "noise", build)


@pytest.fixture(scope="session")
def warm_writers(tmp_path_factory):
    """16 processes that have imported the CLI, for races between processes (tests/warm_writers.py); started on
    the first race a test session (or xdist worker) runs, shared by the races after it."""
    from warm_writers import WarmWriters

    writers = WarmWriters(16, tmp_path_factory.mktemp("writers"))
    yield writers
    writers.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With RECEIPTS_REQUIRE_REALDATA=1 (scripts/test.sh, hence CI) a test skipped because real data is absent
    fails instead: a checkout without ../shared/realdata must not pass by quietly testing less."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("RECEIPTS_REQUIRE_REALDATA") == "1" and "not present" in str(report.longrepr):
        report.outcome = "failed"
        report.longrepr = f"real data required (RECEIPTS_REQUIRE_REALDATA=1) but absent: {report.longrepr}"


def pytest_collection_modifyitems(config, items):
    """The slow tier (tests/slow_tier.py says what goes there and why), and every test that needs the PostgreSQL
    server or Chromium."""
    for item in items:
        if (is_slow(item.path.name, item.originalname) or item.get_closest_marker("postgres") is not None
                or item.get_closest_marker("browser") is not None):
            item.add_marker(pytest.mark.slow)


def drop_test_database(admin, name: str) -> None:
    """DROP DATABASE ... WITH (FORCE), again while the server refuses it for a backend of a role the admin may not
    signal: an autovacuum worker that started on the database after the tests' writes (pg_stat_activity shows it
    without a user), gone within moments."""
    import psycopg

    for attempt in range(50):
        try:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except psycopg.errors.InsufficientPrivilege:
            if attempt == 49:
                raise
            time.sleep(0.2)
