"""A pytest plugin for sizing the tiers: `pytest -m "not slow" -p cpu_time` prints, after the summary, the tests
that cost the most CPU (user+sys of the test process and the children it waited for, setup and teardown
included). Wall time (`--durations`) moves with the load of a shared machine; CPU seconds barely do. Run it
without -n: under pytest-xdist the workers keep their own counts.

With RECEIPTS_CPU_TIME_FILE=PATH every test's CPU is also written, one `seconds<TAB>nodeid` line per test, to PATH
(under pytest-xdist to PATH.gwN, one file per worker: the costs of a whole `-n 2` run without a second run
without -n). A session fixture's setup counts in the first test of its worker that asks for it, its teardown in
the worker's last test: the 16 warm writers' CPU (tests/warm_writers.py, ~45 s) lands there when they are reaped."""

from __future__ import annotations

import os

import pytest

_SHOWN = 25
_cost: dict[str, float] = {}


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = _cpu()
    yield
    _cost[item.nodeid] = _cpu() - start


def pytest_sessionfinish(session):
    path = os.environ.get("RECEIPTS_CPU_TIME_FILE")
    if not path or not _cost:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    with open(f"{path}.{worker}" if worker else path, "w") as out:
        out.writelines(f"{cpu:.3f}\t{nodeid}\n" for nodeid, cpu in sorted(_cost.items(), key=lambda kv: -kv[1]))


def pytest_terminal_summary(terminalreporter):
    if not _cost:
        return
    tr = terminalreporter
    tr.write_sep("=", f"{min(_SHOWN, len(_cost))} tests that cost the most CPU")
    for nodeid, cpu in sorted(_cost.items(), key=lambda kv: -kv[1])[:_SHOWN]:
        tr.write_line(f"{cpu:6.2f}s {nodeid}")
    tr.write_line(f"{sum(_cost.values()):6.1f}s of CPU in {len(_cost)} tests")
