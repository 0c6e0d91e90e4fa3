"""Shared fixtures: paths to the real data beside the project, native-log writers, temp stores."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"
GPU_DATA = REPO / "tests" / "data" / "gpu"
EXPLAIN_DATA = REPO / "tests" / "data" / "explain"


def realdata(*parts: str) -> Path:
    path = REALDATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data not present: {path}")
    return path


def write_native_log(path: Path, step_ms: list[float], *, host_lineage: str | None = "h200-usw1c-bench-01",
                     preset: str | None = "nam52_h200_dense_ref_v1", regime: str | None = "fsdp2/regional-compile",
                     warmup_steps: int = 0, footer: bool = True, env: dict | None = None,
                     software: dict | None = None, features: dict | None = None,
                     gpu_model: str = "NVIDIA H200", gpu_count: int = 8) -> Path:
    """A RECEIPT-format log, for edge cases only; real logs come from realdata/ and tests/data/gpu/."""
    identity = {k: v for k, v in (("host_lineage", host_lineage), ("preset", preset), ("regime", regime)) if v}
    header = {"v": 1, "kind": "header", "identity": identity, "hostname": "h200-usw1c-bench-01",
              "gpu_model": gpu_model, "gpu_count": gpu_count, "world_size": gpu_count,
              "env": env or {}, "software": software or {}, "features": features or {}}
    lines = ["booting", "RECEIPT " + json.dumps(header)]
    if warmup_steps:
        lines.append("RECEIPT " + json.dumps({"v": 1, "kind": "phase", "phase": "compile", "first_step": 1,
                                              "last_step": warmup_steps}))
    for i, ms in enumerate(step_ms, start=1):
        lines.append("RECEIPT " + json.dumps({"v": 1, "kind": "step", "step": i, "rank": 0, "step_ms": ms,
                                              "tokens_per_s": 1e6 / ms}))
    if footer:
        lines.append("RECEIPT " + json.dumps({"v": 1, "kind": "footer", "rank": 0,
                                              "peak_allocated_bytes": 40 << 30, "peak_reserved_bytes": 48 << 30}))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "receipts.duckdb")


@pytest.fixture(scope="session")
def explain_lane(tmp_path_factory) -> str:
    """A store of the explain experiment's 14 real 2-GPU runs (tests/data/explain: baselines tagged main, an A/A
    run and planted changes), each run.log with its nsys export, ingested once per session (~2 minutes here).
    Read-only for the tests: copy it before writing."""
    from cli_helpers import cli

    path = str(tmp_path_factory.mktemp("explain") / "lane.duckdb")
    result = cli(path, "ingest", *sorted(str(p) for p in EXPLAIN_DATA.iterdir() if p.is_dir()))
    assert result.exit_code == 0, result.output
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With RECEIPTS_REQUIRE_REALDATA=1 (scripts/test.sh, hence CI) a test skipped because real data is absent
    fails instead: a checkout without ../shared/realdata must not pass by quietly testing less."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("RECEIPTS_REQUIRE_REALDATA") == "1" and "not present" in str(report.longrepr):
        report.outcome = "failed"
        report.longrepr = f"real data required (RECEIPTS_REQUIRE_REALDATA=1) but absent: {report.longrepr}"


# The slow tier: `pytest -m "not slow"` leaves these out (CI and scripts/test.sh run everything). Besides the
# tests marked where they stand (each fuzz campaign, through tests/fuzzing.fuzz), every test that needs the
# PostgreSQL server or Chromium, and these, each 6 s or more in a measured run of the whole suite
# (`pytest --durations=0`): hypothesis campaigns, whole-real-export parses, subprocesses of the CLI.
SLOW_TESTS = {
    "test_check.py": ("test_a_rumor_has_no_lane_and_exits_3", "test_real_every_aa_run_passes_against_the_other_main_runs"),
    "test_correlation.py": ("test_lookup_equals_the_plain_reference",),
    "test_dashboard_apptest.py": ("test_a_profile_read_from_a_folder_lists_its_files_and_how_to_open_them_together",),
    "test_dashboard_views.py": ("test_compare_view_explains_why_b_differs_with_noise_bands",),
    "test_explain.py": ("test_a_log_only_receipt_gets_one_line_saying_which_profile_to_attach",
                        "test_benjamini_hochberg_agrees_with_scipy",
                        "test_db_upgrade_recomputes_components_with_the_same_numbers"),
    "test_export.py": ("test_bmf_is_one_benchmark_per_lane_from_its_newest_run",
                       "test_exposed_communication_comes_from_the_attached_export"),
    "test_ingest_hygiene.py": ("test_a_folder_ingests_each_log_and_run_directory_and_recursive_descends",),
    "test_intervals_sorted.py": ("test_anatomy_rows_clipped_to_spans", "test_intervals_that_end_before_they_start",
                                 "test_proper_intervals"),
    "test_kernel_corpus.py": ("test_every_corpus_kernel_name_has_its_reviewed_category",),
    "test_kineto_attribution.py": ("test_attribution_follows_the_rule",),
    "test_kineto_trace.py": ("test_fast_reader_keeps_what_the_reference_keeps_realdata",),
    "test_lean_imports.py": ("test_ingest_show_and_list_run_without_pandas_or_pyarrow",),
    "test_log_stream.py": ("test_a_long_ingest_on_a_terminal_shows_the_file_bytes_and_lines",
                           "test_chunks_are_the_lines_of_the_whole_read", "test_streamed_parsers_match_the_whole_read"),
    "test_megatron_rows.py": ("test_a_mutated_real_log_parses_to_stable_rows", "test_any_iteration_lines_parse_to_stable_rows"),
    "test_nsys_expected.py": ("test_a_spilled_parse_gives_the_pinned_numbers",),
    "test_nsys_job.py": ("test_a_folder_of_exports_is_one_job_and_a_folder_with_other_files_is_not",
                         "test_worker_processes_give_the_serial_job"),
    "test_nsys_window.py": ("test_bins_add_up_to_the_window",),
    "test_output_conventions.py": ("test_a_kernel_name_takes_a_line_or_two_on_a_terminal_and_stays_whole_in_tsv",
                                   "test_colour_follows_no_color_and_clicolor_force",
                                   "test_every_reading_command_takes_every_format", "test_help_shows_no_type_placeholders"),
    "test_stats.py": ("test_the_support_window_finds_the_ends_the_block_length_window_finds",),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = SLOW_TESTS.get(item.path.name, ())
        if (item.originalname in names or item.get_closest_marker("postgres") is not None
                or item.get_closest_marker("browser") is not None):
            item.add_marker(pytest.mark.slow)
