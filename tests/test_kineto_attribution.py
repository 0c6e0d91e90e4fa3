"""kineto._attribute (binary searches over step windows) and kineto._spans (running maxima over the steps in
marker order) against their rules read literally, one activity or step at a time.

Attribution: the launch with the activity's correlation id, then the step window of the launching process that
starts last at or before the launch and has not ended; else the window of the rank that starts last at or before
the activity's own start; else unattributed. Equal starts, missing launches, launches on a process without steps
and activities outside every window are all drawn. Spans: each step's GPU window runs from the end of all work
before it (its own first activity, or its marker, when there is none) to the end of all work up to it."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import examples
from receipts.ingest.kineto import _attribute, _spans


def by_the_rule(gpu: list[dict], launch: list[dict], steps: list[dict]) -> tuple[list, dict]:
    def last_window(candidates: list[dict], t: int) -> dict | None:
        before = [s for s in candidates if s["start_ns"] <= t]
        if not before:
            return None
        latest = max(s["start_ns"] for s in before)
        window = [s for s in before if s["start_ns"] == latest][-1]  # equal starts: the later in the steps' order
        return window if t < window["end_ns"] else None

    out, fallback, unattributed = [], 0, 0
    stepped = {s["rank"] for s in steps}
    for g in gpu:
        la = next((x for x in launch if g["corr"] is not None and x["corr"] == g["corr"] and x["rank"] == g["rank"]), None)
        by_launch = by_start = None
        if la is not None:
            by_launch = last_window([s for s in steps if s["rank"] == g["rank"] and s["pid"] == la["l_pid"]], la["l_ns"])
        if by_launch is None:
            by_start = last_window([s for s in steps if s["rank"] == g["rank"]], g["start_ns"])
            fallback += by_start is not None
            unattributed += by_start is None and g["rank"] in stepped
        chosen = by_launch or by_start
        out.append((la["l_ns"] if la else None, chosen["step"] if chosen else None,
                    "launch" if by_launch else "gpu_start" if by_start else None))
    return out, {"fallback": fallback, "unattributed": unattributed}


@st.composite
def trace(draw):
    pids = st.sampled_from(["100", "200", "300"])
    steps, t = [], 0
    for step in range(draw(st.integers(0, 5))):
        t += draw(st.integers(0, 30))  # 0: two windows starting together
        steps.append({"rank": 0, "step": step + 1, "pid": draw(pids), "start_ns": t,
                      "end_ns": t + draw(st.integers(1, 40))})
    corrs = draw(st.lists(st.integers(0, 30), unique=True, max_size=20))
    launch = [{"rank": 0, "corr": c, "l_pid": draw(pids), "l_ns": draw(st.integers(-5, 200))} for c in corrs]
    gpu = [{"rank": 0, "corr": draw(st.one_of(st.none(), st.integers(0, 40))), "start_ns": draw(st.integers(-5, 200))}
           for _ in range(draw(st.integers(0, 25)))]
    return gpu, launch, steps


@settings(max_examples=examples(400), deadline=None, derandomize=True, database=None)
@given(trace())
def test_attribution_follows_the_rule(case):
    gpu, launch, steps = case
    frames = (pl.DataFrame(gpu, schema={"rank": pl.Int32, "corr": pl.Int64, "start_ns": pl.Int64}),
              pl.DataFrame(launch, schema={"rank": pl.Int32, "corr": pl.Int64, "l_pid": pl.Utf8, "l_ns": pl.Int64}),
              pl.DataFrame(steps, schema={"rank": pl.Int32, "step": pl.Int64, "pid": pl.Utf8, "start_ns": pl.Int64,
                                          "end_ns": pl.Int64}))
    got, counts = _attribute(*frames)
    want, want_counts = by_the_rule(gpu, launch, steps)
    assert list(got.select("launch_ns", "step", "attributed_by").iter_rows()) == want
    assert counts == want_counts


def spans_by_the_rule(events: list[dict], steps: list[dict]) -> list[tuple]:
    out = []
    for rank in sorted({e["rank"] for e in events}):
        mine = [e for e in events if e["rank"] == rank]
        markers = sorted((s for s in steps if s["rank"] == rank), key=lambda s: s["start_ns"])
        if not markers:
            out.append((rank, None, min(e["start_ns"] for e in mine), max(e["end_ns"] for e in mine)))
            continue
        for m in markers:  # a step's span is its own work, first start to last end, as nsys measures it
            own = [e for e in mine if e["step"] == m["step"]]
            if own:
                out.append((rank, m["step"], min(e["start_ns"] for e in own), max(e["end_ns"] for e in own)))
            else:  # no work of its own: an empty span at its marker
                out.append((rank, m["step"], m["start_ns"], m["start_ns"]))
    return sorted(out, key=lambda r: (r[0], r[1] is None, r[1]))


@st.composite
def stepped_events(draw):
    steps, events = [], []
    for rank in (0, 1):
        numbers = draw(st.lists(st.integers(1, 9), unique=True, max_size=5))  # none: a rank without markers
        steps += [{"rank": rank, "step": n, "start_ns": draw(st.integers(0, 100))} for n in numbers]
        for _ in range(draw(st.integers(0 if numbers else 1, 8))):
            start = draw(st.integers(0, 150))
            events.append({"rank": rank, "step": draw(st.sampled_from(numbers)) if numbers else None,
                           "start_ns": start, "end_ns": start + draw(st.integers(0, 50))})
    return events, steps


@settings(max_examples=examples(400), deadline=None, derandomize=True, database=None)
@given(stepped_events())
def test_spans_follow_the_rule(case):
    events, steps = case
    got = _spans(pl.DataFrame(events, schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64,
                                              "end_ns": pl.Int64}),
                 pl.DataFrame(steps, schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64}))
    assert list(got.sort("rank", "step", nulls_last=True).iter_rows()) == spans_by_the_rule(events, steps)
