"""`receipts estimate`: the seeds' Estimate fields per rank, from a TOML config or flags."""

from __future__ import annotations

import math

import pytest

from cli_helpers import cli, cli_json
from receipts.analysis.estimate import Activations, EstimateConfig, Family, Routing, estimate, routing_bytes
from receipts.analysis.estimate_config import read_config
from receipts.errors import InputError

HYBRID = """
[parallel]
shard_degree = 4
sharding = "fsdp"
tp = 2
ep = 8

[precision]
param_dtype = "bf16"
grad_dtype = "bf16"
master_dtype = "fp32"

[[families]]
name = "embeddings and norms"
params = 1_000_000
ownership = "replicated"
optimizer = "adamw"

[[families]]
name = "attention and mamba projections"
params = 8_000_000
ownership = "tp"
optimizer = "muon"

[[families]]
name = "experts"
params = 64_000_000
ownership = "ep"
optimizer = "muon"

[activations]
micro_batch = 1
sequence = 4096
hidden = 4096
layers = 8
recompute = "selective"

[routing]
top_k = 2
experts = 128
local_experts = 4
capacity_factor = 1.2

[budget]
runtime_reserve = "4GiB"
overhead = "1.5GiB"
device_total = "141GB"
"""


def test_ownership_decides_what_each_degree_divides(tmp_path):
    path = tmp_path / "hybrid.toml"
    path.write_text(HYBRID)
    e = estimate(read_config(path))
    c = e.categories
    # replicated: only the shard degree; TP projections: / tp too; experts: / ep too. bf16 params.
    assert c["replicated_params"] == 1_000_000 // 4 * 2
    assert c["tensor_parallel_params"] == 8_000_000 // 2 // 4 * 2
    assert c["expert_parallel_params"] == 64_000_000 // 8 // 4 * 2
    local = 1_000_000 // 4 + 8_000_000 // 8 + 64_000_000 // 32
    assert c["gradients"] == local * 2
    # fp32 master weights beside bf16 params: each optimizer keeps a master copy besides its states
    assert c["other_optimizer"] == 1_000_000 // 4 * 4 * (2 + 1)
    assert c["matrix_optimizer"] == (8_000_000 // 8 + 64_000_000 // 32) * 4 * (1 + 1)
    # TP 2 without sequence parallelism: (10 + 24/tp)·s·b·h per layer, 8 layers
    assert c["activations"] == (10 + 24 // 2) * 4096 * 1 * 4096 * 8
    assert c["routing"] == 4096 * 2 * 4 + 2 * (77 * 4096 * 4 * 2)  # the seeds' worked example, one MoE layer
    assert c["runtime_reserve"] == 4 << 30 and c["overhead"] == 3 << 29
    # the peak is the largest phase (not the sum of the fields); the device must hold it and the reserve
    assert e.allocated_bytes == max(e.phases.values()) < sum(c.values())
    assert e.total_bytes == e.allocated_bytes + c["runtime_reserve"] + c["overhead"]


def test_routing_scratch_matches_the_seeds_worked_example():
    """4096 tokens, top_k 2, 128 experts, capacity factor 1.2, hidden 4096, 4 local experts, bf16: capacity 77,
    a dispatch-count surface of ~32 KB and receive and combine buffers of ~2.5 MB each (seeds/004)."""
    r = Routing(top_k=2, experts=128, local_experts=4, capacity_factor=1.2)
    assert math.ceil(4096 * 2 / 128 * 1.2) == 77
    got = routing_bytes(r, tokens=4096, hidden=4096)
    assert got == 4096 * 2 * 4 + 2 * (77 * 4096 * 4 * 2)
    assert 4.9e6 < got < 5.2e6  # "about 5 MB of live routing scratch for one layer"


def test_sharding_stages():
    fam = (Family("m", 1_000_000),)
    full = estimate(EstimateConfig(fam, shard_degree=4, sharding="fsdp")).categories
    z1 = estimate(EstimateConfig(fam, shard_degree=4, sharding="zero1")).categories
    ddp = estimate(EstimateConfig(fam, shard_degree=4, sharding="none")).categories
    assert full["replicated_params"] * 4 == z1["replicated_params"] == ddp["replicated_params"] == 4_000_000
    assert z1["other_optimizer"] * 4 == ddp["other_optimizer"] == 8_000_000
    assert z1["gradients"] == ddp["gradients"] == 4_000_000


def test_activation_recompute_and_eager_attention():
    a = Activations(micro_batch=2, sequence=2048, hidden=1024, layers=2, heads=16, attention="eager")
    sbh = 2 * 2048 * 1024
    base = EstimateConfig((Family("m", 1),))
    from dataclasses import replace

    none = estimate(replace(base, activations=a)).categories["activations"]
    assert none == 2 * (34 * sbh + 5 * 16 * 2048 * 2048 * 2)
    full = estimate(replace(base, activations=replace(a, recompute="full"))).categories["activations"]
    assert full == 2 * 2 * sbh


def test_fused_adamw_counts_the_device_step_when_tensors_are_given():
    e = estimate(EstimateConfig((Family("m", 1000, optimizer="adamw-fused", tensors=10),), shard_degree=1))
    assert e.categories["other_optimizer"] == 2 * 1000 * 4 + 10 * 4
    assert estimate(EstimateConfig((Family("m", 1000, optimizer="adamw-fused"),))).notes


@pytest.mark.parametrize("text, message", [
    ("[parallel]\ntp = 0\n[[families]]\nparams = 1\n", "key parallel.tp must be a whole number from 1 to 2\\*\\*53, found 0"),
    ("[[families]]\nparams = 1\nownership = \"pp\"\n", "key families\\[0\\].ownership must be one of replicated, tp, ep"),
    ("[[families]]\nparams = 1\noptimiser = \"adamw\"\n", "unknown key families\\[0\\].optimiser"),
    ("[[families]]\nname = \"x\"\n", "key families\\[0\\].params is missing"),
    ("[precision]\nmaster_dtype = \"fp64\"\n[[families]]\nparams = 1\n", "key precision.master_dtype must be one of"),
    ("[budget]\nruntime_reserve = \"4 gigs\"\n[[families]]\nparams = 1\n", "key budget.runtime_reserve"),
    ("[activation]\nlayers = 2\n", "unknown section \\[activation\\]"),
    ("[[families]]\nparams = 1\n[activations]\nmicro_batch = 1\n", "key activations.sequence is missing"),
    ("[[families]\nparams = 1\n", "not valid TOML"),
])
def test_bad_config_is_one_line_naming_file_and_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as exc:
        read_config(path)
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)


def test_cli_bad_config_exits_2_with_one_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[parallel]\nshard_degree = \"eight\"\n[[families]]\nparams = 1\n")
    result = cli(str(tmp_path / "s.duckdb"), "estimate", str(path))
    assert result.exit_code == 2
    assert f"{path}: key parallel.shard_degree must be a whole number" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_cli_flags_over_a_config(tmp_path):
    path = tmp_path / "hybrid.toml"
    path.write_text(HYBRID)
    code, out = cli_json(str(tmp_path / "s.duckdb"), "estimate", str(path), "--shard-degree", "8",
                         "--optimizer", "sgd")
    assert code == 0
    assert out["inputs"]["shard_degree"] == 8 and {f["optimizer"] for f in out["inputs"]["families"]} == {"sgd"}
    assert out["categories"]["matrix_optimizer"] == 0
    assert out["device_total_bytes"] == 141 * 10**9 and out["headroom_bytes"] == 141 * 10**9 - out["total_bytes"]
    result = cli(str(tmp_path / "s.duckdb"), "estimate", "--optimizer", "lion", "--params", "10")
    assert result.exit_code == 2 and "--optimizer 'lion' is not one of" in result.output
    assert cli(str(tmp_path / "s.duckdb"), "estimate").exit_code == 2


GPT_537M = ("--params", "537116672", "--micro-batch", "4", "--sequence", "2048", "--hidden", "2048", "--layers", "8",
            "--vocab", "32768")


def test_the_peak_is_the_largest_phase_not_the_sum_of_the_fields(tmp_path):
    """The transient terms (the logits' fp32 copies, the gathered root unit, foreach AdamW's temporaries) live in
    different phases: the peak is the largest phase, below the sum of every field."""
    code, out = cli_json(str(tmp_path / "s.duckdb"), "estimate", *GPT_537M, "--device-total", "141GB",
                         "--reserve", "4GiB")
    assert code == 0
    c, sbv = out["categories"], 4 * 2048 * 32768
    assert c["logits_upcast"] == 3 * sbv * 4
    assert c["unsharded_params"] == 2 * 32768 * 2048 * 2          # embedding and head, gathered in bf16
    assert c["optimizer_temporaries"] == 537116672 * 4            # foreach AdamW: one fp32 tensor per parameter
    phases = out["phases"]
    assert out["peak_allocated_bytes"] == max(phases.values()) == phases["backward_start"]
    assert phases["backward_start"] == (c["replicated_params"] + c["other_optimizer"] + c["activations"]
                                        + c["logits_upcast"] + c["unsharded_params"])
    assert out["peak_allocated_bytes"] < sum(v for k, v in c.items() if k not in ("runtime_reserve", "overhead"))
    assert out["total_bytes"] == out["peak_allocated_bytes"] + 4 * 2**30
    assert out["headroom_bytes"] == 141 * 10**9 - out["total_bytes"] and out["fits"] is True
    fused = cli_json(str(tmp_path / "s.duckdb"), "estimate", *GPT_537M, "--optimizer", "adamw-fused")[1]
    assert fused["categories"]["optimizer_temporaries"] == 0


def test_recompute_adds_its_working_set_and_lowers_the_peak(tmp_path):
    db = str(tmp_path / "s.duckdb")
    none = cli_json(db, "estimate", *GPT_537M)[1]
    full = cli_json(db, "estimate", *GPT_537M, "--recompute", "full")[1]
    assert none["categories"]["recompute_working_set"] == 0
    assert full["categories"]["recompute_working_set"] == 34 * 2048 * 4 * 2048   # one layer, rebuilt in backward
    assert full["peak_allocated_bytes"] < none["peak_allocated_bytes"]


def test_estimate_formats_and_the_fit_line(tmp_path):
    db = str(tmp_path / "s.duckdb")
    piped = cli(db, "estimate", *GPT_537M, "--device-total", "12GiB")
    assert piped.exit_code == 0 and "┃" not in piped.output and "│" not in piped.output
    rows = [line.split("\t") for line in piped.output.splitlines()]
    assert rows[0] == ["field", "bucket", "bytes"]
    fields = {r[0]: int(r[2]) for r in rows[1:]}
    assert fields["headroom"] == 12 * 2**30 - fields["total"] < 0
    table = cli(db, "estimate", *GPT_537M, "--device-total", "12GiB", "--format", "table")
    assert "does NOT fit" in table.output and "backward start" in table.output
    assert cli(db, "estimate", *GPT_537M, "--format", "yaml").exit_code == 2
    bad = cli(db, "estimate", *GPT_537M, "--reserve", "lots")
    assert bad.exit_code == 2 and "--reserve" in bad.output and len(bad.output.strip().splitlines()) == 1
