"""Fuzzing text inputs with mutations of real files: training logs, machine-fact files, configuration
and sidecar files, and the redactor. The contract is tests/fuzzing.py's."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import math
from pathlib import Path
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from receipts.errors import InputError, UnsupportedVersion
from conftest import GPU_DATA

from fuzzing import BYTE_OPS, LOG_SEEDS, MUTATIONS, REGISTRY_KEYS, SIDECAR_KEYS, SYSINFO_SEEDS, apply, config_doc, finite_non_negative, fraction, fuzz, holds, mutate, needs, time_bound


# --- text logs ------------------------------------------------------------------------------

def _check_parsed_run(parsed) -> None:
    finite_non_negative(parsed.steps, "step_ms", "tokens_per_s", "allocated_bytes", "reserved_bytes")
    assert parsed.steps["line"].drop_nulls().min() is None or parsed.steps["line"].drop_nulls().min() >= 1


@fuzz("log")
@given(seed=st.sampled_from(sorted(LOG_SEEDS) or ["-"]), ops=MUTATIONS)
def test_every_log_parser_parses_or_names_the_file(tmp_path_factory, seed, ops):
    needs(LOG_SEEDS)
    from receipts.pipeline import parse_log

    path = tmp_path_factory.mktemp("log") / Path(seed).name
    path.write_bytes(mutate(LOG_SEEDS[seed], ops))
    # A flipped byte can turn `"v":1` into `"v":7`: a version this build does not read is a clean error too.
    parsed = holds(lambda: parse_log(path), path, errors=(InputError, UnsupportedVersion))
    if parsed is not None:
        _check_parsed_run(parsed)


COMPRESSORS = {"gzip": gzip.compress, "xz": lzma.compress, "bzip2": bz2.compress}


@fuzz("log_compressed")
@given(seed=st.sampled_from(sorted(LOG_SEEDS) or ["-"]), how=st.sampled_from(sorted(COMPRESSORS)),
       ops=st.lists(BYTE_OPS, max_size=2), cut=st.none() | st.floats(0.0, 1.0), flip=st.none() | st.integers(0, 1 << 20))
def test_a_compressed_log_parses_as_its_text_or_names_the_file(tmp_path_factory, seed, how, ops, cut, flip):
    # A log kept gzipped, xz'd or bzip2'd is read through its decompressor: damage to the text is the text's
    # to report, damage to the compressed stream (cut short, a flipped byte) one clear error naming the file.
    needs(LOG_SEEDS)
    from receipts.pipeline import parse_log

    packed = bytearray(COMPRESSORS[how](mutate(LOG_SEEDS[seed], ops)))
    if cut is not None:
        del packed[max(1, int(len(packed) * cut)):]
    if flip is not None:
        packed[flip % len(packed)] ^= 0x5A
    path = tmp_path_factory.mktemp("packed") / f"{Path(seed).name}.{how}"
    path.write_bytes(bytes(packed))
    parsed = holds(lambda: parse_log(path), path, errors=(InputError, UnsupportedVersion))
    if parsed is not None:
        _check_parsed_run(parsed)


LOG_FORMAT_NAMES = ("receipt", "megatron", "nanochat", "torchtitan", "modded-nanogpt", "mllog")


@fuzz("log_forced_format")
@given(seed=st.sampled_from(sorted(LOG_SEEDS) or ["-"]), fmt=st.sampled_from(LOG_FORMAT_NAMES),
       ops=st.lists(BYTE_OPS, max_size=3))
def test_forcing_any_format_on_any_log_parses_or_names_the_file(tmp_path_factory, seed, fmt, ops):
    needs(LOG_SEEDS)
    from receipts.pipeline import parse_log

    path = tmp_path_factory.mktemp("forced") / Path(seed).name
    path.write_bytes(mutate(LOG_SEEDS[seed], ops))
    parsed = holds(lambda: parse_log(path, fmt), path, errors=(InputError, UnsupportedVersion))
    if parsed is not None:
        _check_parsed_run(parsed)


@pytest.mark.parametrize("seed", sorted(LOG_SEEDS))
def test_crlf_and_bom_never_change_a_number(tmp_path, seed):
    from receipts.pipeline import parse_log

    plain = tmp_path / "plain.log"
    plain.write_bytes(LOG_SEEDS[seed])
    try:
        expected = parse_log(plain)
    except InputError:
        pytest.skip("not a log this project reads")
    for op in (("crlf",), ("bom",)):
        changed = tmp_path / f"{op[0]}.log"
        changed.write_bytes(apply(LOG_SEEDS[seed], op))
        got = parse_log(changed)
        assert got.steps.drop("line").equals(expected.steps.drop("line")), op


# --- machine-fact files (nvidia-smi topo -m, collect_env, nccl-tests) ------------------------------

@fuzz("sysinfo")
@given(seed=st.sampled_from(sorted(SYSINFO_SEEDS) or ["-"]), ops=MUTATIONS,
       force=st.sampled_from([None, "topology", "collect_env", "nccl_tests"]))
def test_machine_fact_parsers_parse_or_name_the_file(tmp_path_factory, seed, ops, force):
    needs(SYSINFO_SEEDS)
    from receipts.ingest import sniff, sysinfo
    from receipts.schema.model import FACT_SECTIONS

    path = tmp_path_factory.mktemp("sysinfo") / Path(seed).name
    path.write_bytes(mutate(SYSINFO_SEEDS[seed], ops))
    kind = force or holds(lambda: sniff.sniff_kind(path), path)
    if kind not in FACT_SECTIONS:
        return
    got = holds(lambda: sysinfo.facts(path, kind), path)
    if got is None:
        return
    section, facts = got
    json.dumps(facts, allow_nan=False)  # stored as JSON: no NaN / inf may reach it
    for row in facts.get("nccl_tests", {}).get("rows", ()):
        for key, value in row.items():
            if isinstance(value, float):
                assert math.isfinite(value) and value >= 0, (key, value)


def test_a_blank_line_flood_is_sniffed_in_linear_time(tmp_path):
    """4,096 blank lines before the text once took 91 s in ingest/sysinfo.py (a cubic regex). A super-linear
    scan of 262,144 of them would run for hours: the hang bound catches it, with no timing threshold."""
    from receipts.ingest import sniff, sysinfo

    for blank in ("\n", " \n", "\t\r\n"):
        with time_bound():
            assert sysinfo.detect(blank * 262_144 + "x") is None
    topo = (GPU_DATA / "sysinfo" / "nvidia-smi_topo_m.txt").read_text()
    path = tmp_path / "topo.txt"
    path.write_text(" \n" * 262_144 + topo)
    with time_bound():
        assert sniff.sniff_kind(path) in ("log", "topology")


# --- configuration and sidecar files ---------------------------------------------------------------







DEEP = st.integers(1, 4000).map(lambda n: "a = " + "[" * n + "]" * n + "\n") | \
    st.integers(1, 3000).map(lambda n: "a = " + "{b = " * n + "1" + "}" * n + "\n")
RAW_DAMAGE = st.lists(st.one_of(
    st.tuples(st.just("truncate"), fraction), st.tuples(st.just("flip"), fraction, st.integers(0, 255)),
    st.tuples(st.just("nul"), fraction), st.tuples(st.just("utf16")), st.tuples(st.just("latin1")),
    st.tuples(st.just("crlf")), st.tuples(st.just("bom"))), max_size=2)



def _write_config(path: Path, text: str, deep: str | None, damage: list[tuple]) -> None:
    path.write_bytes(mutate((deep or text).encode("utf-8", "surrogatepass"), damage) if damage else
                     (deep or text).encode("utf-8", "surrogatepass"))


@fuzz("sidecar")
@given(text=config_doc(SIDECAR_KEYS), deep=st.none() | DEEP, damage=RAW_DAMAGE)
def test_sidecar_reads_or_names_the_file(tmp_path_factory, text, deep, damage):
    from receipts.pipeline import read_sidecar

    folder = tmp_path_factory.mktemp("sidecar")
    _write_config(folder / "receipt.toml", text, deep, damage)
    log = folder / "run.log"
    log.write_text("x\n")
    got = holds(lambda: read_sidecar(log), folder / "receipt.toml")
    if got is not None:
        claim, data = got
        for value in (claim.host_lineage, claim.preset, claim.regime, claim.hostname, data.get("run_name")):
            assert value is None or isinstance(value, str)
        assert all(isinstance(t, str) for t in data.get("tags", ()))


@fuzz("registry")
@given(text=config_doc(REGISTRY_KEYS), deep=st.none() | DEEP, damage=RAW_DAMAGE, as_cwd=st.booleans())
def test_registry_loads_and_resolves_or_names_the_file(tmp_path_factory, text, deep, damage, as_cwd):
    from receipts.schema.identity import resolve_identity
    from receipts.schema.model import IdentityClaim
    from receipts.schema.registry import load_registry

    folder = tmp_path_factory.mktemp("registry")
    path = folder / ("receipts.toml" if as_cwd else "user.toml")
    _write_config(path, text, deep, damage)
    registry = holds(lambda: load_registry(None if as_cwd else path, cwd=folder), path,
                     errors=(InputError, UnsupportedVersion))
    if registry is not None:  # a registry that loads must also resolve, and its rules must redact
        from receipts.schema.secrets import redact

        with time_bound():
            resolve_identity(IdentityClaim("h200-usw1c-bench-01", "x", "fsdp2/regional-compile tp2", "h200-1"), registry)
            redact({"NCCL_X": "redis://:pw@h", "A_TOKEN": "t"}, rules=registry.env_rules)


@fuzz("categories")
@given(text=config_doc({"rules": REGISTRY_KEYS["rules"]}), deep=st.none() | DEEP, damage=RAW_DAMAGE)
def test_category_rules_load_or_name_the_file(tmp_path_factory, text, deep, damage):
    from receipts.schema.categories import load_category_rules

    folder = tmp_path_factory.mktemp("categories")
    path = folder / "cats.toml"
    _write_config(path, text, deep, damage)
    rules = holds(lambda: load_category_rules(path, cwd=folder / "none"), path)
    if rules is not None:
        with time_bound():  # a user's rule may name a category of its own: it has a kind
            assert rules.classify("ampere_sgemm_128x64_tn") in rules.kinds


@fuzz("env_rules")
@given(text=config_doc({"secrets": REGISTRY_KEYS["secrets"], "env": REGISTRY_KEYS["env"]}), deep=st.none() | DEEP,
       damage=RAW_DAMAGE)
def test_env_rules_load_or_name_the_file(tmp_path_factory, text, deep, damage):
    from receipts.schema.secrets import load_env_rules, redact

    folder = tmp_path_factory.mktemp("envrules")
    path = folder / "env.toml"
    _write_config(path, text, deep, damage)
    rules = holds(lambda: load_env_rules(path), path)
    if rules is not None:
        with time_bound():
            redact("--password=hunter22 redis://:pw@host", rules=rules)


# --- the redactor ------------------------------------------------------------------------------

SECRET_TOKENS = st.text(st.characters(codec="ascii", categories=["Lu", "Ll", "Nd"]), min_size=8, max_size=24)
SECRET_FORMS = st.sampled_from([
    "redis://:{s}@cache:6379", "https://{s}@github.com/o/r.git", "postgresql://u:{s}@h:5432/db", "--password={s}",
    "--token {s}", "--hf-token={s}", "--db-password '{s}'", "mysql -u root -p{s} db", "sshpass -p {s} ssh h",
    "host=h password={s} port=1", "https://h/api?access_token={s}&x=1", "redis-cli -h h -a {s} ping",
])
NOISE = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)


@fuzz("redactor")
@given(secret=SECRET_TOKENS, form=SECRET_FORMS, before=NOISE, after=NOISE, name=st.sampled_from(
    ["NCCL_URL", "TRAIN_ARGS", "X", "DATABASE_URL", "MY_TOKEN"]), junk=st.text(max_size=2000))
def test_the_redactor_never_lets_a_planted_secret_through(secret, form, before, after, name, junk):
    from receipts.schema.secrets import load_env_rules, redact, secret_values_in

    assume(secret not in before + after and secret not in "<redacted>")
    rules = _rules_cache.setdefault("shipped", load_env_rules())
    text = form.format(s=secret)
    with time_bound(5):
        # in free text, separated from the noise by a space (a secret glued to arbitrary text is another word)
        line = f"{before} {text} {after}"
        assert secret not in redact(line, rules=rules)
        env = {name: text, "OTHER": junk}
        known = secret_values_in(env, rules=rules)
        out = redact(env, rules=rules, known_values=known)
        assert secret not in json.dumps(out)
        assert secret not in redact(f"echo {secret}", rules=rules, known_values=known)
        redact(junk, rules=rules, known_values=known)  # arbitrary text never raises


_rules_cache: dict = {}


