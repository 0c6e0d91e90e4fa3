"""The repository root is the import package `receipts` (pyproject.toml).

Importing receipts.* from the root loads one copy of each module, under its receipts.* name. Static tools
resolve `receipts.*` from a checkout without installing, through the link .pkgroot/receipts -> the root
(mypy_path in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _python(code: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_from_the_root_receipts_has_one_copy_of_each_module():
    done = _python("import receipts.errors, receipts.ingest.nanochat as n, sys\n"
                   "assert n.InputError is receipts.errors.InputError\n"
                   "print(sorted(m for m in sys.modules if m.split('.')[0] in "
                   "('errors', 'ingest', 'schema', 'analysis', 'store')))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_checkout_resolves_receipts_without_installing():
    # -I: isolated, no site-packages, so no editable install's finder: only the .pkgroot link can answer.
    done = _python("import sys; sys.path.insert(0, '.pkgroot')\n"
                   "import receipts.errors, receipts.schema.receipt_format as f\n"
                   "import os; print(os.path.realpath(receipts.errors.__file__)); print(f.RECORD_VERSION)", "-I")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == str((REPO / "errors.py").resolve())


def test_no_source_file_is_over_700_lines():
    """One module, one job: a file that grows past a sitting's reading has grown a second job. Tests and
    benchmarks too (a test module is read as often as the code it holds to account)."""
    tracked = subprocess.run(["git", "ls-files", "*.py", "*.sql", "*.sh"], cwd=REPO, capture_output=True, text=True)
    if tracked.returncode != 0:  # not a git checkout (an unpacked sdist): every file under the tree instead
        paths = [p for p in REPO.rglob("*.py") if ".venv" not in p.parts]
    else:
        paths = [REPO / name for name in tracked.stdout.split()]
    long = {p.relative_to(REPO).as_posix(): n for p in paths if p.exists()
            and (n := len(p.read_text(errors="replace").splitlines())) > 700}
    assert not long, long


def test_every_test_the_slow_tier_names_exists():
    """A renamed test would leave the slow list naming nothing and quietly move into the fast tier."""
    from slow_tier import SLOW_MODULES, SLOW_TESTS

    for module in SLOW_MODULES:
        assert (REPO / "tests" / module).exists(), f"tests/slow_tier.py names {module}, which is gone"
    for module, names in SLOW_TESTS.items():
        assert module not in SLOW_MODULES, f"{module} is slow as a whole and test by test"
        text = (REPO / "tests" / module).read_text()
        for name in names:
            assert f"def {name}(" in text, f"tests/{module} has no {name}"
