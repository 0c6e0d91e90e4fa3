"""Reports as a person reads them: at 80 columns on a terminal and in a pipe, warnings on stderr, data without
float artefacts. Real runs: the 2-GPU straggler export, the SGD memory run with its snapshots, the H100 noise set."""

from __future__ import annotations

import pytest

from receipts.cli.output import machine_text
from receipts.cli.render import excluded_text, ratio_interval
from tests.cli_helpers import cli
from tests.conftest import GPU_DATA, REPO
from tests.test_output_conventions import ANSI, on_a_terminal, run

NOISE = REPO / "tests" / "data" / "noise"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    db = str(tmp_path_factory.mktemp("eighty") / "e.duckdb")
    plant = GPU_DATA / "straggler"
    assert cli(db, "ingest", str(plant / "straggler_plant_nsys" / "run.log")).exit_code == 0
    assert cli(db, "ingest", str(plant / "straggler_plant_nsys.sqlite.gz"), "--attach",
               "straggler_plant_nsys").exit_code == 0
    assert cli(db, "ingest", str(REPO / "tests" / "data" / "memory" / "sgd_2gpu")).exit_code == 0
    lane = ["--host-lineage", "h100-device-x1", "--preset", "toy_fsdp2_v1", "--regime", "fsdp2/no-compile"]
    assert cli(db, "ingest", *(str(NOISE / n / "run.log") for n in ("aa_01", "aa_02", "aa_03")), *lane).exit_code == 0
    return db


def _wide(text: str) -> list[str]:
    return [line for line in ANSI.sub("", text).splitlines() if len(line) > 80]


@pytest.mark.slow  # a CLI process each, on a pseudo-terminal
@pytest.mark.parametrize("args", [("stragglers", "straggler_plant_nsys"), ("anatomy", "straggler_plant_nsys"),
                                  ("history", "aa_01"), ("show", "sgd_2gpu")], ids=lambda a: a[0])
def test_reports_fit_80_columns_on_a_terminal(store, args):
    text = on_a_terminal(store, *args, columns=80)
    assert "Traceback" not in text and len(text.splitlines()) > 3, text
    assert not _wide(text), _wide(text)


@pytest.mark.slow
def test_show_says_each_memory_gap_on_its_own_line_and_what_the_window_excluded(store):
    done = run(store, "show", "sgd_2gpu")
    assert done.returncode == 0 and not _wide(done.stdout), _wide(done.stdout)
    gaps = [line.strip() for line in done.stdout.splitlines() if "->" in line and "GiB" in line or "-> allocated" in line]
    assert [g.split(":")[0] for g in gaps[:3]] == ["estimate -> allocated", "allocated -> reserved (fragmentation)",
                                                  "reserved -> device (headroom)"], gaps
    # the run's warm-up is its `warmup` phase: steps 0 and 1 (tests/data/memory/README.md)
    assert "2 step(s) outside it excluded: the warm-up through step 1 (the warmup marker)" in \
        " ".join(done.stdout.split())


def test_excluded_steps_name_what_was_excluded():
    steady = {"warmup_steps": 3, "window_rule": "leading-slow-steps-v2+cut-short-tail", "warmup_last_step": 1}
    assert excluded_text(steady, "step") == ("3 step(s) outside it excluded: the warm-up through step 1 (its leading "
                                             "slow steps) and the cut-short last step")
    assert excluded_text({**steady, "warmup_last_step": None, "warmup_steps": 1}, "epoch") == \
        "1 epoch(s) outside it excluded: the cut-short last epoch"
    assert excluded_text({"warmup_steps": 0, "window_rule": "leading-slow-steps-v2"}, "step") == "no step excluded"


def test_an_interval_that_bounds_nothing_is_said_in_words():
    # 3 runs over a noisy floor: t on 1 df gave B/A 0.9546 [0.1563, 5.8306]
    assert ratio_interval(0.9546, 0.1563, 5.8306) == \
        "0.9546 (too few runs to bound this: the interval spans 0.16 to 5.83)"
    assert ratio_interval(1.0249, 1.0151, 1.0348) == "1.0249 [1.0151, 1.0348]"
    assert ratio_interval(0.9546, 0.1563, 5.8306, unit="x").startswith("0.9546x (too few runs to bound this")


def test_a_pr_headline_says_too_few_runs_instead_of_an_interval_that_bounds_nothing():
    from dataclasses import replace

    from receipts.analysis.noise import default_floor
    from receipts.analysis.verdict import VerdictResult
    from receipts.cli.check_cmd import change_pct, interval_pct

    wide = VerdictResult("inconclusive", 1.0146, 0.2541, 4.0513, 0.95, 0.1, 300.0, 1.5, 0.01, default_floor(), 2, 1,
                         "t on 1 df", None, "t")
    assert f"{change_pct(wide)} {interval_pct(wide)}" == "+1.46% (too few runs to bound this)"
    assert interval_pct(replace(wide, ci_low=1.0048, ci_high=1.0474)) == "[+0.48%, +4.74%]"


def test_piped_floats_carry_no_artefact_of_binary_arithmetic():
    assert machine_text(23.130000000000003) == "23.13" and machine_text(0.1 + 0.2) == "0.3"
    assert machine_text(54.75894546508789) == "54.7589454650879" and machine_text(5.0) == "5.0"
    assert machine_text(1.296054368042331e-06) == "1.29605436804233e-06"
