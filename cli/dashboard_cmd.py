"""`receipts dashboard`: the Streamlit dashboard over a store, read-only."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

import typer

from receipts.cli.context import handle_errors, settings
from receipts.errors import UsageError
from receipts.store import open_store

APP = Path(__file__).resolve().parents[1] / "dashboards" / "app.py"
# The slim install (`pip install gpu-receipts`, what a CI gate needs) leaves these out: the [dashboard] extra.
DASHBOARD_PACKAGES = ("streamlit", "altair")


def register(app: typer.Typer) -> None:
    app.command("dashboard")(dashboard)


@handle_errors
def dashboard(
    ctx: typer.Context,
    db: Optional[str] = typer.Option(None, "--db", help="Store to show (default: the global --db / RECEIPTS_DB)."),
    port: int = typer.Option(8501, "--port", help="Port to serve on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind. The dashboard has no login: it listens "
                                                         "on this machine only unless you name another address "
                                                         "(0.0.0.0: every interface)."),
    headless: bool = typer.Option(True, "--headless/--open-browser", help="Serve without opening a browser."),
) -> None:
    """Serve the Streamlit dashboard: lanes, receipt, anatomy, compare, lane history.

    Example: receipts dashboard --db runs.duckdb --port 8501
    """
    missing = [name for name in DASHBOARD_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(f"the dashboard needs {' and '.join(missing)}, which the slim install leaves out: "
                         "pip install 'gpu-receipts[dashboard]'")
    url = db or settings(ctx).db
    with open_store(url, read_only=True):
        pass  # the dashboard only reads: refuse a missing store or an unreadable one here, in one line
    # serve = `streamlit run` with the views imported before the port opens (the first visit is not a cold import)
    cmd = [sys.executable, "-m", "receipts.dashboards.serve", str(APP), "--server.port", str(port),
           "--server.address", host, "--server.headless", str(headless).lower(),
           "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
           "--client.toolbarMode", "viewer",  # no Deploy button, no developer menu: a read-only report
           "--", "--db", url]
    raise typer.Exit(serve(cmd))


FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def serve(cmd: list[str]) -> int:
    """Run the server as a child and pass it the signals we get: `kill -TERM <receipts dashboard>` used to leave
    the Streamlit server running, re-parented. Its exit code becomes ours."""
    child = subprocess.Popen(cmd, env=os.environ.copy())
    previous = {sig: signal.signal(sig, lambda signum, _frame: child.send_signal(signum)) for sig in FORWARDED}
    try:
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if child.poll() is None:
            child.terminate()
            child.wait(timeout=10)
