"""`receipts dashboard` as a server process: it binds this machine only unless told otherwise, and a
SIGTERM to it stops the Streamlit server too (it used to be left running, re-parented)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.cli_helpers import cli

pytest.importorskip("streamlit")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp writes them) listening on `port`."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.rsplit(":", 1)
            if int(hexport, 16) == port and state == "0A":  # 0A = LISTEN
                out.add(addr)
    return out


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def test_binds_localhost_and_sigterm_stops_the_server(tmp_path):
    db = str(tmp_path / "d.duckdb")
    assert cli(db, "db", "init").exit_code == 0
    port = _free_port()
    exe = Path(sys.executable).with_name("receipts")
    proc = subprocess.Popen([str(exe), "dashboard", "--db", db, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).read() == b"ok":
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "dashboard did not start"
            time.sleep(0.2)
        assert _listening(port) == {"0100007F"}  # 127.0.0.1 only: no 0.0.0.0, no ::
        server = _children(proc.pid)
        assert server, "the Streamlit server runs as a child of `receipts dashboard`"
        proc.send_signal(signal.SIGTERM)  # to the parent only, as `kill -TERM` would
        proc.wait(timeout=30)
        deadline = time.monotonic() + 15
        while any(Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().split()[2]
                  for p in server if Path(f"/proc/{p}/stat").exists()):
            assert time.monotonic() < deadline, "the Streamlit server outlived `receipts dashboard`"
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
