"""Fuzzing through the command line: `receipts ingest` exits 0 or 2 and never changes the store on 2, and the
single cases the outside campaign found, each a real process before its fix. The contract is tests/fuzzing.py's."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
import pytest
from hypothesis import given
from hypothesis import strategies as st
from receipts.errors import InputError
from conftest import GPU_DATA, REALDATA

from fuzzing import KINETO_OPS, KINETO_SEED_NAMES, LOG_SEEDS, MUTATIONS, NSYS_OPS, REGISTRY_KEYS, SIDECAR_KEYS, SYSINFO_SEEDS, _cli_store, _json_rows, _row_counts, config_doc, fuzz, kineto_seeds, mutate, mutate_export, mutate_trace, needs, nsys_seeds, time_bound


# --- through the CLI: exit 0 or 2, the store unchanged on 2 -------------------------------------------

OUR_ERRORS = {"InputError", "UnsupportedVersion", "UsageError", "ReceiptNotFound", "StoreError"}




CLI_INPUTS = st.one_of(
    st.tuples(st.just("log"), st.sampled_from(sorted(LOG_SEEDS) or ["-"]), MUTATIONS),
    st.tuples(st.just("sidecar"), st.sampled_from(sorted(LOG_SEEDS) or ["-"]), config_doc(SIDECAR_KEYS)),
    st.tuples(st.just("registry"), st.sampled_from(sorted(LOG_SEEDS) or ["-"]), config_doc(REGISTRY_KEYS)),
    st.tuples(st.just("sysinfo"), st.sampled_from(sorted(SYSINFO_SEEDS) or ["-"]), MUTATIONS),
    st.tuples(st.just("kineto"), st.sampled_from(KINETO_SEED_NAMES[:2]), st.lists(KINETO_OPS, min_size=1, max_size=3)),
    st.tuples(st.just("nsys"), st.sampled_from(["profile1.sqlite", "mock.sqlite"]), st.lists(NSYS_OPS, min_size=1, max_size=2)),
)


@fuzz("cli")
@given(case=CLI_INPUTS)
def test_receipts_ingest_exits_0_or_2_and_never_changes_the_store_on_2(tmp_path_factory, case):
    from typer.testing import CliRunner

    from receipts.cli.main import app

    needs(LOG_SEEDS)
    store = _cli_store(tmp_path_factory)
    kind, seed, ops = case
    folder = tmp_path_factory.mktemp("cli")
    extra: list[str] = []
    if kind == "log":
        path = folder / Path(seed).name
        path.write_bytes(mutate(LOG_SEEDS[seed], ops))
    elif kind in ("sidecar", "registry"):
        path = folder / Path(seed).name
        path.write_bytes(LOG_SEEDS[seed])
        config = folder / ("receipt.toml" if kind == "sidecar" else "user.toml")
        config.write_text(ops, encoding="utf-8", errors="surrogatepass")
        extra = ["--registry", str(config)] if kind == "registry" else []
    elif kind == "sysinfo":
        path = folder / Path(seed).name
        path.write_bytes(mutate(SYSINFO_SEEDS[seed], ops))
        extra_cmd = ["--attach", store["run"]]
    elif kind == "kineto":
        if seed not in kineto_seeds():
            return
        path = folder / "rank0.pt.trace.json"
        path.write_text(json.dumps(mutate_trace(kineto_seeds()[seed], ops)))
    else:
        seeds = nsys_seeds(tmp_path_factory.mktemp("nsys-seeds"))
        if seed not in seeds:
            return
        path = folder / "profile.sqlite"
        mutate_export(seeds[seed], path, ops)
    before = _row_counts(store["db"])
    args = ["--db", str(store["db"]), *extra, "ingest", str(path), "--json", "--host-lineage", "h200-usw1c-bench-01",
            "--preset", "nam52_h200_dense_ref_v1", "--regime", "fsdp2/regional-compile"]
    if kind == "sysinfo":
        args = ["--db", str(store["db"]), "ingest", str(path), "--json", *extra_cmd]
    with time_bound():
        result = CliRunner().invoke(app, args, catch_exceptions=True)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 2), (result.exit_code, result.output[-2000:])
    # (a log may quote a traceback of its own in a warning: look for one printed by us)
    assert not re.search(r"Traceback \(most recent call last\):\n\s+File", result.output), result.output[-2000:]
    assert "run with --debug" not in result.output, result.output[-2000:]
    if result.exit_code == 2:
        assert _row_counts(store["db"]) == before, "a failed ingest changed the store"
        rows = _json_rows(result.stdout)
        for row in rows:
            if row.get("status") == "failed":
                assert row["error"]["type"] in OUR_ERRORS, row["error"]








# --- regressions from the outside campaign's log-text findings ---------------------------------------

NANOCHAT_REAL = REALDATA / "logs" / "nanochat_pr147_a100_mfu.txt"


def _nanochat_lines() -> list[str]:
    if not NANOCHAT_REAL.exists():
        pytest.skip(f"real data not present: {NANOCHAT_REAL}")
    return NANOCHAT_REAL.read_text().splitlines()


def test_a_one_line_nanochat_log_cut_mid_number_is_refused_not_stored_as_loss_only(tmp_path):
    from receipts.pipeline import parse_log

    first = _nanochat_lines()[0]
    cut = tmp_path / "cut.log"
    cut.write_text(first[:first.index("dt: 989.44ms") + len("dt: 989.44m")])  # no newline: the writer was killed
    with pytest.raises(InputError, match=r"only step line \(line 1\) is cut short") as raised:
        parse_log(cut)
    assert raised.value.line == 1
    whole = tmp_path / "whole.log"
    whole.write_text(first)  # the same line complete, still without a newline: a step, not a cut
    parsed = parse_log(whole)
    assert parsed.steps["step_ms"].to_list() == [989.44] and parsed.ended_early is None


def test_tokens_in_a_third_party_logs_text_are_redacted_before_they_are_stored(tmp_path, db):
    import duckdb

    from tests.cli_helpers import cli

    token, other = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123", "ghp_" + "0123456789abcdefABCDEF0123456789abcd"
    config = {"n_layer": 12, "hub": f"https://user:{token}@huggingface.co", "cmd": f"train.py --hf-token {other}",
              "tokenizer_type": "bpe"}
    path = tmp_path / "train.log"
    path.write_text(f"Building model with config: {config!r}\n" + "\n".join(_nanochat_lines()) + "\n")
    assert cli(db, "ingest", str(path)).exit_code == 0
    con = duckdb.connect(db, read_only=True)
    try:
        stored = " ".join(str(v) for row in con.execute("SELECT * FROM receipts").fetchall() for v in row)
    finally:
        con.close()
    assert token not in stored and other not in stored and "<redacted>" in stored
    assert "bpe" in stored  # a setting whose name holds 'token' is not a secret: only values are judged


def test_a_cr_only_log_reads_one_step_per_line(tmp_path):
    from receipts.pipeline import parse_log

    lines = _nanochat_lines()
    path = tmp_path / "mac.log"
    path.write_bytes("".join(line + "\r" for line in lines).encode())
    parsed = parse_log(path)
    assert parsed.steps.height == len(lines) and parsed.ended_early is None
    assert parsed.steps["line"].to_list() == list(range(1, len(lines) + 1))


def test_a_step_number_too_large_for_an_integer_is_left_out_with_a_warning(tmp_path):
    from receipts.pipeline import parse_log

    lines = _nanochat_lines()
    damaged = lines[-1].replace("step 00010/", "step 12345678901234567890/", 1)
    assert damaged != lines[-1]
    path = tmp_path / "big_step.log"
    path.write_text("\n".join([*lines[:-1], damaged]) + "\n")
    parsed = parse_log(path)
    assert parsed.steps.height == len(lines) - 1
    assert any("too large for a 64-bit integer (line 7)" in w for w in parsed.warnings), parsed.warnings


def test_a_claims_file_with_a_10_mb_line_parses_within_the_case_bound():
    """The pure-Python YAML scanner read a 10 MB line a character at a time (27 s for one file here); the
    libyaml loader reads it at once. Same claims, same line numbers."""
    import yaml

    from receipts.analysis import claims

    if getattr(yaml, "CSafeLoader", None) is not None:
        assert claims._LOADER is yaml.CSafeLoader
    text = ("# " + "x" * 10_000_000 + "\nversion: 1\nclaims:\n  - name: c\n    baseline: a\n    candidate: b\n"
            "    metric: step_time\n    speedup: 1.1\n")
    with time_bound():
        parsed = claims.parse_claims(text, "big.yaml")
    assert [c.line for c in parsed.claims] == [4] and parsed.claims[0].speedup == 1.1


# --- regressions: single cases the campaign found, each a real process before its fix -------------------------

REV_LOG = GPU_DATA / "fsdp2_1gpu_rev" / "run.log"


def _invoke(*args: str):
    from typer.testing import CliRunner

    from receipts.cli.main import app

    return CliRunner().invoke(app, list(args), catch_exceptions=True)


def _one_error_line(result, *, code: int = 2) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output and "run with --debug" not in result.output, result.output
    return lines[0]


def test_an_option_that_is_no_option_is_one_line_naming_the_way_out(tmp_path):
    """`receipts ingest -x.log`: click's usage box (usage, a hint, a blank line, the error) is one line."""
    line = _one_error_line(_invoke("--db", str(tmp_path / "r.duckdb"), "ingest", "-x.log"))
    assert line == "Error: No such option: -x (see `receipts ingest --help`; a path that begins with '-' goes after `--`)"


@pytest.mark.parametrize("doc, value", [('version: !!int "abc"\nclaims: []\n', "'abc' cannot be read as the int"),
                                        ("version: 1\nclaims:\n  - name: a\n    baseline: x\n    candidate: y\n"
                                         '    metric: step_time\n    speedup: !!float "x"\n',
                                         "'x' cannot be read as the float")])
def test_a_claims_tag_whose_text_does_not_convert_is_one_input_error(tmp_path, doc, value):
    claims = tmp_path / "claims.yaml"
    claims.write_text(doc)
    line = _one_error_line(_invoke("--db", str(tmp_path / "r.duckdb"), "gate", str(claims)))
    assert line.startswith(f"Error: {claims}:") and value in line


def test_a_run_name_longer_than_an_index_key_is_refused_naming_the_file(tmp_path):
    """A 200 kB run_name in receipt.toml: DuckDB's ART refused the key at commit (TransactionException)."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(REV_LOG, run / "run.log")
    (run / "receipt.toml").write_text(f'run_name = "{"x" * 200_000}"\n')
    db = tmp_path / "r.duckdb"
    result = _invoke("--db", str(db), "ingest", str(run / "run.log"))
    assert result.exit_code == 2
    assert f"{run / 'receipt.toml'}: key run_name is 200,000 characters long; at most 4,096" in result.output
    assert not db.exists() or _row_counts(db).get("receipts", 0) == 0


@pytest.mark.parametrize("edit, message", [
    (lambda lines: [lines[0].replace('"provenance":{', '"provenance":"a string","was":{', 1), *lines[1:]],
     ":1: RECEIPT header field 'provenance' must be an object, found a string"),
    (lambda lines: [line.replace('"rank":0', '"rank":"zero"') if '"kind":"footer"' in line else line for line in lines],
     "RECEIPT footer field 'rank' must be an integer, found a string"),
])
def test_receipt_records_of_the_wrong_shape_name_their_line(tmp_path, edit, message):
    path = tmp_path / "run.log"
    path.write_text("".join(edit(REV_LOG.read_text().splitlines(keepends=True))))
    db = tmp_path / "r.duckdb"
    result = _invoke("--db", str(db), "ingest", str(path))
    assert result.exit_code == 2 and message in result.output, result.output
    assert not db.exists() or _row_counts(db).get("receipts", 0) == 0


def test_a_file_name_that_is_not_utf8_is_stored_with_its_bytes_escaped(tmp_path):
    """A log named b'r\\xff\\xfe.log' with content the store has not seen: the binding of its path raised
    RuntimeError ('Unable to cast Python instance of type str')."""
    folder = tmp_path / "logs"
    folder.mkdir()
    with open(bytes(folder) + b"/r\xff\xfe.log", "wb") as f:
        f.write(REV_LOG.read_bytes())
    db = tmp_path / "r.duckdb"
    result = _invoke("--db", str(db), "ingest", str(folder), "--json")
    assert result.exit_code == 0, result.output
    (row,) = _json_rows(result.stdout)
    assert row["status"] == "ingested" and row["run_name"] == "r\\xff\\xfe"


def test_run_log_ingested_from_its_own_folder_is_named_by_the_folder(tmp_path, monkeypatch):
    run = tmp_path / "fsdp2_run_7"
    run.mkdir()
    shutil.copy(REV_LOG, run / "run.log")
    monkeypatch.chdir(run)
    result = _invoke("--db", str(tmp_path / "r.duckdb"), "ingest", "run.log", "--json")
    assert result.exit_code == 0, result.output
    assert _json_rows(result.stdout)[0]["run_name"] == "fsdp2_run_7"
