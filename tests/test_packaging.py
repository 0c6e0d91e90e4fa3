"""The wheel installs one import package, `receipts`, with its data files, and the CLI starts."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs(tmp_path):
    # --no-isolation builds with this environment's setuptools (the [test] extra pins >=77,
    # which the SPDX `license = "MIT"` needs; a stock venv ships an older one).
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"),
                            str(REPO)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-4000:]
    wheel = next((tmp_path / "dist").glob("receipts-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.startswith("receipts-")}
    assert top == {"receipts"}, top  # never generic top-level modules such as `schema`
    for data in ("receipts/schema/registry.toml", "receipts/schema/kernel_categories.toml",
                 "receipts/sql/steady_state.sql", "receipts/dashboards/app.py"):
        assert data in names, data
    assert not any(n.startswith("receipts/tests/") for n in names)

    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = venv / "bin" / "pip"
    subprocess.run([str(pip), "install", "--no-deps", "--quiet", str(wheel)], check=True)
    # Dependencies come from the test environment's site-packages (a plain path: the editable
    # install of this checkout there is a .pth finder, which a path entry does not activate).
    fresh_site = next((venv / "lib").glob("python*/site-packages"))
    (fresh_site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    help_text = subprocess.run([str(venv / "bin" / "receipts"), "--help"], check=True, capture_output=True, text=True,
                               cwd=tmp_path).stdout
    assert "ingest" in help_text and "compare" in help_text
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import receipts.ingest, receipts.schema.model as m;"
                            "print(m.__file__)"], check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    assert str(fresh_site) in where
