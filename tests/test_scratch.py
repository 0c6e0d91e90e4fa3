"""Scratch folders (receipts/scratch.py): removed as the step ends, and what a killed ingest left is removed by the
next one on the same host; a live process's folder, another host's and anything else in the temp dir stay."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REALDATA, REPO
from receipts.errors import ScratchFull
from receipts.scratch import _HOST, remove_orphans, scratch_dir


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)  # exited: no process has this pid now (reuse within the test is vanishingly rare)


def test_a_scratch_folder_is_removed_when_its_step_ends_or_fails(tmp_path):
    with scratch_dir("steps", tmp_path) as folder:
        (folder / "part.arrow").write_bytes(b"x")
        assert folder.name.startswith(f"receipts-steps-{_HOST}-{os.getpid()}-")
    assert not folder.exists()
    try:
        with scratch_dir("bulk", tmp_path) as folder:
            raise ValueError("the write failed")
    except ValueError:
        pass
    assert not folder.exists()


def test_only_a_dead_process_of_this_host_loses_its_folder(tmp_path):
    dead = tmp_path / f"receipts-steps-{_HOST}-{_dead_pid()}-abc123"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f"receipts-steps-{_HOST}-{sleeper.pid}-def456"
        other_host = tmp_path / f"receipts-steps-{_HOST}x-{_dead_pid()}-ghi789"
        not_ours = tmp_path / "receipts-steps-notes"
        for folder in (dead, live, other_host, not_ours):
            folder.mkdir()
            (folder / "rows.arrow").write_bytes(b"x")
        assert remove_orphans(tmp_path) == [dead]
        assert not dead.exists() and live.exists() and other_host.exists() and not_ours.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert remove_orphans(tmp_path) == [live]  # its process gone now


def _ingest_caught_spilling(tmp_path: Path, **popen) -> tuple[subprocess.Popen, Path, list[str], dict]:
    """A real `receipts ingest` of a 330,000-line log with TMPDIR in tmp_path, returned once its step rows are on
    disk: (the process, the scratch parent, the command line before the file, the environment)."""
    log = tmp_path / "long.log"
    body = [line for line in (REALDATA / "logs" / "sft_run_gtx1660.log").read_text().splitlines()
            if line.startswith("step ")]
    with open(log, "w") as f:
        for rep in range(2500):
            f.write("\n".join(f"step {rep * len(body) + i + 1:05d}{line[10:]}" for i, line in enumerate(body)) + "\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    cli = [sys.executable, "-m", "receipts.cli.main", "--db", str(tmp_path / "r.duckdb")]
    proc = subprocess.Popen([*cli, "ingest", str(log)], env=env, cwd=REPO, **popen)
    deadline = time.monotonic() + 120
    while not any(p.name.startswith("receipts-steps-") and any(p.iterdir()) for p in scratch.iterdir()):
        assert proc.poll() is None and time.monotonic() < deadline, "the ingest ended before its rows were spilled"
        time.sleep(0.02)
    return proc, scratch, cli, env


def test_the_next_ingest_removes_what_a_killed_one_left(tmp_path):
    # A real ingest SIGKILLed while its step rows are on disk, then another ingest on this host.
    killed, scratch, cli, env = _ingest_caught_spilling(tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    left = [p for p in scratch.iterdir() if p.name.startswith("receipts-")]
    assert left, "SIGKILL runs no cleanup: the scratch folder is still there"
    done = subprocess.run([*cli, "ingest", str(REALDATA / "logs" / "sft_run_gtx1660.log")], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not any(p.exists() for p in left)
    assert [p for p in scratch.iterdir() if p.name.startswith("receipts-")] == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_terminated_ingest_stops_as_ctrl_c_does(tmp_path, sig):
    # A scheduler's time limit (SIGTERM) or a closed terminal (SIGHUP) mid-parse: the file in progress is not
    # stored, its scratch folder goes, the summary says which signal, and the exit code is 128 + its number.
    proc, scratch, cli, env = _ingest_caught_spilling(tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                      text=True)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (f"0 ingested, 0 unchanged, 0 failed; terminated ({sig.name}): the files "
                                            "before it are stored, the one in progress is not")
    assert [p.name for p in scratch.iterdir() if p.name.startswith("receipts-")] == []
    listed = subprocess.run([*cli, "list", "--json"], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stderr


def test_a_full_temp_disk_is_named_with_its_remedy(tmp_path, monkeypatch):
    # Seen with TMPDIR on a 2 MiB tmpfs: 'FAILED nc.log: OSError: No space left on device (os error 28) (run with
    # --debug for the traceback)', naming neither the folder nor what to do.
    monkeypatch.setattr(shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(1 << 30, 1 << 30, 4096))
    for refused in (OSError(errno.ENOSPC, "No space left on device"),  # Python's own write
                    OSError("No space left on device (os error 28)")):  # polars' write_ipc / write_parquet
        with pytest.raises(ScratchFull) as info:
            with scratch_dir("steps", tmp_path):
                raise refused
        assert info.value.__cause__ is refused
        assert str(info.value).startswith(f"no space left on the disk of {tmp_path} (the temp dir)")
        assert "point TMPDIR at a larger disk" in str(info.value)
    # The same error with room left here is another disk's (the store's): passed on as it is.
    monkeypatch.setattr(shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(1 << 40, 1 << 30, 1 << 39))
    with pytest.raises(OSError, match="os error 28"):
        with scratch_dir("steps", tmp_path):
            raise OSError("No space left on device (os error 28)")
    assert [p for p in tmp_path.iterdir()] == []
