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

import pytest

from receipts.capture.launcher import run
from receipts.errors import UsageError
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
                 host_lineage="h200-device-x2", preset="toy_fsdp2_v1", regime="fsdp2/no-compile", tags=("v19c",),
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


def test_missing_command_is_one_clear_line_and_exit_2(tmp_path):
    with pytest.raises(UsageError, match="command not found: no-such-cmd-xyz"):
        run(command=["no-such-cmd-xyz"], run_dir=tmp_path / "r", ingest=False)
    proc = subprocess.run([RECEIPTS, "--db", str(tmp_path / "s.duckdb"), "run", "--no-ingest", "--run-dir",
                           str(tmp_path / "r2"), "--", "no-such-cmd-xyz", "--flag"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") == 0
    assert "command not found: no-such-cmd-xyz" in proc.stderr
    assert not (tmp_path / "r2" / "run.log").exists()


_HANDLER = """
import signal, sys, time
def handler(signum, frame):
    print(f"got signal {signum}", flush=True)
    sys.exit(3)
signal.signal(signal.SIGINT, handler)
signal.signal(signal.SIGTERM, handler)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_are_forwarded_to_the_child(tmp_path, sig):
    run_dir = tmp_path / "r"
    proc = subprocess.Popen([RECEIPTS, "--db", str(tmp_path / "s.duckdb"), "run", "--no-ingest", "--quiet",
                             "--run-dir", str(run_dir), "--", sys.executable, "-c", _HANDLER],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = run_dir / "run.log"
    deadline = time.monotonic() + 30
    while not (log.exists() and "ready" in log.read_text().splitlines()):  # the header quotes the script
        assert time.monotonic() < deadline and proc.poll() is None, "child never got ready"
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    assert f"got signal {int(sig)}" in log.read_text()
    assert _records(log)[-1]["exit_code"] == 3


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
                 db_url=str(tmp_path / "s.duckdb"), host_lineage="h200-device-x2", preset="toy_fsdp2_v1",
                 regime="fsdp2/no-compile", run_name="cpu_smoke", environ=_env(), cwd=REPO)
    assert result.exit_code == 0 and result.ingest_error is None
    (outcome,) = result.ingested
    assert outcome.created and outcome.run_name == "cpu_smoke" and outcome.kind == "receipt"


def test_git_revision_outside_a_checkout_comes_from_the_ci_variable(tmp_path):
    from receipts.capture.provenance import git_provenance

    copied_tree = tmp_path / "job"  # a tree copied without .git, as schedulers and containers do
    copied_tree.mkdir()
    assert git_provenance(cwd=copied_tree, environ={}) == {"git_rev": None, "git_status": "not a git checkout"}
    sha = "0123456789abcdef0123456789abcdef01234567"
    found = git_provenance(cwd=copied_tree, environ={"GITHUB_SHA": sha, "GIT_COMMIT": "other"})
    assert found == {"git_rev": sha, "git_status": "not a git checkout; revision from $GITHUB_SHA"}
    # Inside a checkout, the checkout's own HEAD wins over any variable.
    repo = Path(__file__).resolve().parents[1]
    if (repo / ".git").exists():
        own = git_provenance(cwd=repo, environ={"GITHUB_SHA": sha})
        assert own["git_rev"] != sha and len(own["git_rev"]) == 40
