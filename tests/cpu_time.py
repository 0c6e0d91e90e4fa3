"""A pytest plugin for sizing the tiers: `pytest -m "not slow" -p cpu_time` prints, after the summary, the tests
that cost the most CPU (user+sys of the test process and the children it waited for, setup and teardown
included). Wall time (`--durations`) moves with the load of a shared machine; CPU seconds barely do. Run it
without -n: under pytest-xdist the workers keep their own counts."""

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


def pytest_terminal_summary(terminalreporter):
    if not _cost:
        return
    tr = terminalreporter
    tr.write_sep("=", f"{min(_SHOWN, len(_cost))} tests that cost the most CPU")
    for nodeid, cpu in sorted(_cost.items(), key=lambda kv: -kv[1])[:_SHOWN]:
        tr.write_line(f"{cpu:6.2f}s {nodeid}")
    tr.write_line(f"{sum(_cost.values()):6.1f}s of CPU in {len(_cost)} tests")
