"""Configuration and sidecar files with wrong value types, non-UTF-8 bytes, deep nesting or the wrong
kind of file: one InputError naming the file (and the key), exit 2 through the CLI, never a traceback.

A fuzz campaign once counted 463 tracebacks of this kind (receipt.toml, --registry, ./receipts.toml)."""

from __future__ import annotations

import os

import pytest

from cli_helpers import cli
from conftest import write_native_log
from receipts.errors import InputError, UnsupportedVersion
from receipts.pipeline import read_sidecar
from receipts.schema.categories import load_category_rules
from receipts.schema.registry import load_registry
from receipts.schema.secrets import load_env_rules

REGISTRY_CASES = {
    "hosts_not_a_table": ("hosts = 3", "hosts"),
    "host_not_a_table": ("hosts.h1 = 'x'", "hosts.h1"),
    "patterns_a_string": ("[hosts.h1]\npatterns = 'h1-*'", "hosts.h1.patterns"),
    "patterns_of_numbers": ("[hosts.h1]\npatterns = [1, 2]", "hosts.h1.patterns[0]"),
    "aliases_a_table": ("[hosts.h1]\naliases = {a = 1}", "hosts.h1.aliases"),
    "description_a_list": ("[hosts.h1]\ndescription = []", "hosts.h1.description"),
    "preset_features_a_list": ("[presets.p1]\nfeatures = [1]", "presets.p1.features"),
    "preset_aliases_numbers": ("[presets.p1]\naliases = [1.5]", "presets.p1.aliases[0]"),
    "engine_spellings_a_string": ("[regimes.engines]\nfsdp2 = 'fsdp2'", "regimes.engines.fsdp2"),
    "regimes_a_list": ("regimes = [1]", "regimes"),
    "secret_patterns_a_string": ("[secrets]\nvalue_patterns = 'x'", "secrets.value_patterns"),
    "secret_pattern_bad_regex": ("[secrets]\nvalue_patterns = ['(unclosed']", "secrets.value_patterns[0]"),
    "secret_names_numbers": ("[secrets]\nname_patterns = [7]", "secrets.name_patterns[0]"),
    "env_knobs_a_table": ("[env]\nknobs = {a = 1}", "env.knobs"),
    "env_aliases_numbers": ("[env.aliases]\nA = 1", "env.aliases.A"),
    "secrets_a_string": ("secrets = 'x'", "secrets"),
}


@pytest.mark.parametrize("case", sorted(REGISTRY_CASES))
def test_registry_value_of_the_wrong_type_names_file_and_key(tmp_path, case):
    text, key = REGISTRY_CASES[case]
    path = tmp_path / "user.toml"
    path.write_text(text + "\n")
    with pytest.raises(InputError) as err:
        load_registry(path, cwd=tmp_path / "nowhere")
    assert str(path) in str(err.value) and key in str(err.value)
    # the same file as ./receipts.toml
    (tmp_path / "receipts.toml").write_text(text + "\n")
    with pytest.raises(InputError, match="receipts.toml"):
        load_registry(cwd=tmp_path)


BAD_FILES = {
    "latin1": "[hosts.h1]\ndescription = 'caf\xe9'\n".encode("latin-1"),
    "utf16": "[hosts.h1]\npatterns = ['a']\n".encode("utf-16"),
    "deep_array": b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "deep_table": b"a = " + b"{b = " * 3000 + b"1" + b"}" * 3000 + b"\n",
    "not_toml": b"hosts = [[[\n",
    "nul": b"version = 1\x00\n",
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_unreadable_registry_sidecar_and_rules_are_one_line(tmp_path, case):
    path = tmp_path / "receipt.toml"
    path.write_bytes(BAD_FILES[case])
    log = write_native_log(tmp_path / "run.log", [100.0, 101.0])
    for load in (lambda: load_registry(path, cwd=tmp_path / "x"), lambda: read_sidecar(log),
                 lambda: load_category_rules(path, cwd=tmp_path / "x"), lambda: load_env_rules(path)):
        with pytest.raises(InputError) as err:
            load()
        assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_registry_that_is_a_fifo_or_a_folder_is_refused_without_reading(tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path, tmp_path / "missing.toml"):
        with pytest.raises(InputError, match=str(path)):
            load_registry(path, cwd=tmp_path / "x")
        with pytest.raises(InputError, match=str(path)):
            load_category_rules(path, cwd=tmp_path / "x")


def test_registry_of_another_version_is_refused_naming_it(tmp_path):
    path = tmp_path / "user.toml"
    path.write_text("version = [2]\n")
    with pytest.raises(UnsupportedVersion, match="user.toml"):
        load_registry(path, cwd=tmp_path / "x")


SIDECAR_CASES = {
    "host_lineage_a_number": ("host_lineage = 3", "host_lineage"),
    "preset_a_table": ("preset = {a = 1}", "preset"),
    "regime_a_list": ("regime = ['fsdp2']", "regime"),
    "run_name_a_date": ("run_name = 2026-01-01", "run_name"),
    "tags_a_string": ("tags = 'v19c'", "tags"),
    "tags_of_numbers": ("tags = ['a', 2]", "tags[1]"),
    "hostname_a_bool": ("hostname = true", "hostname"),
}


@pytest.mark.parametrize("case", sorted(SIDECAR_CASES))
def test_sidecar_value_of_the_wrong_type_names_file_and_key(tmp_path, case, db):
    text, key = SIDECAR_CASES[case]
    (tmp_path / "receipt.toml").write_text(text + "\n")
    log = write_native_log(tmp_path / "run.log", [100.0, 101.0])
    with pytest.raises(InputError) as err:
        read_sidecar(log)
    assert "receipt.toml" in str(err.value) and key in str(err.value)
    result = cli(db, "ingest", str(log))
    assert result.exit_code == 2
    assert "receipt.toml" in result.output and "Traceback" not in result.output


def test_a_good_sidecar_still_reads(tmp_path):
    (tmp_path / "receipt.toml").write_text("host_lineage = 'h200-usw1c-bench-01'\nrun_name = 'r1'\ntags = ['v19c']\n"
                                           "note = 'free text is kept'\n")
    claim, data = read_sidecar(write_native_log(tmp_path / "run.log", [100.0]))
    assert claim.host_lineage == "h200-usw1c-bench-01" and data["run_name"] == "r1" and data["tags"] == ["v19c"]


CATEGORY_CASES = {
    "rules_a_string": "rules = 'x'",
    "rule_a_number": "rules = [1]",
    "pattern_a_number": "[[rules]]\ncategory = 'gemm'\npattern = 3",
    "category_a_list": "[[rules]]\ncategory = ['gemm']\npattern = 'x'",
    "pattern_bad_regex": "[[rules]]\ncategory = 'gemm'\npattern = '(('",
    "category_unknown": "[[rules]]\ncategory = 'nope'\npattern = 'x'",
}


@pytest.mark.parametrize("case", sorted(CATEGORY_CASES))
def test_category_rules_of_the_wrong_type_name_the_file_and_rule(tmp_path, case):
    path = tmp_path / "cats.toml"
    path.write_text(CATEGORY_CASES[case] + "\n")
    with pytest.raises(InputError, match="cats.toml"):
        load_category_rules(path, cwd=tmp_path / "x")


def test_cli_with_a_bad_registry_exits_2_in_one_line(tmp_path, db):
    bad = tmp_path / "bad.toml"
    bad.write_text("[hosts.h1]\npatterns = 5\n")
    log = write_native_log(tmp_path / "run.log", [100.0, 101.0])
    result = cli(db, "--registry", str(bad), "ingest", str(log))
    assert result.exit_code == 2, result.output
    assert "bad.toml" in result.output and "hosts.h1.patterns" in result.output
    assert "Traceback" not in result.output
