"""`receipts dashboard` served as a user starts it and driven in Debian's headless Chromium: what the browser
test (tests/test_dashboard_browser.py) and the first-paint benchmark (benchmarks/bench_dashboard.py) share.
No pytest here: the benchmark imports it too."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
CHARTS = ".vega-embed canvas, .vega-embed svg.marks"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_dashboard(db: str, port: int, timeout_s: float = 60.0):
    """`receipts dashboard` as a user starts it; yields the base URL once /_stcore/health answers."""
    exe = Path(sys.executable).with_name("receipts")
    cmd = [str(exe) if exe.exists() else sys.executable, *([] if exe.exists() else ["-m", "receipts.cli.main"]),
           "dashboard", "--db", db, "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"dashboard exited {proc.returncode}: {proc.stdout.read().decode()[-2000:]}")
            with contextlib.suppress(OSError):
                if urllib.request.urlopen(base + "/_stcore/health", timeout=1).read() == b"ok":
                    break
            if time.monotonic() > deadline:
                raise TimeoutError("dashboard did not answer /_stcore/health")
            time.sleep(0.2)
        yield base
    finally:
        os.killpg(proc.pid, 15)  # the streamlit child too: it runs in our own new session
        proc.wait(timeout=20)


@contextlib.contextmanager
def chromium_page(profile_dir: Path, width: int = 1500, height: int = 2600):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile_dir), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": width, "height": height})
        try:
            yield context.new_page()
        finally:
            context.close()
