"""The CI gate: every rejection reason, and true claims accepted, on receipts ingested through the real CLI.

Two layers. Native RECEIPT logs written here cover each rule in isolation (edge cases the real logs do
not have, e.g. an env knob that differs). The real logs in ../shared/realdata/logs are the point: the
real-data tests at the bottom run each reason on receipts ingested from them, and compute the numbers
they expect straight from the log text (a regex over the log lines), never from the gate's own output.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import cli
from receipts.analysis.claims import parse_claims, parse_size
from receipts.errors import InputError, UnsupportedVersion

GIB = 2**30
HOST, PRESET, REGIME = "h200-usw1c-bench-01", "nam52_h200_dense_ref_v1", "fsdp2/regional-compile"


def native_log(path: Path, step_ms, *, preset: str | None = PRESET, regime: str = REGIME, env=None, software=None,
               features=None, peaks=(40 * GIB, 48 * GIB)) -> Path:
    identity = {k: v for k, v in (("host_lineage", HOST), ("preset", preset), ("regime", regime)) if v}
    header = {"v": 1, "kind": "header", "identity": identity, "hostname": HOST, "gpu_model": "NVIDIA H200",
              "gpu_count": 8, "world_size": 8, "env": env or {}, "software": software or {}, "features": features or {}}
    lines = ["RECEIPT " + json.dumps(header)]
    lines += ["RECEIPT " + json.dumps({"v": 1, "kind": "step", "step": i, "rank": 0, "step_ms": float(ms),
                                       "tokens_per_s": 1e6 / ms}) for i, ms in enumerate(step_ms, start=1)]
    lines.append("RECEIPT " + json.dumps({"v": 1, "kind": "footer", "rank": 0, "peak_allocated_bytes": peaks[0],
                                          "peak_reserved_bytes": peaks[1]}))
    path.write_text("\n".join(lines) + "\n")
    return path


def steps(n: int, mean: float, seed: int, cv: float = 0.01) -> list[float]:
    return list(np.random.default_rng(seed).normal(mean, mean * cv, n))


def claims_yaml(tmp_path: Path, *claims: dict, defaults: dict | None = None, name: str = "claims.yaml") -> Path:
    doc = {"version": 1, "claims": list(claims)} | ({"defaults": defaults} if defaults else {})
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=2))  # JSON is YAML; line numbers still come from yaml.compose
    return path


def claim(name="c", baseline="run_a", candidate="run_b", metric="step_time", **kw) -> dict:
    return {"name": name, "baseline": baseline, "candidate": candidate, "metric": metric,
            **({"speedup": 1.0} if metric in ("step_time", "tokens_per_s") and "speedup" not in kw else {}), **kw}


def gate(db: str, path: Path, *extra: str):
    """(exit code, claims by name) from `receipts gate --json`."""
    result = cli(db, "gate", str(path), "--json", *extra)
    out = json.loads(result.stdout)
    return result.exit_code, {c["name"]: c for c in out["claims"]}


def ingest(db: str, *paths: Path, flags: tuple[str, ...] = ()) -> None:
    result = cli(db, "ingest", *map(str, paths), *flags)
    assert result.exit_code == 0, result.stdout + result.stderr


def codes(c: dict) -> set[str]:
    return set(c["reason_codes"])


@pytest.fixture
def pair(tmp_path, db):
    """run_a 200 ms, run_b 170 ms: a true speedup of 200/170 = 1.176x, same lane, no drift."""
    ingest(db, native_log(tmp_path / "run_a.log", steps(80, 200, 1)), native_log(tmp_path / "run_b.log", steps(80, 170, 2)))
    return db


# ------------------------------------------------------------------------- claims file validation
@pytest.mark.parametrize("text, line, words", [
    ("version: 1\nclaims:\n  - name: a\n    baseline: x\n    metric: step_time\n    speedup: 1.1\n", 3, "missing key 'candidate'"),
    ("version: 1\nclaims:\n  - name: a\n    baseline: x\n    candidate: y\n    metric: flops\n    speedup: 1\n", 6, "unknown metric"),
    ("version: 1\nclaims:\n  - name: a\n    baseline: x\n    candidate: y\n    metric: peak_reserved\n    change: -6Gb\n", 7, "bad unit"),
    ("version: 1\nclaims:\n  - name: a\n    baseline: x\n    candidate: y\n    metric: peak_reserved\n    change: -6\n", 7, "needs a unit"),
    ("version: 1\nclaims:\n  - name: a\n    baseline: x\n    candidate: y\n    metric: peak_reserved\n"
     "    change: 1GiB\n    speedup: 2\n", 3, "both 'speedup' and 'change'"),
    ("version: 1\nclaims:\n  - name: a\n    baseline: x\n    candidate: y\n    metric: step_time\n    speedup: 2\n"
     "    tolerence: 0.1\n", 8, "unknown key 'tolerence'"),
    ("version: 1\nclaims:\n  - name: a\n    baseline: x\n    candidate: y\n    metric: step_time\n    speedup: 2\n"
     "    declared_drift: [recipe]\n", 8, "recipe drift cannot be declared"),
    ("version: 1\nclaims: []\n", 2, "non-empty list"),
    ("version: 1\nclaims: [\n", 3, "not valid YAML"),
])
def test_malformed_claims_name_file_and_line(text, line, words):
    with pytest.raises(InputError) as err:
        parse_claims(text, "claims.yaml")
    assert err.value.line == line and words in str(err.value) and str(err.value).startswith(f"claims.yaml:{line}:")


def test_unknown_version_is_refused_and_ids_stay_text():
    with pytest.raises(UnsupportedVersion, match="claims file c.yaml:1 version '2'"):
        parse_claims("version: 2\nclaims: []\n", "c.yaml")
    # 1234e567 would be a float to YAML; as a receipt id prefix it must stay the text the user wrote
    parsed = parse_claims("version: 1\nclaims:\n- {name: a, baseline: 1234e567, candidate: '0x1f', metric: step_time, speedup: 1}\n")
    assert (parsed.claims[0].baseline, parsed.claims[0].candidate) == ("1234e567", "0x1f")
    assert parse_size("-6GiB") == -6 * GIB and parse_size("512MB") == 512 * 10**6


def test_cli_exits_2_on_malformed_file_naming_file_and_line(tmp_path, pair):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nclaims:\n  - name: a\n    baseline: run_a\n    candidate: run_b\n    metric: mfu\n    speedup: 1\n")
    result = cli(pair, "gate", str(bad))
    assert result.exit_code == 2 and f"{bad}:6" in result.stderr and "unknown metric 'mfu'" in result.stderr


SPEED = "version: 1\nclaims:\n  - name: fast\n    baseline: x\n    candidate: y\n    metric: step_time\n"


@pytest.mark.parametrize("extra, key, shown", [
    ("    speedup: 3.0\n    tolerance: .nan\n", "tolerance", "'.nan'"),
    ("    speedup: .nan\n", "speedup", "'.nan'"),
    ("    speedup: 1.1\n    max_cv: .nan\n", "max_cv", "'.nan'"),
    ("    speedup: 1.1\n    max_cv: .inf\n", "max_cv", "'.inf'"),
    ("    speedup: .inf\n", "speedup", "'.inf'"),
    ("    speedup: -1.2\n", "speedup", "'-1.2'"),
    ("    speedup: 1.1\n    tolerance: -0.1\n", "tolerance", "'-0.1'"),
    ("    speedup: 1.1\n    min_effect: -.inf\n", "min_effect", "'-.inf'"),
    ("    speedup: 1.1\n    min_effect: .NaN\n", "min_effect", "'.NaN'"),
    ("    speedup: 1.1\n    min_steps: .inf\n", "min_steps", "'.inf'"),
    ("    speedup: 1.1\n    allow_ended_early: 1\n", "allow_ended_early", "'1'"),
])
def test_numeric_fields_must_be_finite_and_in_range(extra, key, shown):
    with pytest.raises(InputError) as err:
        parse_claims(SPEED + extra, "claims.yaml")
    line = 1 + next(i for i, ln in enumerate((SPEED + extra).splitlines()) if ln.strip().startswith(key + ":"))
    assert err.value.line == line, (str(err.value), line)
    assert str(err.value).startswith(f"claims.yaml:{line}: claim 'fast': '{key}' must be") and shown in str(err.value)


def test_defaults_are_checked_where_they_are_written_even_when_overridden():
    text = "version: 1\ndefaults:\n  max_cv: .nan\nclaims:\n  - {name: a, baseline: x, candidate: y, metric: step_time, " \
           "speedup: 1, max_cv: 0.1}\n"
    with pytest.raises(InputError, match=r"^claims.yaml:3: defaults: 'max_cv' must be a finite number >= 0, got '.nan'"):
        parse_claims(text, "claims.yaml")
    with pytest.raises(InputError, match=r"larger than any memory"):
        parse_claims("version: 1\nclaims:\n  - {name: a, baseline: x, candidate: y, metric: peak_reserved, change: "
                     + "9" * 400 + "GiB}\n", "claims.yaml")


def test_nan_tolerance_cannot_accept_a_false_claim(tmp_path, pair):
    """The fuzzing finding: `tolerance: .nan` turned a false 3.0x claim (measured 1.176x) into ACCEPTED, exit 0."""
    false_claim = "version: 1\nclaims:\n  - name: three times faster\n    baseline: run_a\n    candidate: run_b\n" \
                  "    metric: step_time\n    speedup: 3.0\n    tolerance: {}\n"
    nan = tmp_path / "nan.yaml"
    nan.write_text(false_claim.format(".nan"))
    result = cli(pair, "gate", str(nan))
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.strip() == (f"Error: {nan}:8: claim 'three times faster': 'tolerance' must be a finite number "
                                     ">= 0 and < 1, got '.nan'")
    honest = tmp_path / "honest.yaml"
    honest.write_text(false_claim.format("0.03"))
    assert cli(pair, "gate", str(honest)).exit_code == 1  # the same claim with a real tolerance is rejected


@pytest.mark.parametrize("content, line, words", [
    (b"version: 1\nclaims:\n  - name: caf\xe9 path\n", 3, "not UTF-8 text: byte 0xe9"),
    (b"\xff\xfev\x00", 1, "not UTF-8 text: byte 0xff"),
    (b"version: 1\nclaims: " + b"[" * 20000 + b"]" * 20000 + b"\n", 2, "nested more than 32 levels"),
    (b"version: 1\nclaims:\n  - {name: a, baseline: !!python/object/apply:os.system [echo hi], candidate: y}\n", 3,
     "unsupported YAML tag 'tag:yaml.org,2002:python/object/apply:os.system'"),
    (b"version: 1\nclaims:\n  - !claim {name: a, baseline: x, candidate: y, metric: step_time, speedup: 1}\n", 3,
     "unsupported YAML tag '!claim'"),
    (b"version: 1\nclaims:\n  - {name: a\x00, baseline: x}\n", 3, "not valid YAML: unacceptable character #x0000"),
])
def test_unreadable_claims_files_exit_2_in_one_line(tmp_path, db, content, line, words):
    path = tmp_path / "claims.yaml"
    path.write_bytes(content)
    result = cli(db, "gate", str(path))
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith(f"Error: {path}:{line}: ") and words in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_a_named_pipe_as_claims_file_is_refused_without_blocking(tmp_path):
    import os
    import subprocess
    import sys

    fifo = tmp_path / "claims.yaml"
    os.mkfifo(fifo)  # nobody ever writes: opening it for reading would block forever
    done = subprocess.run([sys.executable, "-m", "receipts.cli.main", "--db", str(tmp_path / "x.duckdb"), "gate",
                           str(fifo)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == f"Error: {fifo}: not a regular file (a folder, named pipe or device); a claims file is a YAML file"


# ------------------------------------------------------------------------- each rule in isolation (native logs)
def test_true_claims_are_accepted_with_measured_ci(tmp_path, pair):
    path = claims_yaml(tmp_path, claim("time", speedup=1.18), claim("tokens", metric="tokens_per_s", speedup=1.18))
    code, out = gate(pair, path)
    assert code == 0
    for c in out.values():
        m = c["measured"]
        assert c["accepted"] and c["reasons"] == [] and m["unit"] == "x"
        assert m["ci_low"] <= 200 / 170 * 1.02 and m["ci_high"] >= 200 / 170 * 0.98 and m["ci_low"] <= m["value"] <= m["ci_high"]


def test_effect_outside_tolerance_is_rejected(tmp_path, pair):
    code, out = gate(pair, claims_yaml(tmp_path, claim("too good", speedup=1.5)))
    assert code == 1 and codes(out["too good"]) == {"effect_mismatch"}
    assert out["too good"]["reasons"][0].startswith("too good: measured speedup")


def test_faster_claim_needs_significance(tmp_path, db):
    # Same mean, 3% noise: the CI straddles 1.0, so "2% faster" is not supported even inside a wide tolerance.
    ingest(db, native_log(tmp_path / "run_a.log", steps(60, 200, 3, cv=0.03)),
           native_log(tmp_path / "run_b.log", steps(60, 200, 4, cv=0.03)))
    code, out = gate(db, claims_yaml(tmp_path, claim("faster", speedup=1.02, tolerance=0.1), claim("same", speedup=1.0)))
    assert code == 1 and codes(out["faster"]) == {"not_significant"} and "includes no change" in out["faster"]["reasons"][0]
    assert out["same"]["accepted"]


def test_unknown_receipt(tmp_path, pair):
    code, out = gate(pair, claims_yaml(tmp_path, claim("ghost", candidate="run_zz")))
    assert code == 1 and codes(out["ghost"]) == {"unknown_receipt"} and "run_zz" in out["ghost"]["reasons"][0]


def test_rumor_and_identity_difference(tmp_path, db):
    ingest(db, native_log(tmp_path / "run_a.log", steps(40, 200, 1)),
           native_log(tmp_path / "rumor.log", steps(40, 170, 2), preset=None),
           native_log(tmp_path / "other.log", steps(40, 170, 3), regime="fsdp2/full-compile"))
    code, out = gate(db, claims_yaml(tmp_path, claim("r", candidate="rumor"), claim("i", candidate="other")))
    assert code == 1 and codes(out["r"]) == {"rumor"} and "preset_family" in out["r"]["reasons"][0]
    assert codes(out["i"]) == {"identity"} and "launch_regime" in out["i"]["reasons"][0]


def test_drift_must_be_declared_and_recipe_drift_never_passes(tmp_path, db):
    base = native_log(tmp_path / "run_a.log", steps(40, 200, 1), env={"NCCL_ALGO": None})
    ingest(db, base, native_log(tmp_path / "env.log", steps(40, 170, 2), env={"NCCL_ALGO": "Ring"}),
           native_log(tmp_path / "drv.log", steps(40, 170, 3), env={"NCCL_ALGO": None},
                      software={"driver_version": "570.86"}),
           native_log(tmp_path / "mhc.log", steps(40, 170, 4), env={"NCCL_ALGO": None}, features={"mhc": False}))
    path = claims_yaml(tmp_path, claim("env", candidate="env", speedup=1.18),
                       claim("env declared", candidate="env", speedup=1.18, declared_drift=["runtime"]),
                       claim("driver", candidate="drv", speedup=1.18),
                       claim("driver declared", candidate="drv", speedup=1.18, declared_drift=["infrastructure"]),
                       claim("recipe", candidate="mhc", speedup=1.18, declared_drift=["runtime", "infrastructure"]))
    code, out = gate(db, path)
    assert code == 1
    assert codes(out["env"]) == {"undeclared_drift"} and "env.NCCL_ALGO" in out["env"]["reasons"][0]
    assert codes(out["driver"]) == {"undeclared_drift"} and "infrastructure" in out["driver"]["reasons"][0]
    assert out["env declared"]["accepted"] and out["driver declared"]["accepted"]
    assert codes(out["recipe"]) == {"recipe_drift"} and "features.mhc" in out["recipe"]["reasons"][0]


def test_too_few_steps_noise_and_warmup_in_window(tmp_path, db):
    spiky = steps(100, 170, 5)
    spiky[60] = 170 * 4.5  # one recompile-sized step in the middle of the steady window
    ingest(db, native_log(tmp_path / "run_a.log", steps(100, 200, 1)),
           native_log(tmp_path / "short.log", steps(12, 170, 2)),
           native_log(tmp_path / "noisy.log", steps(100, 170, 3, cv=0.12)),
           native_log(tmp_path / "spiky.log", spiky))
    path = claims_yaml(tmp_path, claim("short", candidate="short", speedup=1.18),
                       claim("noisy", candidate="noisy", speedup=1.18),
                       claim("spiky", candidate="spiky", speedup=1.18))
    code, out = gate(db, path)
    assert code == 1
    assert "too_few_steps" in codes(out["short"]) and "11 steady-state steps" in out["short"]["reasons"][0]
    assert codes(out["noisy"]) == {"noise"}
    # the spike also inflates the CV: both reasons are true and both are reported
    assert codes(out["spiky"]) == {"warmup_in_window", "noise"} and "4.5x" in out["spiky"]["reasons"][0]


def test_runs_that_ended_early_are_rejected_unless_the_claim_allows_them(tmp_path, db):
    from conftest import write_native_log

    full = write_native_log(tmp_path / "full.log", steps(60, 200, 5))
    cut = write_native_log(tmp_path / "cut.log", steps(60, 200, 6), footer=False)  # killed before its footer
    ingest(db, full, cut)
    strict = claims_yaml(tmp_path, claim("same", "full", "cut"), claim("mem", "full", "cut", metric="peak_reserved",
                                                                      change="0B"))
    code, out = gate(db, strict)
    assert code == 1
    assert out["same"]["reasons"] == ["same: candidate cut ended early: no RECEIPT footer: the run stopped before "
                                      "writing one (last line 62) (add allow_ended_early: true if the claim may rest "
                                      "on a cut-short run)"]
    assert out["same"]["reason_codes"] == ["ended_early"]
    assert out["mem"]["reason_codes"] == ["ended_early", "no_measurement"]  # no footer, so no memory peak either
    lenient = claims_yaml(tmp_path, claim("same", "full", "cut"), defaults={"allow_ended_early": True}, name="ok.yaml")
    code, out = gate(db, lenient)
    assert code == 0 and out["same"]["accepted"] and out["same"]["claimed"]["allow_ended_early"] is True


# ------------------------------------------------------------------------- baseline: tag:main
@pytest.mark.parametrize("extra, line, words", [
    ("    baseline: 'tag:'\n    metric: step_time\n    speedup: 1\n", 4, "'baseline: tag:' needs a tag"),
    ("    baseline: tag:main\n    metric: peak_reserved\n    change: 0B\n", 4, "a tag baseline (tag:main) is for speed"),
    ("    baseline: tag:main\n    last: 0\n    metric: step_time\n    speedup: 1\n", 5, "'last' must be an integer >= 1"),
    ("    baseline: tag:main\n    last: .nan\n    metric: step_time\n    speedup: 1\n", 5, "'last' must be an integer"),
    ("    baseline: run_a\n    last: 3\n    metric: step_time\n    speedup: 1\n", 5, "'last' counts the runs of a tag"),
])
def test_tag_baseline_claims_are_validated(extra, line, words):
    with pytest.raises(InputError) as err:
        parse_claims("version: 1\nclaims:\n  - name: t\n    candidate: c\n" + extra, "claims.yaml")
    assert words in str(err.value), str(err.value)


def test_a_tag_baseline_defaults_to_the_last_10_runs():
    parsed = parse_claims("version: 1\nclaims:\n- {name: a, baseline: 'tag:main', candidate: c, metric: step_time, "
                          "speedup: 1}\n- {name: b, baseline: x, candidate: c, metric: step_time, speedup: 1}\n")
    (a, b) = parsed.claims
    assert (a.baseline_tag, a.last, b.baseline_tag, b.last) == ("main", 10, None, None)


NOISE = Path(__file__).resolve().parent / "data" / "noise"


def test_real_tag_baseline_claims_on_the_h100_noise_runs(tmp_path, db):
    """The real runs of tests/data/noise: a claimed 2.5% slowdown against tag:main is accepted, the same run
    claimed 5% faster is rejected, an A/A run claimed unchanged against the other nine is accepted.
    The slowdown claims take all ten main runs (last: 10): against only the five most recent, which ran
    ~0.4% slow, the planted 2.54% reads ~2.1%, under what 5 runs resolve at <= 5% false alarms."""
    if not NOISE.exists():
        pytest.skip("tests/data/noise not present")
    ingest(db, *sorted(NOISE.glob("*/run.log")))
    path = claims_yaml(tmp_path,
                       claim("planted slowdown", "tag:main", "slow_1", speedup=0.975, tolerance=0.02, last=10),
                       claim("said faster", "tag:main", "slow_2", speedup=1.05),
                       claim("unchanged", "tag:main", "aa_10", speedup=1.0, last=9),
                       claim("tokens", "tag:main", "slow_3", metric="tokens_per_s", speedup=0.975, last=10))
    code, out = gate(db, path)
    assert code == 1
    assert out["planted slowdown"]["accepted"] and out["tokens"]["accepted"] and out["unchanged"]["accepted"]
    assert codes(out["said faster"]) == {"effect_mismatch", "not_significant"}
    assert "verdict 'slower'" in out["said faster"]["reasons"][1]
    names = {c["candidate"]: c for c in out.values()}
    ids = {r: c["candidate_id"] for r, c in names.items()}
    # the ten main runs; the other claims' candidates (slow_2, slow_3) are not main runs
    assert len(out["planted slowdown"]["baseline_ids"]) == 10 and ids["slow_1"] not in out["planted slowdown"]["baseline_ids"]
    assert len(out["unchanged"]["baseline_ids"]) == 9 and ids["aa_10"] not in out["unchanged"]["baseline_ids"]
    assert out["planted slowdown"]["baseline_id"] is None and out["planted slowdown"]["last"] == 10
    assert "baseline: median of 10 run(s) tagged 'main'" in out["planted slowdown"]["measured"]["note"]
    assert len(out["planted slowdown"]["windows"]) == 11  # ten baseline runs' windows, then the candidate's


def test_tag_baseline_rejections_and_an_outlier_left_out(tmp_path, db):
    from conftest import write_native_log

    for i, ms in enumerate([200.0, 200.6, 199.5, 200.2, 260.0]):  # the last main run was throttled
        ingest(db, write_native_log(tmp_path / f"main_{i}.log", steps(60, ms, 40 + i, cv=0.004)), flags=("--tag", "main"))
    ingest(db, write_native_log(tmp_path / "cand.log", steps(60, 180.0, 50, cv=0.004)),
           write_native_log(tmp_path / "other_lane.log", steps(60, 180.0, 51, cv=0.004), regime="ddp/no-compile"),
           write_native_log(tmp_path / "rumor.log", steps(60, 180.0, 52, cv=0.004), preset=None))
    path = claims_yaml(tmp_path, claim("fast", "tag:main", "cand", speedup=1.11),
                       claim("no main here", "tag:main", "other_lane", speedup=1.11),
                       claim("rumor", "tag:main", "rumor", speedup=1.11),
                       claim("typo", "tag:main", "nope", speedup=1.11))
    code, out = gate(db, path)
    assert code == 1 and out["fast"]["accepted"], out["fast"]["reasons"]
    assert [x.split(":")[0] for x in out["fast"]["baseline_excluded"]] == ["main_4"]
    assert "outlier: median 260" in out["fast"]["baseline_excluded"][0]
    assert codes(out["no main here"]) == {"no_baseline"}
    assert "receipts ingest run.log --tag main" in out["no main here"]["reasons"][0]
    assert codes(out["rumor"]) == {"rumor"} and "lacks preset_family" in out["rumor"]["reasons"][0]
    assert codes(out["typo"]) == {"unknown_receipt"}


def test_memory_claims(tmp_path, db):
    ingest(db, native_log(tmp_path / "run_a.log", steps(40, 200, 1), peaks=(40 * GIB, 48 * GIB)),
           native_log(tmp_path / "run_b.log", steps(40, 200, 2), peaks=(38 * GIB, 42 * GIB)))
    path = claims_yaml(tmp_path, claim("overlay", metric="peak_reserved", change="-6GiB"),
                       claim("alloc", metric="peak_allocated", change="-3GiB"),
                       claim("alloc abs", metric="peak_allocated", change="-3GiB", tolerance_bytes="1GiB"),
                       claim("wrong sign", metric="peak_allocated", change="+2GiB"))
    code, out = gate(db, path)
    assert code == 1 and out["overlay"]["accepted"] and out["alloc abs"]["accepted"]
    m = out["overlay"]["measured"]
    assert m["value"] == -6 * GIB and m["ci_low"] is None and "no CI" in m["note"]
    assert codes(out["alloc"]) == {"effect_mismatch"}                 # -2 GiB is not -3 GiB +- 3%
    assert codes(out["wrong sign"]) == {"effect_mismatch", "not_significant"}


def test_junit_and_github_outputs(tmp_path, pair):
    path = claims_yaml(tmp_path, claim("ok", speedup=1.18), claim("bad, really: 100%", speedup=2.0))
    xml_path = tmp_path / "gate.xml"
    result = cli(pair, "gate", str(path), "--junit", str(xml_path), "--github")
    assert result.exit_code == 1
    cases = {c.get("name"): c for c in ET.parse(xml_path).getroot().iter("testcase")}
    assert cases["ok"].find("failure") is None
    assert "effect_mismatch" not in cases["bad, really: 100%"].find("failure").get("message")
    assert "excludes the claimed 2.000x" in cases["bad, really: 100%"].find("failure").get("message")
    lines = [line for line in result.stdout.splitlines() if line.startswith("::")]
    assert lines[0].startswith(f"::notice file={path},line=") and "title=claim accepted%3A ok::speedup" in lines[0]
    assert lines[1].startswith("::error ") and "title=claim rejected%3A bad%2C really%3A 100%25::" in lines[1]
    assert "ACCEPTED ok" in result.stdout and "REJECTED bad, really" in result.stdout


# ------------------------------------------------------------------------- real logs
from receipts.ingest import log_formats  # noqa: E402

LOGS = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "logs"
SOAP = "track_1_short_2024-10-09_SOAP__5bdc3988-496c-4232-b4ef-53764cb81c92.txt"
YARN = "track_1_short_2025-09-10_Yarn__ef66c943-e262-400f-822f-068d397a1dc9.txt"
SFT = "sft_run_gtx1660.log"
MEGATRON = "megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-baseline.log"
SAME_LANE = ("--host-lineage", HOST, "--preset", PRESET, "--regime", "ddp/full-compile")


def real(name: str, parser: str) -> Path:
    path = LOGS / name
    if not path.exists():
        pytest.skip(f"real data not present: {path}")
    log_formats.parser(parser)  # a parser that cannot be imported fails the test, naming its module
    return path


def split_steps(src: Path, dest: Path, keep, step_rx: str = r"^step (\d+) ") -> Path:
    """A real log with only some of its step lines (every other line kept where it was): how one real run
    becomes two receipts when no second real run exists for a case. Written to tmp_path, never committed."""
    import re
    rx = re.compile(step_rx)
    lines = [line for line in src.read_text(encoding="utf-8").splitlines()
             if not (m := rx.match(line)) or keep(int(m.group(1)))]
    dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


def log_values(path: Path, rx: str, lo: int = 0, hi: int = 10**9) -> np.ndarray:
    """Hand count from the log text: (step, value) pairs by regex, steps in [lo, hi]."""
    import re
    pairs = [(int(m.group(1)), float(m.group(2))) for m in re.finditer(rx, path.read_text(encoding="utf-8"), re.M)]
    return np.array([v for s, v in pairs if lo <= s <= hi])


SFT_DT = r"^step (\d+) .*?\| dt: ([\d.]+)ms"


def test_real_sft_halves_true_claim_accepted_false_claims_rejected(tmp_path, db):
    # One real run (nanochat SFT, GTX 1660) split into its first and second half: the same code on the
    # same box, so "no change" is the true claim and "10% faster" a false one. The halves differ by ~1.6%:
    # inside run-to-run noise (two runs, so the lane has the default floor), so claiming that 1.6% as a
    # speedup is not supported either (the old step-level bootstrap called such gaps significant).
    src = real(SFT, "nanochat")
    a = split_steps(src, tmp_path / "sft_first.log", lambda s: s <= 66)
    b = split_steps(src, tmp_path / "sft_second.log", lambda s: s > 66)
    ingest(db, a, b, flags=SAME_LANE)
    # independent expectation: medians of the dt column, past the 1.1 s first step
    expected = np.median(log_values(src, SFT_DT, 8, 66)) / np.median(log_values(src, SFT_DT, 67, 133))
    assert abs(expected - 1) < 0.03
    path = claims_yaml(tmp_path, claim("no change", "sft_first", "sft_second", speedup=1.0, tolerance=0.05),
                       claim("tokens no change", "sft_first", "sft_second", metric="tokens_per_s", speedup=1.0,
                             tolerance=0.05),
                       claim("hand count", "sft_first", "sft_second", speedup=round(float(expected), 3)),
                       claim("ten percent faster", "sft_first", "sft_second", speedup=1.10),
                       claim("slower", "sft_first", "sft_second", speedup=0.98, tolerance=0.05))
    code, out = gate(db, path)
    assert code == 1
    assert out["no change"]["accepted"] and out["tokens no change"]["accepted"]
    m = out["no change"]["measured"]
    assert m["ci_low"] <= expected <= m["ci_high"] and abs(m["value"] - expected) < 1e-9
    assert codes(out["hand count"]) == {"not_significant"} and "within the noise" in out["hand count"]["reasons"][0]
    assert "effect_mismatch" in codes(out["ten percent faster"])
    assert codes(out["slower"]) == {"not_significant"} and "includes no change" in out["slower"]["reasons"][0]


def test_real_sft_cut_short_has_too_few_steps(tmp_path, db):
    src = real(SFT, "nanochat")
    short = split_steps(src, tmp_path / "sft_short.log", lambda s: s <= 16)  # the run's first 16 steps only
    # without its first line: as it is, a byte prefix of the whole log, an earlier view of that run (stored superseded)
    short.write_text(short.read_text(encoding="utf-8").split("\n", 1)[1], encoding="utf-8")
    ingest(db, src, short, flags=SAME_LANE)
    code, out = gate(db, claims_yaml(tmp_path, claim("short", "sft_run_gtx1660", "sft_short")))
    # the first steps of a run are also its noisiest, so "noise" may come with it; too_few_steps must
    reason = next(r for r in out["short"]["reasons"] if "steady-state steps" in r)
    assert code == 1 and "too_few_steps" in codes(out["short"]) and "candidate sft_short has" in reason
    assert int(reason.split(" has ")[1].split(" ")[0]) < 16  # 16 logged steps, the warm-up excluded


def test_real_identity_rumor_and_unknown(tmp_path, db):
    src = real(SFT, "nanochat")
    a = split_steps(src, tmp_path / "sft_first.log", lambda s: s <= 66)
    b = split_steps(src, tmp_path / "sft_second.log", lambda s: s > 66)
    c = split_steps(src, tmp_path / "sft_rumor.log", lambda s: s > 60)
    ingest(db, a, flags=SAME_LANE)
    ingest(db, b, flags=("--host-lineage", HOST, "--preset", PRESET, "--regime", "ddp/no-compile"))
    ingest(db, c, flags=("--host-lineage", HOST, "--regime", "ddp/full-compile"))  # no preset: a rumor
    path = claims_yaml(tmp_path, claim("regime", "sft_first", "sft_second"), claim("rumor", "sft_first", "sft_rumor"),
                       claim("ghost", "sft_first", "nanochat_pr147_a100_mfu"))
    code, out = gate(db, path)
    assert code == 1
    assert codes(out["regime"]) == {"identity"} and "launch_regime 'ddp/full-compile' != 'ddp/no-compile'" in out["regime"]["reasons"][0]
    assert codes(out["rumor"]) == {"rumor"} and "sft_rumor" in out["rumor"]["reasons"][0]
    assert codes(out["ghost"]) == {"unknown_receipt"}


def test_real_megatron_noise_and_recipe_drift(tmp_path, db):
    meg = real(MEGATRON, "megatron")
    sft = real(SFT, "nanochat")
    ingest(db, meg, sft, flags=SAME_LANE)  # same flags: comparable by identity, but not the same experiment
    ref = meg.stem
    path = claims_yaml(tmp_path, claim("self", ref, ref),
                       claim("apples", "sft_run_gtx1660", ref, declared_drift=["runtime", "infrastructure"]),
                       claim("mem", ref, ref, metric="peak_reserved", change="0B", allow_ended_early=True),
                       claim("crashed", ref, ref, metric="peak_reserved", change="0B"))
    code, out = gate(db, path)
    assert code == 1
    # independent: CV of "elapsed time per iteration" over the steady window the receipt states
    first, last = (int(x) for x in out["self"]["windows"][0].split("steady steps ")[1].split(" ")[0].split(".."))
    ms = log_values(meg, r"iteration\s+(\d+)/.*?elapsed time per iteration \(ms\): ([\d.]+)", first, last)
    cv = ms.std(ddof=1) / ms.mean()
    noise = next(r for r in out["self"]["reasons"] if "too noisy" in r)
    assert cv > 0.05 and codes(out["self"]) == {"noise", "ended_early"} and f"{cv:.1%}" in noise
    # the log ends in a Python traceback at line 2938, after iteration 470 (hand-checked in the file)
    crash = [ln for ln in meg.read_text(encoding="utf-8").splitlines()].index("Traceback (most recent call last):") + 1
    assert codes(out["crashed"]) == {"ended_early"} and len(out["crashed"]["reasons"]) == 2
    assert all(f"line {crash}" in r and "allow_ended_early: true" in r for r in out["crashed"]["reasons"])
    assert "recipe_drift" in codes(out["apples"]) and "undeclared_drift" not in codes(out["apples"])
    # the log's "max reserved: 8774.0" (MB, i.e. MiB in Megatron's report) compared with itself
    assert out["mem"]["accepted"] and out["mem"]["measured"]["value"] == 0
    assert str(8774 * 2**20 / 2**30)[:5] in out["mem"]["measured"]["note"]


MODDED_TIME = r"^step:(\d+)/\d+ (?:train_loss:\S+ )?train_time:(\d+)ms"


def _modded_step_ms(path: Path, first: int, last: int) -> np.ndarray:
    """Hand count: per-step time = difference of consecutive train_time readings (train lines only)."""
    import re
    pairs = [(int(m.group(1)), int(m.group(2))) for m in re.finditer(MODDED_TIME, path.read_text(encoding="utf-8"), re.M)
             if "val_loss" not in m.group(0)]
    steps_, times = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    d, s = np.diff(times), steps_[1:]
    return d[(s >= first) & (s <= last)]


def test_real_modded_nanogpt_headline_speedup_is_not_supported_by_the_receipts(tmp_path, db):
    # The two speedrun records, same identity flags: a real 2.7x median speedup. The headline claim
    # (wall clock: 2176390 ms / 6000 steps vs 159269 ms / 1670 steps = 3.80x) is still rejected, each
    # reason true of the logs: torch 2.4.1 -> 2.9 dev and driver 535 -> 570 (drift); SOAP's every-10th-step
    # preconditioner update (CV ~89%); Yarn's recompiles at each attention-window change (warm-up in window).
    soap, yarn = real(SOAP, "modded_nanogpt"), real(YARN, "modded_nanogpt")
    ingest(db, soap, flags=SAME_LANE + ("--run-name", "soap"))
    ingest(db, yarn, flags=SAME_LANE + ("--run-name", "yarn"))
    wall = (2176390 / 6000) / (159269 / 1670)
    path = claims_yaml(tmp_path, claim("headline", "soap", "yarn", speedup=round(wall, 2)),
                       claim("declared", "soap", "yarn", speedup=round(wall, 2), declared_drift=["runtime", "infrastructure"]),
                       claim("yarn self", "yarn", "yarn", speedup=1.0))
    code, out = gate(db, path)
    assert code == 1
    assert codes(out["headline"]) == {"undeclared_drift", "noise", "warmup_in_window", "effect_mismatch"}
    assert codes(out["declared"]) == {"noise", "warmup_in_window", "effect_mismatch"}
    windows = [w.split("steady steps ")[1].split(" ")[0].split("..") for w in out["headline"]["windows"]]
    a = _modded_step_ms(soap, *map(int, windows[0]))
    b = _modded_step_ms(yarn, *map(int, windows[1]))
    assert out["headline"]["measured"]["value"] == pytest.approx(np.median(a) / np.median(b), rel=1e-9)
    assert a.std(ddof=1) / a.mean() > 0.5                       # SOAP's periodic preconditioner steps
    spikes = int((b > 3 * np.median(b)).sum())
    assert 1 <= spikes <= 0.02 * b.size and f"{spikes} steady-window step(s)" in " ".join(out["yarn self"]["reasons"])
    assert "software.torch '2.4.1+cu121'" in out["headline"]["reasons"][0]
