"""PyTorch memory snapshots: read without torch and without running anything, replayed to a peak."""

from __future__ import annotations

import gzip
import os
import pickle
from collections import Counter
from pathlib import Path

import pytest

from conftest import realdata
from receipts.errors import InputError
from receipts.ingest import memory_snapshot
from receipts.ingest.memory_replay import AllocatorSettings, layout_at_dump, layout_at_start, replay
from receipts.ingest.sniff import sniff_kind

MAGMA = ("memory", "MAGMA27__memory_snapshot.pickle")


def _dump_state(snapshot: dict) -> tuple[int, int]:
    """Allocated and reserved bytes at the dump, summed by hand as torch's own segsum does (_memory_viz.py)."""
    segments = snapshot["segments"]
    allocated = sum(b["size"] for s in segments for b in s["blocks"] if b["state"] == "active_allocated")
    return allocated, sum(s["total_size"] for s in segments)


def test_real_snapshot_replays_back_to_the_dumped_layout():
    """Played backwards from the dump and forwards again, the trace rebuilds the dump's layout block for block:
    the allocator model follows every one of the 5,163 events of a real snapshot."""
    path = realdata(*MAGMA)
    snapshot = memory_snapshot.load(path)
    trace = snapshot["device_traces"][0]
    settings = AllocatorSettings.of(snapshot["allocator_settings"])
    start, undone = layout_at_start(snapshot["segments"], trace, settings)
    assert undone.misses == 0
    result = replay(start, trace, memory_snapshot._categories(trace), settings)
    assert result.unplaced == 0
    rebuilt = {(b.addr, b.size, b.state) for b in start.blocks.values()}
    dumped = {(b.addr, b.size, b.state) for b in layout_at_dump(snapshot["segments"]).blocks.values()}
    assert rebuilt == dumped
    assert result.end_allocated_bytes == _dump_state(snapshot)[0]


def test_real_snapshot_geometry():
    path = realdata(*MAGMA)
    (g,) = memory_snapshot.parse(path)
    snapshot = memory_snapshot.load(path)
    allocated, reserved = _dump_state(snapshot)
    assert (g.kind, g.device, g.warnings) == ("snapshot", 0, ())
    assert g.detail["allocated_at_dump_bytes"] == allocated == 1_377_753_600
    assert g.detail["reserved_at_dump_bytes"] == reserved == 14_180_941_824
    # no segment was cudaMalloc'ed or freed while recording: reserved stayed the dump's
    assert not [e for e in snapshot["device_traces"][0] if e["action"].startswith("segment")]
    assert g.peak_reserved_bytes == reserved
    assert g.fragmentation_at_peak_bytes == reserved - g.peak_allocated_bytes
    # The live blocks at the peak, by category, are the peak.
    assert sum(b for _, b in g.categories) == g.peak_allocated_bytes
    # Allocations are rounded up and may take a whole free block: the peak is at least what the requests
    # add up to, replayed the naive way (trace sizes, free_requested taking them off).
    naive = level = allocated - sum(e["size"] for e in snapshot["device_traces"][0] if e["action"] == "alloc") \
        + sum(e["size"] for e in snapshot["device_traces"][0] if e["action"] == "free_requested")
    for e in snapshot["device_traces"][0]:
        level += e["size"] if e["action"] == "alloc" else -e["size"] if e["action"] == "free_requested" else 0
        naive = max(naive, level)
    assert g.peak_allocated_bytes >= naive
    assert g.resident_bytes <= allocated


def test_frameless_allocations_inside_backward_are_backward():
    """The file's trace: 644 forward allocations, 10 in the loss (the script's own frames), one in
    Tensor.backward, then 1,066 without frames (the autograd engine's thread): backward."""
    snapshot = memory_snapshot.load(realdata(*MAGMA))
    cats = Counter(c for c in memory_snapshot._categories(snapshot["device_traces"][0]) if c)
    assert cats == {"forward": 644, "other": 10, "backward": 1067}


def test_phase_of_frames():
    f = lambda name, filename: {"name": name, "filename": filename, "line": 1}  # noqa: E731
    assert memory_snapshot.phase_of([f("_multi_tensor_adamw", "/x/torch/optim/adamw.py")]) == "optimizer"
    assert memory_snapshot.phase_of([f("backward", "C:\\v\\torch\\_tensor.py")]) == "backward"
    assert memory_snapshot.phase_of([f("forward", "/m.py"), f("recompute_fn", "/x/torch/utils/checkpoint.py")]) \
        == "recompute"
    assert memory_snapshot.phase_of([f("forward", "/m.py"), f("_call_impl", "/x/torch/nn/modules/module.py")]) \
        == "forward"
    assert memory_snapshot.phase_of([f("<module>", "/train.py")]) is None


class _Evil:
    """Unpickling this would run a shell command that leaves a file behind."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _Plain:
    pass


@pytest.mark.parametrize("gz", [False, True])
def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path, gz):
    marker = tmp_path / "ran"
    payload = pickle.dumps({"segments": [], "device_traces": [[_Evil(marker)]]})
    assert b"system" in payload
    path = tmp_path / ("evil.pickle.gz" if gz else "evil.pickle")
    path.write_bytes(gzip.compress(payload) if gz else payload)
    assert sniff_kind(path) == "memory-snapshot"
    with pytest.raises(InputError) as exc:
        memory_snapshot.parse(path)
    assert not marker.exists()
    message = str(exc.value)
    assert str(path) in message and "\n" not in message
    assert "refused" in message and ".system" in message


def test_a_pickle_that_builds_an_object_is_refused(tmp_path):
    path = tmp_path / "obj.pickle"
    path.write_bytes(pickle.dumps({"segments": [_Plain()]}))
    with pytest.raises(InputError, match=r"refused.*_Plain"):
        memory_snapshot.parse(path)


@pytest.mark.parametrize("content, expected", [
    ([1, 2, 3], "segments\\[0\\] is not a dict"),
    ({"traces": []}, "expected a dict with a 'segments' list"),
    ({"segments": [{"address": 0, "total_size": 512, "blocks": [{"size": 512, "state": "lost"}]}]},
     "segments\\[0\\].blocks\\[0\\] has state 'lost'"),
    ({"segments": [{"address": 0, "total_size": 1024, "blocks": [{"size": 512, "state": "inactive"}]}]},
     "its blocks add up to 512 bytes, its total_size is 1024"),
    ({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1}]]},
     "device_traces\\[0\\]\\[0\\] \\(alloc\\) needs integer 'addr' and 'size'"),
])
def test_plain_pickles_of_the_wrong_shape_name_the_place(tmp_path, content, expected):
    path = tmp_path / "x.pickle"
    path.write_bytes(pickle.dumps(content))
    with pytest.raises(InputError, match=expected):
        memory_snapshot.parse(path)


def test_a_cut_pickle_is_one_line(tmp_path):
    path = tmp_path / "cut.pickle"
    path.write_bytes(realdata(*MAGMA).read_bytes()[:5000])
    with pytest.raises(InputError, match="not a whole pickle"):
        memory_snapshot.parse(path)


def test_split_and_no_split_follow_the_allocator():
    """A 11.5 MiB request in a fresh 12 MiB segment takes all of it (0.5 MiB could not be split off); a
    10.5 MiB one leaves 1.5 MiB free. max_memory_allocated counts the blocks, not the requests."""
    mib = 1 << 20
    for request, block in ((23 * mib // 2, 12 * mib), (21 * mib // 2, 21 * mib // 2)):
        trace = [{"action": "segment_alloc", "addr": 0, "size": 12 * mib},
                 {"action": "alloc", "addr": 0, "size": request, "frames": []},
                 {"action": "free_requested", "addr": 0, "size": request},
                 {"action": "free_completed", "addr": 0, "size": request}]
        segments = [{"address": 0, "total_size": 12 * mib, "blocks": [{"size": 12 * mib, "state": "inactive"}]}]
        start, _ = layout_at_start(segments, trace, AllocatorSettings())
        assert start.segments == {}
        assert replay(start, trace, [None] * 4, AllocatorSettings()).peak_allocated_bytes == block


def test_round_size_with_power2_divisions():
    s = AllocatorSettings(divisions=(0, 4) + (0,) * 14)
    assert s.round_size(1) == 512 and s.round_size(513) == 1024
    # 2-4 MiB in quarters: 2.1 MiB -> 2.5 MiB
    assert s.round_size(2 * (1 << 20) + 100_000) == 5 * (1 << 19)
    assert AllocatorSettings().round_size(2 * (1 << 20) + 100_000) == 2 * (1 << 20) + 100_352


def test_footer_memory_record_is_checked(tmp_path):
    """A footer's `memory` with a value of the wrong type is one error naming the line and key."""
    from receipts.ingest.textlog import read_log
    from receipts.ingest import native

    log = tmp_path / "run.log"
    log.write_text('RECEIPT {"v":1,"kind":"header","rank":0}\n'
                   'RECEIPT {"v":1,"kind":"step","step":0,"rank":0,"step_ms":1.0}\n'
                   'RECEIPT {"v":1,"kind":"footer","rank":0,"memory":{"parameters_bytes":"12GiB"}}\n')
    with pytest.raises(InputError, match=r"run.log:3: RECEIPT footer: memory.parameters_bytes must be a "
                                         r"non-negative integer"):
        native.parse(read_log(log))


def test_the_recorder_and_the_window_agree_on_warmup_phases():
    from receipts.analysis.window import WARMUP_PHASES
    from receipts.schema.receipt_format import WARMUP_PHASES as FORMAT_WARMUP

    assert FORMAT_WARMUP == WARMUP_PHASES
