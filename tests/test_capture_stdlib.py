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
        "from receipts.capture import recorder\n"
        "from receipts.launch import launcher\n"
        "from receipts.ingest.topology import parse_text\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_receipt_format_has_one_owner():
    """Its version and its line encoding live in schema/receipt_format.py only: no module writes
    `"RECEIPT " + json.dumps(...)` or compares a record version to a literal."""
    import re
    from pathlib import Path

    from receipts.schema import receipt_format

    assert receipt_format.RECORD_VERSION in receipt_format.SUPPORTED_VERSIONS
    root = Path(receipt_format.__file__).resolve().parents[1]
    owners = []
    product = [p for d in ("capture", "ingest", "schema", "store", "analysis", "cli", "dashboards", "pipeline")
               for p in (root / d).rglob("*.py")] + [root / "lifecycle.py"]
    for path in product:
        text = path.read_text()
        if re.search(r'"RECEIPT " \+ json\.dumps|pl\.col\("v"\) != \d|RECORD_VERSION = \d', text):
            owners.append(path.relative_to(root).as_posix())
    assert owners == ["schema/receipt_format.py"]
