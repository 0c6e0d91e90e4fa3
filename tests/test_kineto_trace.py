"""The Kineto reader (a block of events per msgspec call) against the reference reader in
tests/kineto_reference.py (the whole trace decoded by the json module, each event judged on its own): the
same kept columns and the same anatomy on every real trace, and on traces whose fields have unexpected types."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import kineto_reference
import orjson
import polars as pl
import pytest
from conftest import GPU_DATA, REALDATA, realdata

from receipts.errors import InputError
from receipts.ingest import kineto, kineto_trace
from receipts.ingest.kineto_trace import Trace, stream_trace
from receipts.schema.categories import load_category_rules

RULES = load_category_rules()
# Every Kineto trace of shared/realdata (MANIFEST.md, checked below) and every one we captured.
REAL = ("cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "df_index_resolver__df_index_resolver.json.gz",
        "distributed_info_unavailable__distributed_info_not_found.json.gz",
        "mi300__ddp_resnet18_no_pool__train_resnet18.json.gz", "nccl_parser_config__nccl_data.json.gz",
        "negative_queue_length_values_check__rank0.json.gz", "rank_unavailable__rank_not_found.json.gz",
        "resnet50_num_workers_0__worker0.1623143566756.pt.trace.json.gz", "torch_compile_triton__trace.json.gz",
        "trace_diff__control__control.json.gz", "trace_diff__test__test.json.gz",
        "trace_filter__sampled_rank-0.json.gz", "trace_filter__sampled_rank-1.json.gz",
        "triton_example__triton_example.json.gz")
OURS = sorted(str(p.relative_to(GPU_DATA)) for p in GPU_DATA.glob("**/*.pt.trace.json*"))
TABLES = ("gpu", "launch", "step", "note")


def _same_trace(fast: Trace, ref: Trace) -> None:
    assert fast.meta == ref.meta
    assert bool(fast.kineto_events) == bool(ref.kineto_events)
    for table in TABLES:
        a, b = getattr(fast, table), getattr(ref, table)
        assert a.schema == b.schema, table
        assert a.equals(b, null_equal=True), table


def _same_anatomy(paths: list[Path], monkeypatch, read: tuple[Trace, Trace] | None = None) -> None:
    """`read`: the one path's traces as the fast and the reference reader gave them (_same_trace's), so that the
    anatomies are made of them instead of reading the file twice more (a trace is a function of its path)."""
    if read is not None:
        monkeypatch.setattr(kineto, "stream_trace", lambda path: read[0])
    fast = kineto.parse_files(paths, rules=RULES, keep_raw=True)
    monkeypatch.setattr(kineto, "stream_trace", kineto_reference.stream_trace if read is None else lambda path: read[1])
    ref = kineto.parse_files(paths, rules=RULES, keep_raw=True)
    for name in ("rows", "steps", "nvtx", "events", "raw_events"):
        assert getattr(fast, name).equals(getattr(ref, name), null_equal=True), name
    order = ["rank", "step", "category", "name", "shape"]
    assert fast.kernel_steps.sort(order).equals(ref.kernel_steps.sort(order))
    assert (fast.warnings, fast.unattributed, fast.gpu_model, fast.started_at) == \
           (ref.warnings, ref.unattributed, ref.gpu_model, ref.started_at)


def test_the_list_is_every_kineto_trace_of_the_manifest():
    manifest = realdata("MANIFEST.md").read_text()
    assert sorted(re.findall(r"^\| kineto/(\S+) \|", manifest, flags=re.M)) == sorted(REAL)
    assert len(OURS) >= 7


@pytest.mark.parametrize("name", REAL)
def test_fast_reader_keeps_what_the_reference_keeps_realdata(name, monkeypatch):
    path = realdata("kineto", name)
    read = stream_trace(path), kineto_reference.stream_trace(path)
    _same_trace(*read)
    _same_anatomy([path], monkeypatch, read)


@pytest.mark.parametrize("rel", OURS)
def test_fast_reader_keeps_what_the_reference_keeps_our_captures(rel, monkeypatch):
    path = GPU_DATA / rel
    read = stream_trace(path), kineto_reference.stream_trace(path)
    _same_trace(*read)
    _same_anatomy([path], monkeypatch, read)


def test_two_rank_set_same_anatomy(monkeypatch):
    _same_anatomy([realdata("kineto", "trace_filter__sampled_rank-0.json.gz"),
                   REALDATA / "kineto" / "trace_filter__sampled_rank-1.json.gz"], monkeypatch)


def _rewritten(tmp_path: Path, mutate) -> Path:
    raw = orjson.loads(gzip.decompress(realdata("kineto", "nccl_parser_config__nccl_data.json.gz").read_bytes()))
    mutate(raw["traceEvents"])
    out = tmp_path / "rank0.pt.trace.json"
    # Kineto-like layout: the fast reader's separator is found. orjson writes json.dumps(indent=2)'s bytes in a
    # twentieth of its time (0.02 against 0.41 s here), but no integer past 64 bits: those go through json.
    try:
        out.write_bytes(orjson.dumps(raw, option=orjson.OPT_INDENT_2))
    except orjson.JSONEncodeError:
        out.write_text(json.dumps(raw, indent=2))
    return out


@pytest.mark.parametrize("mutate", [
    lambda evs: evs[5].update(name=7),  # a name that is not a string
    lambda evs: evs[9].update(args=["x"]),  # args that are not an object
    lambda evs: evs[11].update(cat=None),  # a null category
], ids=["int-name", "list-args", "null-cat"])
def test_a_block_of_unexpected_types_keeps_what_the_reference_keeps(tmp_path, mutate):
    path = _rewritten(tmp_path, mutate)
    fast, ref = stream_trace(path), kineto_reference.stream_trace(path)
    for table in TABLES:
        assert getattr(fast, table).equals(getattr(ref, table), null_equal=True)
    assert fast.gpu.height > 3000


def _first_kernel(evs: list[dict]) -> dict:
    return next(e for e in evs if e.get("cat") == "kernel")


@pytest.mark.parametrize("key, value", [("ts", 1e17), ("dur", -2e16)])
def test_a_damaged_time_is_named_by_both_paths(tmp_path, key, value):
    path = _rewritten(tmp_path, lambda evs: _first_kernel(evs).update({key: value}))
    messages = []
    for read in (stream_trace, kineto_reference.stream_trace):
        with pytest.raises(InputError, match=f"has '{key}' = .*expected a finite number of microseconds") as err:
            read(path)
        messages.append(str(err.value))
    assert messages[0] == messages[1]


def test_ids_that_are_not_int64_are_unknown_on_both_paths(tmp_path):
    def mutate(evs: list[dict]) -> None:
        kernels = [e for e in evs if e.get("cat") == "kernel"]
        kernels[0]["args"]["stream"] = 2**70  # past int64
        kernels[1]["args"]["device"] = True  # a bool is not an id
        kernels[2]["args"]["correlation"] = 3.5

    path = _rewritten(tmp_path, mutate)
    fast, ref = stream_trace(path), kineto_reference.stream_trace(path)
    assert fast.gpu.equals(ref.gpu, null_equal=True)
    assert fast.gpu.head(3).select(pl.col("stream", "device", "corr").is_null().sum()).row(0) == (1, 1, 1)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # re reads '[[:alpha:]]' as a nested set, on purpose here
def test_classify_many_answers_as_classify_does():
    """The vectorised classifier (polars' regex engine over printable-ASCII names) against `re`, name by name:
    every reviewed kernel name of the corpus, names it must leave to `re`, and rules it must leave to `re`."""
    from tests import kernel_corpus
    from receipts.schema.categories import CategoryRules

    names = sorted(kernel_corpus.read()) + ["ncclDevKernel_AllGather\n", "ÿncclKernel_AllReduce", "", "gemm\x1c"]
    assert len(names) > 500
    assert load_category_rules().classify_many(names) == [load_category_rules().classify(n) for n in names]
    odd = CategoryRules(tuple((c, "compute", re.compile(p, re.IGNORECASE)) for c, p in [
        ("gemm", r"(?<=sm90_)xmma"), ("attention", r"fmha\Z"), ("moe", r"[[:alpha:]]+_router"), ("nccl_send_recv", r"(a)\1"),
        ("nccl_all_reduce", r"\N{LATIN SMALL LETTER A}llreduce_+ring"),  # a named character: polars' engine refuses it
        ("gemm", r"cutlass")]))
    tricky = ["sm90_xmma_gemm", "xmma", "kernel_fmha", "fmha_fwd", "top_router", "aa", "ab", "allreduce__ring",
              "cutlass_allreduce_ring", "cutlass_80"]
    assert odd.classify_many(tricky) == [odd.classify(n) for n in tricky] == \
           ["gemm", "other", "attention", "other", "other", "nccl_send_recv", "other", "nccl_all_reduce",
            "nccl_all_reduce", "gemm"]


@pytest.mark.parametrize("value", ["12", True, [], 10**400])
def test_a_time_of_another_type_is_named_as_the_reference_names_it(tmp_path, value):
    path = _rewritten(tmp_path, lambda evs: _first_kernel(evs).update(ts=value))
    messages = []
    for read in (stream_trace, kineto_reference.stream_trace):
        with pytest.raises(InputError, match="has 'ts' = .*expected a finite number of microseconds") as err:
            read(path)
        messages.append(str(err.value))
    assert messages[0] == messages[1]


def test_cuts_that_fall_inside_events_move_back_to_the_separator_before(tmp_path, monkeypatch):
    """A compact writer ('}, {' between events) with '}, {' inside every event (in a string and between nested
    objects), read in 4 KiB blocks so that cuts land inside events: it keeps what the reference keeps."""
    with gzip.open(realdata("kineto", "nccl_parser_config__nccl_data.json.gz")) as f:
        raw = json.load(f)
    for e in raw["traceEvents"]:
        e.setdefault("args", {})["nested"] = [{"a": "}, {"}, {"b": [{"c": 1}, {"d": 2}]}]
    path = tmp_path / "compact.json"
    path.write_text(json.dumps(raw))
    recuts = []

    def counting(trace, buf, end, start):
        try:
            return decode(trace, buf, end, start)
        except kineto_trace._Truncated:
            recuts.append(end)
            raise

    decode = kineto_trace._decode
    monkeypatch.setattr(kineto_trace, "_BLOCK_BYTES", 4096)
    monkeypatch.setattr(kineto_trace, "_decode", counting)
    _same_trace(stream_trace(path), kineto_reference.stream_trace(path))
    assert len(recuts) > 100


def _kineto_layout(tmp_path: Path) -> tuple[Path, bytes]:
    with gzip.open(realdata("kineto", "nccl_parser_config__nccl_data.json.gz")) as f:
        data = f.read()
    return tmp_path / "rank0.pt.trace.json", data


@pytest.mark.parametrize("damage, why", [
    (lambda d, at: d[:at] + d[at:].replace(b'"name": "', b'"name": ', 1), "not valid JSON"),  # a quote lost
    (lambda d, at: d[:at] + d[at:].replace(b'"name": "', b'"name": "\xff', 1), "not UTF-8"),
])
def test_a_damaged_event_is_named_with_its_offset(tmp_path, damage, why):
    """Damage in the middle of a trace, past the first block: one error naming the file and the byte."""
    path, data = _kineto_layout(tmp_path)
    at = len(data) // 2
    path.write_bytes(damage(data, at))
    with pytest.raises(InputError, match=why) as err:
        stream_trace(path)
    text = str(err.value)
    assert path.name in text and "\n" not in text
    offset = int(re.search(r"near byte ([\d,]+)", text).group(1).replace(",", ""))
    assert at <= offset < at + 4096


@pytest.mark.parametrize("fraction", [0.5, 0.9])
def test_a_cut_trace_names_the_byte_of_the_file_where_it_stops(tmp_path, fraction):
    """A trace cut mid-event (a copy taken while the profiler wrote it): the error names a byte of the file near the
    cut, not 'line 2 column 60' inside the block the reader held."""
    path, data = _kineto_layout(tmp_path)
    at = int(len(data) * fraction)
    path.write_bytes(data[:at])
    with pytest.raises(InputError, match="the file looks cut short") as err:
        stream_trace(path)
    text = str(err.value)
    assert "line " not in text and "column" not in text, text
    offset = int(re.search(r"near byte ([\d,]+)", text).group(1).replace(",", ""))
    assert at - 4096 <= offset <= at, (offset, at)
