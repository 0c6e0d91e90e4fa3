"""Bad input on the memory surfaces (`estimate` flags and config, snapshot fields): one line naming the input and
what was expected, exit 2, nothing stored."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import pytest

from cli_helpers import cli, cli_json
from receipts.errors import InputError
from receipts.ingest import memory_snapshot

DATA = Path(__file__).parent / "data" / "memory"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    db = str(tmp_path_factory.mktemp("bad") / "m.duckdb")
    assert cli_json(db, "ingest", str(DATA / "adamw_1gpu" / "run.log"))[0] == 0
    return db


def _sources(db: str) -> list:
    return cli_json(db, "show", "adamw_1gpu")[1]["memory_geometry"]["sources"]


@pytest.mark.parametrize("params", ["nan", "Infinity", "-inf", "sNaN", "1e999999999", "1e999999999B", "1e17", "0.5"])
def test_params_that_are_not_a_count_are_one_line(store, params):
    before = _sources(store)
    result = cli(store, "estimate", "--params", params, "--attach", "adamw_1gpu")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"Error: --params {params!r} is not a whole, positive parameter count up to 2**53 (e.g. 67170304, 8e9, 8B)"]
    assert _sources(store) == before


def test_a_result_past_64_bits_is_refused_before_json_and_store(store):
    before = _sources(store)
    huge = ("--params", "9e15", "--micro-batch", "4000000", "--sequence", "4000000", "--hidden", "4000000",
            "--layers", "1000")
    result = cli(store, "estimate", *huge, "--attach", "adamw_1gpu")
    assert result.exit_code == 2 and "the estimate's activations comes to" in result.output
    assert "past 2**63" in result.output and len(result.output.strip().splitlines()) == 1
    code, out = cli_json(store, "estimate", *huge)
    assert code == 2 and out["error"]["type"] == "UsageError"
    assert _sources(store) == before


@pytest.mark.parametrize("text, message", [
    ('[parallel]\nsharding = ["fsdp"]\n[[families]]\nparams = 1\n',
     "key parallel.sharding must be one of none, zero1, zero2, zero3, fsdp, found \\['fsdp'\\]"),
    ('[[families]]\nparams = 1\noptimizer = {name = "adamw"}\n', "key families\\[0\\].optimizer must be one of"),
    ("[[families]]\nparams = 9_223_372_036_854_775_807\n", "must be a whole number from 1 to 2\\*\\*53"),
    ("[[families]]\nparams = -8\n", "must be a whole number from 1 to 2\\*\\*53"),
    ('[budget]\noverhead = "-4GiB"\n[[families]]\nparams = 1\n', "key budget.overhead must be a size"),
    ('[budget]\noverhead = "90000000000000000000000000000GiB"\n[[families]]\nparams = 1\n', "key budget.overhead: .* larger than any memory"),
])
def test_config_values_of_the_wrong_shape_name_the_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    result = cli(str(tmp_path / "s.duckdb"), "estimate", str(path))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0]
    with pytest.raises(InputError, match=message):
        from receipts.analysis.estimate_config import read_config

        read_config(path)


def _segment(**extra) -> dict:
    return {"address": 0, "total_size": 512, "blocks": [{"size": 512, "state": "active_allocated"}], **extra}


@pytest.mark.parametrize("content, expected", [
    ({"segments": [_segment(device=None)]}, r"segments\[0\]\.device is None; expected a CUDA device index"),
    ({"segments": [_segment(device="cuda:0")]}, r"segments\[0\]\.device is 'cuda:0'; expected"),
    ({"segments": [_segment(device=-1)]}, r"segments\[0\]\.device is -1; expected"),
    ({"segments": [_segment(device=2**40)]}, r"segments\[0\]\.device is 1099511627776; expected"),
    ({"segments": [_segment()], "allocator_settings": {"roundup_power2_divisions": [1, 2]}},
     r"allocator_settings\.roundup_power2_divisions is \[1, 2\]; expected a dict of power-of-two interval"),
    ({"segments": [_segment()], "allocator_settings": {"roundup_power2_divisions": {"1": "x"}}},
     r"allocator_settings\.roundup_power2_divisions is \{'1': 'x'\}"),
    ({"segments": [_segment()], "allocator_settings": {"max_split_size": "big"}},
     r"allocator_settings\.max_split_size is 'big'; expected an integer"),
    ({"segments": [_segment()], "allocator_settings": [1]}, r"'allocator_settings' is a list; expected a dict"),
    ({"segments": [], "device_traces": [[{"action": "alloc", "addr": 0, "size": 2**70}]]},
     r"device_traces\[0\]\[0\] \(alloc\) needs integer 'addr' and 'size' \(bytes from 0 to 2\*\*50\)"),
])
def test_snapshot_fields_of_the_wrong_type_name_the_field(tmp_path, store, content, expected):
    path = tmp_path / "x.pickle.gz"
    path.write_bytes(gzip.compress(pickle.dumps(content)))
    with pytest.raises(InputError, match=expected) as exc:
        memory_snapshot.parse(path)
    assert str(path) in str(exc.value)
    before = _sources(store)
    result = cli(store, "ingest", str(path), "--attach", "adamw_1gpu")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert _sources(store) == before
