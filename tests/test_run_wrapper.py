"""`receipts run` on CPU-only commands: provenance, exit codes, signals, missing commands, secrets."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from polars.testing import assert_series_equal

from conftest import realdata
from receipts.launch.launcher import CommandNotFound, run
from receipts.schema.lane import IdentityClaim
from receipts.ingest import native
from receipts.ingest.textlog import read_log

REPO = Path(__file__).resolve().parents[1]
RECEIPTS = shutil.which("receipts", path=str(Path(sys.executable).parent)) or "receipts"


def _records(path: Path) -> list[dict]:
    return [json.loads(line[8:]) for line in path.read_text().splitlines() if line.startswith("RECEIPT ")]


def _env(**extra: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF",
                                                              "CUDA_DEVICE_MAX_CONNECTIONS", "RECEIPTS_LAUNCHER")}
    return {**base, **extra}


def test_header_records_provenance_before_the_child_and_exit_code(tmp_path):
    result = run(command=[sys.executable, "-c", "print('child says hi')"], run_dir=tmp_path / "r", ingest=False,
                 claim=IdentityClaim("h200-device-x2", "toy_fsdp2_v1", "fsdp2/no-compile"), tags=("v19c",),
                 cwd=REPO, environ=_env(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True", NCCL_DEBUG="WARN"))
    assert result.exit_code == 0 and result.signal_name is None
    lines = result.log_path.read_text().splitlines()
    assert lines[0].startswith("RECEIPT ") and "child says hi" in lines[1]
    header, footer = _records(result.log_path)
    assert header["identity"] == {"host_lineage": "h200-device-x2", "preset": "toy_fsdp2_v1",
                                  "regime": "fsdp2/no-compile"}
    assert len(header["git_rev"]) == 40 and header["git_status"]     # source revision + short status summary
    assert header["command"].endswith("-c 'print('\"'\"'child says hi'\"'\"')'")
    assert header["hostname"] and header["cwd"] == str(REPO) and header["tags"] == ["v19c"]
    env = header["env"]
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] is None and "CUDA_DEVICE_MAX_CONNECTIONS" in env  # unset, recorded
    assert env["NCCL_DEBUG"] == "WARN" and env["PYTORCH_ALLOC_CONF"] is None
    assert header["provenance"]["alloc_conf"]["effective"] == "expandable_segments:True"
    assert header["provenance"]["alloc_conf"]["source"].startswith("PYTORCH_CUDA_ALLOC_CONF")
    assert header["software"]["python_executable"]  # read from the child's interpreter, torch never imported
    if shutil.which("nvidia-smi") is None:
        assert header["gpu_count"] == 0 and header["gpu_model"] is None
    assert footer["exit_code"] == 0 and footer["kind"] == "footer"
    parsed = native.parse(read_log(result.log_path))
    assert parsed.claim.preset == "toy_fsdp2_v1" and parsed.provenance["git_rev"] == header["git_rev"]


@pytest.mark.parametrize("code", [1, 3, 42])
def test_nonzero_exit_code_is_returned_and_recorded(tmp_path, code):
    result = run(command=[sys.executable, "-c", f"import sys; print('bye', file=sys.stderr); sys.exit({code})"],
                 run_dir=tmp_path / "r", ingest=False, environ=_env())
    assert result.exit_code == code
    text = result.log_path.read_text()
    assert "bye" in text  # stderr is teed too
    assert _records(result.log_path)[-1]["exit_code"] == code


def test_child_killed_by_a_signal_reads_as_128_plus_n(tmp_path):
    result = run(command=[sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                 run_dir=tmp_path / "r", ingest=False, environ=_env())
    assert result.exit_code == 128 + signal.SIGKILL and result.signal_name == "SIGKILL"
    assert _records(result.log_path)[-1]["signal"] == "SIGKILL"


def test_missing_command_exits_127_with_one_line_and_writes_nothing(tmp_path):
    with pytest.raises(CommandNotFound, match="command not found: no-such-cmd-xyz") as err:
        run(command=["no-such-cmd-xyz"], run_dir=tmp_path / "r", ingest=False)
    assert err.value.exit_code == 127
    db = tmp_path / "s.duckdb"
    proc = subprocess.run([RECEIPTS, "--db", str(db), "run", "--run-dir", str(tmp_path / "r2"), "--",
                           "no-such-cmd-xyz", "--flag"], capture_output=True, text=True)
    assert proc.returncode == 127  # the shell's "command not found", which Slurm and CI already read
    assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") == 0
    assert "command not found: no-such-cmd-xyz" in proc.stderr
    # Nothing ran, so nothing is written: no run directory, no rumor receipt in the store.
    assert not (tmp_path / "r2").exists() and not db.exists()


def test_command_that_is_not_executable_exits_126(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\necho hi\n")  # no execute bit
    proc = subprocess.run([RECEIPTS, "--db", str(tmp_path / "s.duckdb"), "run", "--run-dir", str(tmp_path / "r"),
                           "--", str(script)], capture_output=True, text=True)
    assert proc.returncode == 126 and "not executable" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


_HANDLER = """
import signal, sys, time
def handler(signum, frame):
    print(f"got signal {signum}", flush=True)
    sys.exit(3)
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(sig, handler)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def _start_wrapped(tmp_path: Path, script: str, *extra: str, env: dict | None = None) -> tuple[subprocess.Popen, Path]:
    """`receipts run` around `script`, started in the background; returns once the child printed 'ready'."""
    run_dir = tmp_path / "r"
    proc = subprocess.Popen([RECEIPTS, "--db", str(tmp_path / "s.duckdb"), "run", *extra, "--quiet",
                             "--run-dir", str(run_dir), "--", sys.executable, "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    log = run_dir / "run.log"
    # a guard against a hang, not a speed bound: a cold `receipts run` on a machine at load 80 took over 30 s
    deadline = time.monotonic() + 180
    while not (log.exists() and "ready" in log.read_text().splitlines()):  # the header quotes the script
        assert time.monotonic() < deadline and proc.poll() is None, "child never got ready"
        time.sleep(0.05)
    return proc, log


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                                 signal.SIGUSR2])
def test_signals_are_forwarded_to_the_child(tmp_path, sig):
    proc, log = _start_wrapped(tmp_path, _HANDLER, "--no-ingest")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    assert f"got signal {int(sig)}" in log.read_text()
    assert _records(log)[-1]["exit_code"] == 3


# Slurm's pre-emption warning (`sbatch --signal=USR1@90`): the script checkpoints and carries on.
_PREEMPTIBLE = """
import pathlib, signal, sys, time
marker = pathlib.Path(sys.argv[1])
warned = []
signal.signal(signal.SIGUSR1, lambda signum, frame: warned.append(signum))
print("ready", flush=True)
deadline = time.monotonic() + 30
while not warned and time.monotonic() < deadline:
    time.sleep(0.05)
marker.write_text(f"checkpoint after signal {warned}")
print("saved checkpoint", flush=True)
"""


def test_sigusr1_reaches_a_child_that_traps_it(tmp_path):
    marker = tmp_path / "checkpoint.marker"
    script = _PREEMPTIBLE.replace("sys.argv[1]", repr(str(marker)))
    proc, log = _start_wrapped(tmp_path, script, "--host-lineage", "h200-device-x2", "--preset", "toy_fsdp2_v1",
                               "--regime", "fsdp2/no-compile", env=_env())
    assert proc.poll() is None and not marker.exists()
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err           # the child handled it and exited normally: so do we
    assert marker.read_text() == f"checkpoint after signal [{int(signal.SIGUSR1)}]"
    assert "saved checkpoint" in log.read_text()
    footer = _records(log)[-1]
    assert footer["kind"] == "footer" and footer["exit_code"] == 0 and footer["signal"] is None


# Like torchrun 2.11 (tests/gpu/signals_torchrun.sh): an agent that handles TERM but not USR1, over a worker in
# a session of its own that traps USR1. Sent to the agent alone, USR1 would end it and never reach the worker.
_WORKER = """
import os, pathlib, signal, sys, time
os.setsid()
signal.signal(signal.SIGUSR1, lambda s, f: pathlib.Path(sys.argv[1]).write_text("worker got USR1"))
print("ready", flush=True)
deadline = time.monotonic() + 30
while not pathlib.Path(sys.argv[1]).exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""
_AGENT = f"""
import signal, subprocess, sys
signal.signal(signal.SIGTERM, lambda s, f: sys.exit(1))
sys.exit(subprocess.call([sys.executable, "-c", {_WORKER!r}, sys.argv[1]]))
"""


def test_usr1_reaches_the_worker_under_an_agent_that_does_not_handle_it(tmp_path):
    marker = tmp_path / "worker.marker"
    run_dir = tmp_path / "r"
    proc = subprocess.Popen([RECEIPTS, "--db", str(tmp_path / "s.duckdb"), "run", "--no-ingest", "--quiet",
                             "--run-dir", str(run_dir), "--", sys.executable, "-c", _AGENT, str(marker)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    log = run_dir / "run.log"
    deadline = time.monotonic() + 30
    while not (log.exists() and "ready" in log.read_text().splitlines()):
        assert time.monotonic() < deadline and proc.poll() is None, "worker never got ready"
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=60)
    assert marker.read_text() == "worker got USR1"
    # the agent, which would only have died of it, is spared: the worker finishes and so does the run
    assert proc.returncode == 0, err
    assert _records(log)[-1]["exit_code"] == 0 and _records(log)[-1]["signal"] is None


def test_a_signal_nobody_listens_for_still_reaches_the_child(tmp_path):
    result_dir = tmp_path / "r"
    proc = subprocess.Popen([RECEIPTS, "--db", str(tmp_path / "s.duckdb"), "run", "--no-ingest", "--quiet",
                             "--run-dir", str(result_dir), "--", sys.executable, "-c",
                             "import time; print('ready', flush=True); time.sleep(30)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    log = result_dir / "run.log"
    deadline = time.monotonic() + 30
    while not (log.exists() and "ready" in log.read_text().splitlines()):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR2)
    proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGUSR2   # its default action, as without the wrapper
    assert _records(log)[-1]["signal"] == "SIGUSR2"


_TWO_RANKS = """
import os, subprocess, sys
worker = '''
import sys
from receipts.capture import Recorder
rec = Recorder(use_cuda=False)
for i in range(1500):
    with rec.step(i, tokens=4096) as s:
        s.loss = 1.0
    if i % 100 == 0:
        # one write() per line: under PYTHONUNBUFFERED, print(a, b) is several writes, and another
        # rank's RECEIPT batch can land between them (the line is then no longer a RECEIPT line)
        sys.stdout.write(f"plain text from rank {rec.rank}\\\\n")
        sys.stdout.flush()
rec.close()
'''
procs = [subprocess.Popen([sys.executable, "-c", worker], env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2"})
         for r in (0, 1)]
sys.exit(max(p.wait() for p in procs))
"""


def test_two_ranks_sharing_the_childs_stdout_pipe(tmp_path):
    """torchrun's workers inherit one stdout pipe: batches under PIPE_BUF never interleave mid-line."""
    result = run(command=[sys.executable, "-c", _TWO_RANKS], run_dir=tmp_path / "r", ingest=False, environ=_env())
    assert result.exit_code == 0
    parsed = native.parse(read_log(result.log_path))
    assert parsed.steps.height == 3000
    assert sorted(parsed.steps.group_by("rank").len()["len"].to_list()) == [1500, 1500]
    assert parsed.world_size == 2


# Twenty planted secrets: names that say so, and values whose shape says so under harmless names.
SECRETS = {
    "GITHUB_TOKEN": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "HF_TOKEN": "hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm123456",
    "OPENAI_API_KEY": "sk-" + "proj-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0",
    "ANTHROPIC_API_KEY": "sk-ant-" + "api03-abcdefghijklmnopqrstuvwxyz012345",
    "AWS_ACCESS_KEY_ID": "AKIA" + "IOSFODNN7EXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "SLACK_BOT_TOKEN": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "JWT_SESSION": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "SSH_PRIVATE_KEY": "-----BEGIN OPENSSH PRIVATE KEY-----b3BlbnNzaC1rZXktdjEAAAAABG5vbmU",
    "DB_PASSWORD": "correct-horse-battery-staple-42",
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "NCCL_IB_AUTH_SECRET": "nccl-side-secret-value-777",        # under a watched prefix: in the overlay
    "TORCH_NCCL_SESSION_COOKIE": "torch-nccl-cookie-value-888",  # same, two secret words
    "MY_CREDENTIALS": "user:pw-very-secret-999",
    "GITLAB_TOKEN": "glpat-" + "xXyYzZ0123456789abcd",
    "GOOGLE_API_KEY": "AIza" + "SyA1234567890abcdefghijklmnopqrstu",
    "NPM_TOKEN": "npm_" + "abcdefghijklmnopqrstuvwxyz0123456789",
    "DATABASE_URL": "postgresql://admin:s3cr3t-pw-000@db.internal:5432/runs",  # harmless name, creds in value
    "BUILD_INFO": "ghp_" + "ZzYyXxWwVvUuTtSsRrQqPpOoNnMmLlKkJjIi",           # harmless name, token shape
    "PRIVATE_SIGNING_PASSWD": "signing-passwd-value-111",
}


def test_planted_secrets_never_reach_the_log_or_the_store(tmp_path):
    assert len(SECRETS) == 20
    # The child prints every secret to stdout and stderr; the command line carries one too.
    script = ("import os, sys\n"
              f"for name in {sorted(SECRETS)!r}:\n"
              "    print(name, os.environ[name])\n"
              "    print(name, os.environ[name], file=sys.stderr)\n")
    db = tmp_path / "store.duckdb"
    env = {**_env(), **SECRETS}
    proc = subprocess.run([RECEIPTS, "--db", str(db), "run", "--quiet", "--host-lineage", "h200-device-x2",
                           "--preset", "toy_fsdp2_v1", "--regime", "fsdp2/no-compile", "--run-dir",
                           str(tmp_path / "r"), "--", sys.executable, "-c", script, SECRETS["HF_TOKEN"]],
                          env=env, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ingested" in proc.stdout
    log_bytes = (tmp_path / "r" / "run.log").read_bytes()
    store_bytes = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert log_bytes.count(b"<redacted>") >= 40
    for name, value in SECRETS.items():
        assert value.encode() not in log_bytes, f"{name} leaked into run.log"
        assert value.encode() not in store_bytes, f"{name} leaked into the store"
    header = _records(tmp_path / "r" / "run.log")[0]
    assert header["env"]["NCCL_IB_AUTH_SECRET"] == "<redacted>"  # the knob stays visible as set
    assert SECRETS["HF_TOKEN"] not in header["command"]


def test_run_then_ingest_into_the_store(tmp_path):
    result = run(command=[sys.executable, "-c", "print('ok')"], run_dir=tmp_path / "r", ingest=True,
                 db_url=str(tmp_path / "s.duckdb"), claim=IdentityClaim("h200-device-x2", "toy_fsdp2_v1", "fsdp2/no-compile"),
                 run_name="cpu_smoke", environ=_env(), cwd=REPO)
    assert result.exit_code == 0 and result.ingest_error is None
    (outcome,) = result.ingested
    assert outcome.created and outcome.run_name == "cpu_smoke" and outcome.kind == "receipt"


def test_git_revision_outside_a_checkout_comes_from_the_ci_variable(tmp_path):
    from receipts.launch.provenance import git_provenance

    copied_tree = tmp_path / "job"  # a tree copied without .git, as schedulers and containers do
    copied_tree.mkdir()
    assert git_provenance(cwd=copied_tree, environ={}) == {"git_rev": None, "git_status": "not a git checkout"}
    sha = "0123456789abcdef0123456789abcdef01234567"
    found = git_provenance(cwd=copied_tree, environ={"GITHUB_SHA": sha, "GIT_COMMIT": "other"})
    assert found == {"git_rev": sha, "git_status": "not a git checkout; revision from $GITHUB_SHA"}
    # Inside a checkout, the checkout's own HEAD wins over any variable: a repository made here, so the test
    # runs (and can fail) whether or not the project itself was cloned with .git.
    repo = tmp_path / "checkout"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "train.py").write_text("print('step')\n")
    subprocess.run([*git, "add", "train.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    own = git_provenance(cwd=repo, environ={"GITHUB_SHA": sha})
    assert own["git_rev"] == head and own["git_status"] == "clean"
    (repo / "train.py").write_text("print('step 2')\n")
    assert git_provenance(cwd=repo, environ={})["git_status"] == "1 modified"


# ---------------------------------------------------------------- an unmodified third-party script
# It knows nothing of receipts: it prints what the real training script printed (read from the real log
# at run time, line by line, to stdout), and some noise to stderr, like any training script.
_REPLAY = """
import sys
print("a third-party script starting", file=sys.stderr, flush=True)
with open(sys.argv[1], encoding="utf-8") as f:
    for line in f:
        sys.stdout.write(line)
sys.stdout.flush()
sys.exit(int(sys.argv[2]))
"""

IDENTITY_FLAGS = ("--host-lineage", "h200-device-x2", "--preset", "toy_fsdp2_v1", "--regime", "fsdp2/no-compile")


def _wrap(tmp_path: Path, real: Path, *, name: str, exit_code: int = 0, db: Path | None = None,
          env: dict | None = None) -> subprocess.CompletedProcess:
    db = db or tmp_path / "s.duckdb"
    return subprocess.run([RECEIPTS, "--db", str(db), "run", *IDENTITY_FLAGS, "--run-name", name, "--run-dir",
                           str(tmp_path / name), "--", sys.executable, "-c", _REPLAY, str(real), str(exit_code)],
                          capture_output=True, text=True, cwd=REPO, env=env or _env())


def _show(db: Path, run: str) -> dict:
    out = subprocess.run([RECEIPTS, "--db", str(db), "show", run, "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _steps(db: Path, run: str):
    import polars as pl

    con = duckdb.connect(str(db), read_only=True)
    try:
        return pl.from_arrow(con.execute(
            "SELECT s.step, s.rank, s.step_ms, s.tokens_per_s, s.loss, s.mfu_pct, s.line FROM receipt_steps s "
            "JOIN receipts r ON r.id = s.receipt_id WHERE r.run_name = ? ORDER BY s.step, s.rank", [run]).arrow())
    finally:
        con.close()


def test_wrapper_around_an_unmodified_script_printing_real_nanochat_lines(tmp_path):
    from receipts.pipeline import parse_log

    real = realdata("logs", "sft_run_gtx1660.log")
    proc = _wrap(tmp_path, real, name="sft_wrapped")
    assert proc.returncode == 0, proc.stderr
    assert "step 00001" in proc.stdout and "a third-party script starting" in proc.stderr  # streams kept apart
    assert "a third-party script starting" not in proc.stdout
    db = tmp_path / "s.duckdb"
    shown = _show(db, "sft_wrapped")
    # Identity and provenance: the launcher's header.
    assert shown["identity"]["complete"] is True
    assert shown["identity"]["raw"] == {"host_lineage": "h200-device-x2", "preset": "toy_fsdp2_v1",
                                        "regime": "fsdp2/no-compile"}
    header = _records(tmp_path / "sft_wrapped" / "run.log")[0]
    assert shown["provenance"]["git_rev"] == header["git_rev"] and shown["provenance"]["command"] == header["command"]
    assert shown["source_format"] == "receipt+nanochat" and shown["ended_early"] is None
    # Steps: the child's own lines, the same numbers the real log gives read on its own (a hand count of
    # the file: 133 step lines, step 1 to 133), with line numbers pointing into run.log.
    alone = parse_log(real).steps
    stored = _steps(db, "sft_wrapped")
    assert stored.height == alone.height == 133 and stored["step"].to_list() == list(range(1, 134))
    for column in ("step", "step_ms", "tokens_per_s", "loss"):   # the log's own `loss: nan` stays NaN
        assert_series_equal(stored[column], alone[column], check_dtypes=False)
    log_lines = (tmp_path / "sft_wrapped" / "run.log").read_text().splitlines()
    first = stored.row(0, named=True)
    assert log_lines[first["line"] - 1].startswith("step 00001")


@pytest.mark.parametrize("name,fmt,n_steps", [
    ("megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-baseline.log", "megatron", 47),
    ("torchtitan_pr1287_dcp_zoc_steps200-250.txt", "torchtitan", 6),
    ("track_1_short_2025-09-10_Yarn__ef66c943-e262-400f-822f-068d397a1dc9.txt", "modded_nanogpt", None),
])
def test_wrapped_third_party_formats_keep_their_steps_under_the_header(tmp_path, name, fmt, n_steps):
    from receipts.pipeline import parse_log

    real = realdata("logs", name)
    result = run(command=[sys.executable, "-c", _REPLAY, str(real), "0"], run_dir=tmp_path / "r", ingest=False,
                 claim=IdentityClaim("h200-device-x2", "toy_fsdp2_v1", "fsdp2/no-compile"), environ=_env(),
                 cwd=REPO)
    assert result.exit_code == 0
    wrapped, alone = parse_log(result.log_path), parse_log(real)
    assert wrapped.source_format == f"receipt+{alone.source_format}" and alone.source_format.replace("-", "_") == fmt
    assert wrapped.steps.drop("line").equals(alone.steps.drop("line"))
    assert n_steps is None or wrapped.steps.height == n_steps
    assert wrapped.claim.preset == "toy_fsdp2_v1" and wrapped.claim.host_lineage == "h200-device-x2"
    assert wrapped.memory == alone.memory and wrapped.world_size == alone.world_size
    # the same finding, its line numbers counted in run.log (header and the child's stderr line come first)
    assert (wrapped.ended_early is None) == (alone.ended_early is None)


# ---------------------------------------------------------------- the child's exit code always wins
def test_ingest_failure_after_a_successful_run_keeps_the_childs_exit_code(tmp_path):
    not_a_store = tmp_path / "notes.duckdb"
    not_a_store.write_text("this is not a DuckDB file\n")
    real = realdata("logs", "nanochat_pr147_a100_mfu.txt")
    proc = _wrap(tmp_path, real, name="ok_run", db=not_a_store)
    assert proc.returncode == 0, proc.stderr
    assert "ingest failed" in proc.stderr and "Traceback" not in proc.stderr
    assert f"receipts ingest {tmp_path / 'ok_run'}" in proc.stderr    # how to finish the job later
    assert not_a_store.read_text() == "this is not a DuckDB file\n"
    assert _records(tmp_path / "ok_run" / "run.log")[-1]["exit_code"] == 0


def test_a_store_locked_too_long_is_reported_and_the_exit_code_stays_the_childs(tmp_path):
    db = tmp_path / "s.duckdb"
    holder = duckdb.connect(str(db))  # another process's writer, as far as the wrapper can tell
    try:
        proc = _wrap(tmp_path, realdata("logs", "nanochat_pr147_a100_mfu.txt"), name="failing", exit_code=3,
                     env=_env(RECEIPTS_LOCK_WAIT_S="1"))
    finally:
        holder.close()
    assert proc.returncode == 3, proc.stderr
    assert f"waiting for the store lock on {db} held by PID {os.getpid()}" in proc.stderr
    assert "gave up after waiting 1 s" in proc.stderr and "ingest failed" in proc.stderr


def test_two_concurrent_runs_on_one_duckdb_store_both_land_with_their_exit_codes(tmp_path):
    db = tmp_path / "s.duckdb"
    real = realdata("logs", "nanochat_pr147_a100_mfu.txt")
    # Hold the store's lock while both runs finish, so both must wait for it (a deterministic collision);
    # then let go: each ingests in turn.
    holder = duckdb.connect(str(db))
    jobs, errs = [], []
    try:
        for name, code in (("job_ok", 0), ("job_fails", 3)):
            err = open(tmp_path / f"{name}.err", "w+")
            errs.append(err)
            jobs.append(subprocess.Popen(
                [RECEIPTS, "--db", str(db), "run", *IDENTITY_FLAGS, "--quiet", "--run-name", name, "--run-dir",
                 str(tmp_path / name), "--", sys.executable, "-c", _REPLAY, str(real), str(code)],
                stdout=subprocess.DEVNULL, stderr=err, cwd=REPO, env=_env()))
        deadline = time.monotonic() + 60
        while not all("waiting for the store lock" in (tmp_path / f"{n}.err").read_text()
                      for n in ("job_ok", "job_fails")):
            assert time.monotonic() < deadline and all(j.poll() is None for j in jobs), \
                [(tmp_path / f"{n}.err").read_text() for n in ("job_ok", "job_fails")]
            time.sleep(0.1)
    finally:
        holder.close()
    codes = [job.wait(timeout=120) for job in jobs]
    messages = [err.seek(0) or err.read() for err in errs]
    assert codes == [0, 3], messages
    assert all(f"held by PID {os.getpid()}" in m and "ingest failed" not in m for m in messages)
    listed = subprocess.run([RECEIPTS, "--db", str(db), "list", "--json"], capture_output=True, text=True)
    rows = {r["run_name"]: r for r in json.loads(listed.stdout)}
    assert set(rows) == {"job_ok", "job_fails"}
    assert rows["job_ok"]["ended_early"] is None
    assert rows["job_fails"]["ended_early"] == "the command exited with code 3"
    assert _steps(db, "job_ok").height == _steps(db, "job_fails").height == 7   # steps 4..10 of the real log


def test_a_last_line_without_newline_is_not_glued_to_the_footer(tmp_path):
    # sft_run_gtx1660.log itself ends without a newline: its last step line used to swallow the footer
    result = run(command=[sys.executable, "-c", "import sys; sys.stdout.write('step 9 | no newline')"],
                 run_dir=tmp_path / "r", ingest=False, environ=_env())
    lines = result.log_path.read_text().splitlines()
    assert lines[-2] == "step 9 | no newline" and lines[-1].startswith("RECEIPT ")
    assert _records(result.log_path)[-1]["kind"] == "footer"


def test_merge_takes_identity_from_the_header_and_fills_gaps_from_the_child():
    import polars as pl

    from receipts.ingest.wrapped import merge
    from receipts.schema.model import IdentityClaim, MemoryPeak, ParsedRun, steps_frame

    header = ParsedRun("receipt", "1", steps_frame({}), claim=IdentityClaim("h200-device-x2", "toy_fsdp2_v1", None, "vm"),
                       provenance={"git_rev": "abc", "command": "python pretrain_gpt.py"}, gpu_model=None, gpu_count=0,
                       ended_early="the command exited with code 1", tags=("v19c",))
    child = ParsedRun("megatron", "megatron-deepspeed", steps_frame({"step": [1, 2], "step_ms": [5.0, 4.0]}),
                      claim=IdentityClaim(regime="megatron/tp2"), memory=(MemoryPeak(0, 10, 20),),
                      provenance={"git_rev": "child's", "total_steps": 100}, gpu_model="NVIDIA H100", gpu_count=8,
                      ended_early="line 9: 'Traceback ...' after the last iteration line 8")
    merged = merge(header, child)
    assert merged.source_format == "receipt+megatron" and merged.format_version == "1+megatron-deepspeed"
    assert merged.steps["step"].to_list() == [1, 2] and merged.steps.schema == child.steps.schema
    assert merged.claim == IdentityClaim("h200-device-x2", "toy_fsdp2_v1", "megatron/tp2", "vm")
    assert merged.provenance == {"git_rev": "abc", "command": "python pretrain_gpt.py", "total_steps": 100}
    assert merged.memory == child.memory and merged.tags == ("v19c",)
    assert (merged.gpu_model, merged.gpu_count) == ("NVIDIA H100", 8)   # the launcher's probe found no GPU
    assert merged.ended_early == "the command exited with code 1; line 9: 'Traceback ...' after the last iteration line 8"
    assert isinstance(merged.steps, pl.DataFrame)


def test_lock_wait_bound_and_holder_come_from_the_environment_and_duckdbs_message():
    from receipts.errors import UsageError
    from receipts.store.duckdb_lock import DEFAULT_WAIT_S, lock_holder, lock_wait_s

    assert lock_wait_s({}) == DEFAULT_WAIT_S == 60 and lock_wait_s({"RECEIPTS_LOCK_WAIT_S": "2.5"}) == 2.5
    for bad in ("soon", "-1", "nan", "inf"):
        with pytest.raises(UsageError, match="RECEIPTS_LOCK_WAIT_S"):
            lock_wait_s({"RECEIPTS_LOCK_WAIT_S": bad})
    # DuckDB 1.4.4's own words, as raised in a second process
    message = ('IO Error: Could not set lock on file "/tmp/s.duckdb": Conflicting lock is held in '
               '/usr/bin/python3.12 (PID 4242). See also https://duckdb.org/docs/stable/connect/concurrency')
    assert lock_holder(Exception(message)) == "PID 4242 (/usr/bin/python3.12)"
    assert lock_holder(Exception("IO Error: No space left on device")) is None


def test_a_file_the_os_cannot_execute_exits_126_and_is_not_ingested(tmp_path):
    script = tmp_path / "train"
    script.write_text("echo no shebang here\n")  # executable bit, but execve() says ENOEXEC
    script.chmod(0o755)
    db = tmp_path / "s.duckdb"
    proc = subprocess.run([RECEIPTS, "--db", str(db), "run", "--run-dir", str(tmp_path / "r"), "--", str(script)],
                          capture_output=True, text=True, env=_env())
    assert proc.returncode == 126, proc.stderr
    assert "cannot execute" in proc.stderr and "Traceback" not in proc.stderr
    footer = _records(tmp_path / "r" / "run.log")[-1]   # the header says what was attempted, the footer why not
    assert footer["exit_code"] == 126 and "Exec format error" in footer["launch_error"]
    assert not db.exists()


def test_a_wrapped_log_names_its_run_like_a_native_one(tmp_path):
    """A growing `receipts run` log supersedes its earlier receipt by the header's run key (the launcher's
    run_id) whatever the child printed: a third-party child must not lose that."""
    from receipts.pipeline import build_receipt, parse_log
    from receipts.schema.model import IdentityClaim, SourceFile
    from receipts.schema.registry import load_registry
    from receipts.store.rows import run_key

    real = realdata("logs", "nanochat_pr147_a100_mfu.txt")
    result = run(command=[sys.executable, "-c", _REPLAY, str(real), "0"], run_dir=tmp_path / "r", ingest=False,
                 environ=_env(), cwd=REPO)
    parsed = parse_log(result.log_path)
    assert parsed.source_format == "receipt+nanochat"
    receipt = build_receipt(parsed, source=SourceFile(str(result.log_path), "0" * 64, 1, parsed.source_format, "log"),
                            claim=IdentityClaim(), registry=load_registry(None), run_name="r")
    header = _records(result.log_path)[0]
    assert run_key(receipt) == header["run_id"]


def test_format_flag_names_the_childs_format_under_a_header(tmp_path):
    from receipts.pipeline import parse_log

    real = realdata("logs", "nanochat_pr147_a100_mfu.txt")
    result = run(command=[sys.executable, "-c", _REPLAY, str(real), "0"], run_dir=tmp_path / "r", ingest=False,
                 claim=IdentityClaim(preset="toy_fsdp2_v1"), environ=_env(), cwd=REPO)
    forced = parse_log(result.log_path, "nanochat")       # `receipts ingest --format nanochat run.log`
    assert forced.source_format == "receipt+nanochat" and forced.claim.preset == "toy_fsdp2_v1"
    assert forced.steps["step"].to_list() == list(range(4, 11))
    assert parse_log(real, "nanochat").source_format == "nanochat"   # no header: the plain format, as before


def test_a_child_that_died_before_its_first_step_keeps_the_header_and_says_why(tmp_path):
    from receipts.errors import InputError
    from receipts.pipeline import parse_log

    # Megatron's arguments banner, then the crash: detected as Megatron, but no iteration line
    script = ("print('------------------------ arguments ------------------------')\n"
              "print('  tensor_model_parallel_size ...................... 2')\n"
              "raise SystemExit('CUDA out of memory')\n")
    result = run(command=[sys.executable, "-c", script], run_dir=tmp_path / "r", ingest=False,
                 claim=IdentityClaim(preset="toy_fsdp2_v1"),
                 environ=_env(), cwd=REPO)
    parsed = parse_log(result.log_path)
    assert parsed.source_format == "receipt" and parsed.steps.height == 0 and parsed.claim.preset == "toy_fsdp2_v1"
    assert "looks like megatron but gave no steps" in parsed.warnings[0]
    assert parsed.ended_early == "the command exited with code 1"
    with pytest.raises(InputError, match="no Megatron iteration lines"):
        parse_log(result.log_path, "megatron")   # named by the user: the mismatch is the answer


def test_db_status_waits_for_the_store_lock_too(tmp_path):
    db = tmp_path / "s.duckdb"
    assert subprocess.run([RECEIPTS, "--db", str(db), "db", "init"], capture_output=True).returncode == 0
    holder = duckdb.connect(str(db))
    try:
        proc = subprocess.run([RECEIPTS, "--db", str(db), "db", "status"], capture_output=True, text=True,
                              env=_env(RECEIPTS_LOCK_WAIT_S="0.5"))
    finally:
        holder.close()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"held by PID {os.getpid()}" in proc.stderr and "gave up after waiting 0.5 s" in proc.stderr


def test_two_launches_in_one_millisecond_on_one_host_stay_two_runs(tmp_path):
    """The run key is the header's run_id, which the launcher always writes: two jobs whose headers share
    hostname and started_at (an array job, eight single-GPU runs started together) must not supersede
    each other; RECEIPTS_RUN_ID names the run when the scheduler wants to (a requeued job's restarts)."""
    logs = []
    for name, env in (("first", {}), ("second", {}), ("named", {"RECEIPTS_RUN_ID": "slurm-4242"})):
        result = run(command=[sys.executable, "-c", "print('step 1/2 | loss: 1.0 | dt: 10.0ms')"],
                     run_dir=tmp_path / name, ingest=False,
                     claim=IdentityClaim("h200-device-x2", "toy_fsdp2_v1", "fsdp2/no-compile"), cwd=REPO, environ=_env(**env))
        logs.append(result.log_path)
    headers = [json.loads(p.read_text().splitlines()[0][len("RECEIPT "):]) for p in logs]
    assert headers[0]["run_id"] != headers[1]["run_id"] and len(headers[0]["run_id"]) == 32
    assert headers[2]["run_id"] == "slurm-4242"
    # Same host, same millisecond: rewrite the second header's started_at to the first's, then ingest both.
    text = logs[1].read_text().replace(headers[1]["started_at"], headers[0]["started_at"])
    logs[1].write_text(text)
    db = tmp_path / "s.duckdb"
    done = subprocess.run([RECEIPTS, "--db", str(db), "ingest", str(logs[0]), str(logs[1])], capture_output=True,
                          text=True, cwd=REPO, env=_env())
    assert done.returncode == 0, done.stderr
    listed = json.loads(subprocess.run([RECEIPTS, "--db", str(db), "list", "--json"], capture_output=True, text=True,
                                       cwd=REPO, env=_env()).stdout)
    assert sorted(r["run_name"] for r in listed) == ["first", "second"]
