"""Which runs are the baseline's configuration when the baseline has no tag (analysis/configuration.py): the lane's
untagged runs without recipe or runtime drift from it; a tagged run, a drifted run and B itself never count."""

from __future__ import annotations

import numpy as np
import pytest

from cli_helpers import cli, cli_json
from conftest import write_native_log


@pytest.mark.slow  # three ingests and a compare through the CLI
def test_an_untagged_baseline_takes_untagged_runs_of_its_recipe_and_runtime(tmp_path):
    db = str(tmp_path / "r.duckdb")
    rng = np.random.default_rng(5)
    steps = lambda: list(100 * (1 + rng.normal(0, 0.01, 40)))  # noqa: E731
    same = [write_native_log(tmp_path / f"same{i}.log", steps(), env={"NCCL_ALGO": "Ring"}) for i in range(4)]
    drifted = write_native_log(tmp_path / "drifted.log", list(130 * (1 + rng.normal(0, 0.01, 40))),
                               env={"NCCL_ALGO": "Tree"})
    tagged = write_native_log(tmp_path / "tagged.log", list(70 * (1 + rng.normal(0, 0.01, 40))),
                              env={"NCCL_ALGO": "Ring"})
    assert cli(db, "ingest", *map(str, same), str(drifted)).exit_code == 0
    assert cli(db, "ingest", str(tagged), "--tag", "pr-7").exit_code == 0
    code, out = cli_json(db, "compare", "same0", "same1")
    ids = {r["id"]: r["run_name"] for r in cli_json(db, "list")[1]}
    used = sorted(ids[i] for i in out["noise_floor"]["run_ids"])
    assert code == 0 and used == ["same0", "same2", "same3"]          # not B, not drifted, not the tagged PR run
    assert out["noise_floor"]["basis"] == "3 runs with same0's recipe and runtime (no tag on same0)"
    assert out["noise_floor"]["source"] == "lane" and out["noise_floor"]["floor_pct"] < 1.0
