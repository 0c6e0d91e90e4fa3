"""Identity canonicalisation: hosts, preset aliases, launch regimes."""

from __future__ import annotations

import pytest

from receipts.errors import InputError
from receipts.schema.identity import parse_regime, resolve_identity
from receipts.schema.model import IdentityClaim
from receipts.schema.registry import load_registry


@pytest.fixture
def registry(tmp_path):
    return load_registry(cwd=tmp_path)


def test_regime_spellings_are_one_regime(registry):
    a, _ = parse_regime("fsdp2/regional-compile", registry)
    b, _ = parse_regime("FSDP2, regional compile", registry)
    assert a == b and a.canonical == "fsdp2/regional-compile"


@pytest.mark.parametrize("raw, canonical", [
    # the string does not say how it was compiled: unknown, never assumed eager
    ("Megatron TP2 PP2 CP2", "megatron/unknown-compile/cp2,pp2,tp2"),
    ("megatron tp=2, pp=2, cp=2", "megatron/unknown-compile/cp2,pp2,tp2"),
    ("megatron tp2 eager", "megatron/no-compile/tp2"),
    ("megatron-deepspeed tp1 pp1 ep1 dp8", "megatron-deepspeed/unknown-compile/dp8"),   # its own engine
    ("Megatron-LM tp2", "megatron/unknown-compile/tp2"),
    ("single-gpu eager", "single/no-compile"),
    ("fsdp2/unknown-compile", "fsdp2/unknown-compile"),                                # canonical form re-parses
    ("DDP no-compile", "ddp/no-compile"),
    ("fsdp2 + torch.compile", "fsdp2/full-compile"),
    ("FSDP2 eager", "fsdp2/no-compile"),
])
def test_regime_canonical_forms(registry, raw, canonical):
    regime, _ = parse_regime(raw, registry)
    assert regime.canonical == canonical


def test_unrecognised_regime_words_are_kept_so_regimes_never_collapse(registry):
    plain, _ = parse_regime("fsdp2", registry)
    odd, notes = parse_regime("fsdp2 dualpipe", registry)
    assert plain.canonical != odd.canonical
    assert any("dualpipe" in n for n in notes)


def test_regime_without_engine_is_missing(registry):
    regime, notes = parse_regime("regional compile", registry)
    assert regime is None and "names no engine" in notes[0]


def test_dense_alias_resolves_to_the_same_family(registry):
    a = resolve_identity(IdentityClaim("h200-usw1c-bench-01", "nam52_h200_moe_no_dsa_ref_v1", "ddp"), registry)
    b = resolve_identity(IdentityClaim("h200-usw1c-bench-01", "nam52_h200_dense_ref_v1", "ddp"), registry)
    assert a.lane.preset_family == b.lane.preset_family == "nam52_h200_dense_ref_v1"
    assert any("alias" in n for n in a.resolution)
    assert dict(a.features)["moe"] is True and dict(a.features)["dsa"] is False


def test_preset_sharing_a_word_is_its_own_family(registry):
    a = resolve_identity(IdentityClaim("x", "nam52_h200_dense_ref_v1", "ddp"), registry)
    b = resolve_identity(IdentityClaim("x", "nam52_h200_dense_no_mhc_recovery_v1", "ddp"), registry)
    assert a.lane.preset_family != b.lane.preset_family


def test_nam52r_aliases(registry):
    a = resolve_identity(IdentityClaim("x", "nam52r_h200_4full_9sparse_candidate_v1", "ddp"), registry)
    assert a.lane.preset_family == "nam52r_h200_prod_candidate_v1"


def test_hostname_pattern_gives_lineage(registry):
    ident = resolve_identity(IdentityClaim(hostname="h200-usw1c-bench-01.internal", preset="p", regime="ddp"), registry)
    assert ident.lane.host_lineage == "h200-usw1c-bench-01" and ident.complete


def test_missing_field_is_incomplete(registry):
    ident = resolve_identity(IdentityClaim("h200-usw1c-bench-01", "nam52_h200_dense_ref_v1", None), registry)
    assert not ident.complete and ident.missing == ["launch_regime"]


def test_user_registry_extends_the_shipped_one(tmp_path):
    (tmp_path / "receipts.toml").write_text(
        'version = 1\n[hosts.lab-box]\npatterns = ["lab-*"]\naliases = []\n'
        '[presets.my_preset_v2]\naliases = ["my_preset_latest"]\nfeatures = {moe = false}\n')
    registry = load_registry(cwd=tmp_path)
    ident = resolve_identity(IdentityClaim(hostname="lab-07", preset="my_preset_latest", regime="ddp"), registry)
    assert ident.lane.host_lineage == "lab-box" and ident.lane.preset_family == "my_preset_v2"
    assert "nam52_h200_dense_ref_v1" in registry.presets  # shipped entries survive


def test_bad_user_registry_names_the_file(tmp_path):
    (tmp_path / "receipts.toml").write_text("version = 1\n[hosts\n")
    with pytest.raises(InputError) as err:
        load_registry(cwd=tmp_path)
    assert "receipts.toml" in str(err.value)


def test_megatron_deepspeed_and_megatron_lm_are_different_lanes(registry):
    mds, _ = parse_regime("megatron-deepspeed tp2 eager", registry)
    mlm, _ = parse_regime("megatron tp2 eager", registry)
    assert mds.engine == "megatron-deepspeed" and mlm.engine == "megatron" and mds.canonical != mlm.canonical


def test_a_single_device_run_can_be_complete(registry):
    ident = resolve_identity(IdentityClaim("h200-usw1c-bench-01", "nam52_h200_dense_ref_v1", "single"), registry)
    assert ident.complete and ident.regime.engine == "single" and ident.lane.launch_regime == "single/unknown-compile"
