"""torch.compile's own mode names are regime words, and a batch says each registry warning once.

`--regime single/reduce-overhead` is torch.compile(mode="reduce-overhead"): a regime of its own (CUDA
graphs), never `single/unknown-compile/+overhead,+reduce` with a warning per word and per file."""

from __future__ import annotations

import pytest

from receipts.schema.identity import parse_regime, unknown_values
from receipts.schema.model import IdentityClaim
from receipts.schema.registry import load_registry
from tests.cli_helpers import cli, cli_json
from tests.conftest import realdata

REGISTRY = load_registry(None)


@pytest.mark.parametrize("raw, canonical", [
    ("single/reduce-overhead", "single/reduce-overhead-compile"),
    ("fsdp2, mode=reduce-overhead", "fsdp2/reduce-overhead-compile"),
    ("ddp/max-autotune", "ddp/max-autotune-compile"),
    ("ddp max-autotune-no-cudagraphs", "ddp/max-autotune-no-cudagraphs-compile"),
    ("fsdp2/default", "fsdp2/full-compile"),             # mode="default": the whole model, no CUDA graphs
    ("fsdp2/regional-compile", "fsdp2/regional-compile"),
])
def test_compile_modes_are_known_regime_parts(raw, canonical):
    regime, notes = parse_regime(raw, REGISTRY)
    assert regime is not None and regime.canonical == canonical and notes == []
    assert unknown_values(IdentityClaim(regime=raw), REGISTRY) == []


def test_modes_are_distinct_regimes():
    names = {parse_regime(r, REGISTRY)[0].canonical for r in
             ("single/reduce-overhead", "single/max-autotune", "single/max-autotune-no-cudagraphs", "single/default")}
    assert len(names) == 4


def test_a_batch_says_each_registry_warning_once_naming_the_files(tmp_path, db):
    bare = realdata("logs", "nanochat_pr147_a100_mfu.txt").read_text()
    logs = []
    for i in range(3):
        path = tmp_path / f"run{i}.log"
        path.write_text(bare.replace("step 00004/", f"step 0000{4 + i}/", 1) if i else bare)
        logs.append(str(path))
    out = cli(db, "ingest", *logs, "--host-lineage", "h100-device-x9", "--preset", "toy_nanochat",
              "--regime", "single/reduce-overhead")
    assert out.exit_code == 0, out.stderr
    lines = [ln for ln in " ".join(out.stderr.split("\n  ")).splitlines() if "warning:" in ln or "note:" in ln]
    assert not any("regime" in ln for ln in lines), lines  # reduce-overhead is known now
    # one note for the batch: the host and the preset kept as given, after the files it is about
    host = [ln for ln in lines if "host lineage 'h100-device-x9'" in ln]
    assert len(host) == 1 and host[0].endswith(f"(3 files: {', '.join(logs)})"), lines
    assert {r["identity"]["launch_regime"] for r in cli_json(db, "list")[1]} == {"single/reduce-overhead-compile"}
