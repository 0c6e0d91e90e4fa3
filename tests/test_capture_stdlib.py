"""The launcher's header and the in-training recorder must import on a node whose Python has torch but
not the dataframe stack (the GPU machine's python3 has no polars/duckdb): they are written before the
child's first import and must never be the reason a run has no receipt."""

from __future__ import annotations

import subprocess
import sys

BLOCKED = ("polars", "duckdb", "pyarrow", "sqlalchemy", "streamlit")


def test_launcher_and_recorder_import_without_the_dataframe_stack():
    code = (
        "import sys\n"
        f"for m in {BLOCKED!r}: sys.modules[m] = None\n"
        "from receipts.capture import launcher, recorder\n"
        "from receipts.ingest.topology import parse_text\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
