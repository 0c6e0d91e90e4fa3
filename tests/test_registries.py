"""The registries of log formats, commands and schema revisions are typed: an entry whose module cannot be imported
is an error naming the module, never a silent skip (a log format that quietly claims nothing would turn every log
of its format into "unknown log format")."""

from __future__ import annotations

import subprocess
import sys

import duckdb
import pytest

from conftest import GPU_DATA, REALDATA
from receipts.errors import RegistryError
from receipts.ingest import log_formats, sniff
from receipts.ingest.textlog import read_log

MEGATRON = REALDATA / "logs" / "megatron-lm_issue756_mixtral_16xH100.txt"
NANOCHAT = REALDATA / "logs" / "nanochat_pr147_a100_mfu.txt"
KINETO = GPU_DATA / "fsdp2_2gpu_kineto" / "traces"


def _block(monkeypatch, module: str) -> None:
    # sys.modules[name] = None is how Python spells "cannot be imported" to the import system
    monkeypatch.setitem(sys.modules, module, None)


def test_every_log_format_resolves_and_streams_where_it_says():
    for fmt, parser in log_formats.resolved():
        assert parser.FORMAT and callable(parser.detect) and callable(parser.parse), fmt
        assert callable(getattr(parser, "parse_chunks", None)) == fmt.streamed, fmt
    aliases = [alias for fmt in log_formats.LOG_FORMATS for alias in fmt.aliases]
    assert len(aliases) == len(set(aliases)), "an alias names one format"


def test_a_parser_that_fails_to_import_is_an_error_naming_it_not_an_unknown_format(monkeypatch):
    log = read_log(MEGATRON)
    assert sniff.detect_log_format(log) == "megatron"
    # mllog is sniffed after megatron, and its failure still fails the sniff: no answer depends on order
    _block(monkeypatch, "receipts.ingest.mllog")
    with pytest.raises(RegistryError) as caught:
        sniff.detect_log_format(log)
    assert caught.value.module == "receipts.ingest.mllog" and caught.value.registry == "log format"
    assert "receipts.ingest.mllog cannot be imported" in str(caught.value)
    assert "unknown log format" not in str(caught.value)


def test_the_streamed_path_fails_the_same_way(monkeypatch, tmp_path):
    from receipts.pipeline.parse import parse_log

    _block(monkeypatch, "receipts.ingest.nanochat")
    with pytest.raises(RegistryError, match=r"module receipts\.ingest\.nanochat cannot be imported"):
        parse_log(MEGATRON, spill=tmp_path)


def test_a_parser_without_what_its_entry_promises_is_named():
    broken = log_formats.LogFormat("wrapped", ("wrapped",), streamed=True)  # a real module, but no parser
    with pytest.raises(RegistryError, match=r"receipts\.ingest\.wrapped has no FORMAT, detect, parse, parse_chunks"):
        broken.parser()


def test_a_broken_parser_stops_the_batch_and_the_cli_says_so_once(monkeypatch, tmp_path):
    """A broken installation is not a bad file: the batch stops at the first file that meets it (every later one
    would fail alike), and the command line says it in one line, once, exit 2, instead of one FAILED per file."""
    from cli_helpers import cli

    _block(monkeypatch, "receipts.ingest.torchtitan")
    db = str(tmp_path / "r.duckdb")
    result = cli(db, "ingest", str(MEGATRON), str(NANOCHAT))
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1, result.output
    assert result.output.startswith("Error: log format 'torchtitan': module receipts.ingest.torchtitan cannot be "
                                    "imported"), result.output
    assert "this installation of receipts is broken" in result.output
    assert "FAILED" not in result.output and "Traceback" not in result.output
    assert "unknown log format" not in result.output


def test_ingest_each_raises_a_registry_error_instead_of_yielding_it_per_file(monkeypatch, tmp_path):
    from receipts.pipeline import ingest_each
    from receipts.schema.registry import load_registry
    from receipts.store import open_store

    _block(monkeypatch, "receipts.ingest.mllog")
    db = str(tmp_path / "r.duckdb")
    with open_store(db) as store:
        batch = ingest_each(store, [MEGATRON, NANOCHAT], registry=load_registry(cwd=tmp_path))
        with pytest.raises(RegistryError, match=r"receipts\.ingest\.mllog cannot be imported"):
            next(batch)
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM receipts").fetchone() == (0,)


def _linked(folder, *files):
    folder.mkdir(parents=True, exist_ok=True)
    for f in files:
        (folder / f.name).symlink_to(f)
    return folder


def test_every_profile_kind_a_target_can_be_has_an_entry_whose_parser_imports(tmp_path):
    """Each kind sniffing, a folder and a run directory answer is the registry's, and every entry is answered
    somewhere; each is read by a parser that loads."""
    import typing

    from receipts.pipeline.profile_formats import PROFILE_FORMATS, Reader
    from receipts.pipeline.targets import profile_paths_in, target_kind

    for kind, fmt in PROFILE_FORMATS.items():
        assert fmt.kind == kind and fmt.reader in typing.get_args(Reader), kind
        assert fmt.parser_module().__name__ == fmt.module, kind
    exports = sorted((GPU_DATA / "multiexport" / "per_rank_gloo").glob("*.sqlite.gz"))
    traces = sorted(KINETO.iterdir())
    answered = {target_kind(p) for p in (REALDATA / "nsys" / "mock.sqlite", GPU_DATA / "fsdp2_2gpu_nsys.sqlite.gz",
                                         GPU_DATA / "fsdp2_2gpu_nsys.nsys-rep", traces[0], KINETO,
                                         _linked(tmp_path / "job", *exports))}
    for run_dir in (_linked(tmp_path / "a", *exports), _linked(tmp_path / "b", *traces)):
        (run_dir / "run.log").write_text("")
        answered |= {kind for _, kind in profile_paths_in(run_dir)}
    assert answered == set(PROFILE_FORMATS)


def test_a_profile_kind_without_an_entry_is_an_error_naming_it_not_a_kineto_trace(tmp_path):
    from receipts.pipeline.parse import parse_profile
    from receipts.schema.categories import load_category_rules

    trace = KINETO / "rank0.1795431334827134209.pt.trace.json.gz"
    with pytest.raises(RegistryError) as caught:
        parse_profile(trace, "rocprof", load_category_rules(cwd=tmp_path), False)
    assert caught.value.registry == "profile format" and caught.value.entry == "rocprof"
    assert "profile format 'rocprof'" in str(caught.value) and "kineto-dir" in str(caught.value)


def test_a_profile_parser_that_fails_to_import_is_named_and_stops_the_batch(monkeypatch, tmp_path):
    """A Kineto trace whose parser cannot load: one line naming the module, exit 2, and the nsys export after it is
    not read (it would meet a broken installation too, or hide it behind a stored receipt)."""
    from cli_helpers import cli

    _block(monkeypatch, "receipts.ingest.kineto")
    trace = KINETO / "rank0.1795431334827134209.pt.trace.json.gz"
    db = str(tmp_path / "r.duckdb")
    result = cli(db, "ingest", str(trace), str(GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz"))
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1, result.output
    assert result.output.startswith("Error: profile format 'kineto': module receipts.ingest.kineto cannot be "
                                    "imported"), result.output
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM receipts").fetchone() == (0,)


def _receipts(tmp_path, *argv: str, blocked: str) -> subprocess.CompletedProcess[str]:
    code = (f"import sys\nsys.modules[{blocked!r}] = None\nfrom receipts.cli.main import main\n"
            f"sys.argv = ['receipts', *{list(argv)!r}]\nmain()")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_a_command_whose_module_fails_to_import_is_named_and_the_others_still_load(monkeypatch):
    import click
    import typer.main

    from receipts.cli.main import app

    _block(monkeypatch, "receipts.cli.gate_cmd")
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    with pytest.raises(RegistryError, match=r"^command 'gate': module receipts\.cli\.gate_cmd cannot be imported"):
        group.get_command(ctx, "gate")
    # commands load lazily: another command does not pay for (or trip on) the broken one
    assert group.get_command(ctx, "history").name == "history"


@pytest.mark.slow
def test_the_cli_names_a_broken_command_module_in_one_line(tmp_path):
    done = _receipts(tmp_path, "gate", "--help", blocked="receipts.cli.gate_cmd")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("Error: command 'gate': module receipts.cli.gate_cmd cannot be imported"), done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_a_command_module_must_register_what_the_registry_lists(monkeypatch):
    import click
    import typer.main

    from receipts.cli import main

    monkeypatch.setitem(main.COMMANDS, "verify", main.Command("gate_cmd", "verify"))
    group = typer.main.get_command(main.app)
    with pytest.raises(RegistryError, match=r"receipts\.cli\.gate_cmd registers gate, where cli/main\.py COMMANDS "
                                            r"lists gate, verify"):
        group.get_command(click.Context(group), "gate")


def test_schema_revisions_are_the_modules_themselves_checked_in_order():
    from receipts.schema.tables import SCHEMA_VERSION
    from receipts.store import migrations
    from receipts.store.migrations import v0008_duckdb_steps_without_art_index, v0012_step_kernels

    assert [r.version for r in migrations.REVISIONS] == list(range(1, SCHEMA_VERSION + 1))
    assert migrations.REVISIONS[7].backends == ("duckdb",) and migrations.REVISIONS[7].upgrade is \
        v0008_duckdb_steps_without_art_index.upgrade
    with pytest.raises(RegistryError, match=r"schema revision '11': module receipts\.store\.migrations\.v0012_step_"
                                            r"kernels has VERSION 12, expected 11"):
        migrations.Revision.of(11, v0012_step_kernels)
