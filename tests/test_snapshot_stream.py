"""The streaming snapshot reader (ingest/snapshot_stream.py) against Python's own unpickler on real snapshots, and
what it refuses."""

from __future__ import annotations

import gzip
import io
import pickle
from pathlib import Path

import pytest

from receipts.ingest import memory_snapshot, snapshot_stream

DATA = Path(__file__).parent / "data" / "memory"


class _Plain(pickle.Unpickler):
    def find_class(self, module, name):  # the test's reference reader: plain containers only
        raise pickle.UnpicklingError(f"{module}.{name}")


@pytest.fixture(scope="module")
def real() -> tuple[dict, dict]:
    raw = gzip.decompress((DATA / "adamw_2gpu_ckpt" / "snapshot" / "rank0.pickle.gz").read_bytes())
    return _Plain(io.BytesIO(raw)).load(), snapshot_stream.load(io.BytesIO(raw), memory_snapshot.phase_of_pairs)


def test_every_trace_entry_reads_as_pythons_unpickler_reads_it(real):
    plain, streamed = real
    (ref, none), (got, empty) = plain["device_traces"], streamed["device_traces"]
    assert none == empty == []   # a device without entries stays an empty list
    assert isinstance(got, snapshot_stream.Trace) and len(got) == len(ref) > 1000
    for e, g in zip(ref, got):
        assert (g["action"], g["addr"], g["size"], g["time_us"]) == (e["action"], e["addr"], e["size"], e["time_us"])
        assert g["frames"].phase == memory_snapshot.phase_of(e["frames"])
        assert bool(g["frames"]) == bool(e["frames"])
    assert memory_snapshot._categories(got) == memory_snapshot._categories(ref)
    assert streamed["allocator_settings"] == plain["allocator_settings"]
    for s, t in zip(streamed["segments"], plain["segments"]):
        assert [(b["size"], b["state"]) for b in s["blocks"]] == [(b["size"], b["state"]) for b in t["blocks"]]


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_every_pickle_protocol_reads_the_same(protocol):
    snap = {"segments": [{"address": 0, "total_size": 1024, "device": 0,
                          "blocks": [{"size": 512, "state": "active_allocated", "frames": []},
                                     {"size": 512, "state": "inactive"}]}],
            "device_traces": [[{"action": "alloc", "addr": 0, "size": 100, "time_us": 5, "frames": f}
                               for f in ([{"filename": "/t/torch/optim/adamw.py", "line": 1, "name": "step"}], [])]],
            "allocator_settings": {"roundup_power2_divisions": {"1": 0}, "max_split_size": -1}}
    got = snapshot_stream.load(io.BytesIO(pickle.dumps(snap, protocol=protocol)), memory_snapshot.phase_of_pairs)
    trace = got["device_traces"][0]
    assert [trace[i]["frames"].phase for i in range(2)] == ["optimizer", None]
    assert got["segments"][0]["total_size"] == 1024 and got["allocator_settings"]["max_split_size"] == -1


class _Reduce:
    def __reduce__(self):
        return (print, ("ran",))


class _Pid(pickle.Pickler):
    def persistent_id(self, obj):
        return "x" if obj == "secret" else None


@pytest.mark.parametrize("payload, message", [
    (pickle.dumps({"segments": [_Reduce()]}, protocol=2), "it names __builtin__.print"),
    (pickle.dumps({"segments": [_Reduce()]}, protocol=4), "it names builtins.print"),
    (pickle.dumps({"segments": [_Reduce()]}, protocol=5), "it names builtins.print"),
])
def test_a_pickle_that_names_a_function_is_refused(tmp_path, payload, message):
    path = tmp_path / "x.pickle"
    path.write_bytes(payload)
    from receipts.errors import InputError

    with pytest.raises(InputError, match=f"refused.*{message}"):
        memory_snapshot.parse(path)


def test_a_persistent_reference_is_refused(tmp_path):
    buf = io.BytesIO()
    _Pid(buf, protocol=4).dump({"segments": ["secret"]})
    path = tmp_path / "p.pickle"
    path.write_bytes(buf.getvalue())
    from receipts.errors import InputError

    with pytest.raises(InputError, match="refused.*persistent reference"):
        memory_snapshot.parse(path)


@pytest.mark.parametrize("payload, message", [
    (b"\x80\x04K\x01r\xff\xff\xff\x7f.", "memo slot 2147483647, far beyond"),   # LONG_BINPUT to a huge slot
    (b"\x80\x04X\xff\xff\xff\x7f", "a string of 2147483647 bytes"),              # BINUNICODE claiming 2 GiB
    (b"\x80\x04\x8b\xff\xff\xff\x7f", "an integer of 2147483647 bytes"),         # LONG4 claiming 2 GiB
    (b"\x80\x04j\x05\x00\x00\x00.", "memo slot 5, which holds nothing"),
])
def test_a_pickle_that_claims_huge_sizes_is_refused_before_allocating(tmp_path, payload, message):
    path = tmp_path / "bomb.pickle"
    path.write_bytes(payload)
    from receipts.errors import InputError

    with pytest.raises(InputError, match=message):
        memory_snapshot.parse(path)
