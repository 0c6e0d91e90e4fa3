"""Every install line names the distribution `gpu-receipts`, never `receipts`.

The import package and the command are `receipts`, but the PyPI project called `receipts` is an unrelated
one ("Verify web app receipts", 2014): a README or workflow line that installs the name `receipts` puts a
stranger's code in a CI gate. pyproject.toml names the distribution; this test holds the README, docs/,
the workflows' RECEIPTS_SPEC and every message in the source that tells a user what to install to it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
DIST = "gpu-receipts"
WORKFLOWS = sorted((REPO / "docs" / "workflows").glob("*.yml"))
# `pip install X` in prose, code blocks, YAML and error messages; the arguments end at a closing backtick,
# a quote that ends a Python string, a comment or a sentence.
PIP_INSTALL = re.compile(r"""pip3?["']?\s+install\s+([^`#\n;)]*)""")


def _texts() -> list[Path]:
    skip = ("tests/data", ".venv", "build", "dist", "benchmarks/results", ".pkgroot")
    texts = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *WORKFLOWS]
    code = [p for p in sorted(REPO.rglob("*.py")) if not str(p.relative_to(REPO)).startswith(skip)]
    return [p for p in [*texts, *code] if p.exists()]


def _requirements(args: str) -> list[str]:
    """The requirement arguments of one `pip install ...` (options, paths and variables left out)."""
    try:
        tokens = shlex.split(args, posix=True)
    except ValueError:  # an unbalanced quote in prose: split on blanks
        tokens = args.split()
    out, skip_next = [], False
    for token in tokens:
        token = token.strip("'\"`,.")
        if skip_next:
            skip_next = False
            continue
        if token in ("-r", "-c", "-e", "--index-url", "--extra-index-url", "-i", "--prefix", "--target", "-t"):
            skip_next = token != "-e"
            continue
        if not token or token.startswith(("-", ".", "/", "$", "{", "<")) or "/" in token.split("[")[0]:
            continue
        out.append(token)
    return out


def test_pyproject_names_the_free_distribution_and_keeps_the_command():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["name"] == DIST
    assert project["scripts"] == {"receipts": "receipts.cli.main:main"}


def test_no_install_line_names_the_stranger_package():
    wrong = []
    seen = 0
    for path in _texts():
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            for match in PIP_INSTALL.finditer(line):
                for token in _requirements(match.group(1)):
                    try:
                        name = canonicalize_name(Requirement(token).name)
                    except InvalidRequirement:
                        continue
                    seen += name == DIST
                    if name == "receipts":
                        wrong.append(f"{path.relative_to(REPO)}:{n}: {match.group(0).strip()}")
    assert not wrong, "install `gpu-receipts`, not PyPI's unrelated `receipts`:\n" + "\n".join(wrong)
    assert seen >= 4, seen  # the checker reads the lines it means to: the extras' messages in cli/ at least


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_the_workflows_install_a_pinned_gpu_receipts(path):
    """Until gpu-receipts is on PyPI a workflow installs a commit pinned by its full SHA, or a wheel; never a
    branch, and never a bare name another project could own. The spec is the team's repository variable, and
    the workflow's own guard step, run here on good and bad specs, refuses anything else before pip runs."""
    doc = yaml.safe_load(path.read_text())
    assert doc["env"]["RECEIPTS_SPEC"] == "${{ vars.RECEIPTS_SPEC }}"
    steps = [step for job in doc["jobs"].values() for step in job["steps"]]
    names = [step.get("name", "") for step in steps]
    guard = steps[names.index("Check RECEIPTS_SPEC pins gpu-receipts")]
    assert names.index("Check RECEIPTS_SPEC pins gpu-receipts") < next(
        i for i, n in enumerate(names) if n.startswith("Install receipts"))

    def guarded(spec: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-e", "-c", guard["run"]], env={**os.environ, "RECEIPTS_SPEC": spec},
                              capture_output=True, text=True, timeout=30)

    sha = "6410bb85a59f89dad8be517e2cb37bfd0165449d"
    for good in ("gpu-receipts==0.9.0", f"gpu-receipts @ git+https://github.com/acme/receipts@{sha}",
                 "gpu-receipts @ https://wheels.example/gpu_receipts-0.9.0-py3-none-any.whl"):
        assert canonicalize_name(Requirement(good).name) == DIST
        assert guarded(good).returncode == 0, good
    for bad in ("", "receipts", "receipts==0.2.10", "gpu-receipts", "gpu-receipts>=0.9",
                "gpu-receipts @ git+https://github.com/acme/receipts@main",
                f"gpu-receipts @ git+https://github.com/OWNER/receipts@{sha[:12]}",
                f"receipts @ git+https://github.com/acme/receipts@{sha}"):
        done = guarded(bad)
        assert done.returncode == 1 and "::error::" in done.stdout and "RECEIPTS_SPEC" in done.stdout, bad
    scripts = "\n".join(step.get("run", "") for step in steps)
    installs = [m.group(0) for m in PIP_INSTALL.finditer(scripts)]
    assert installs and all('"$RECEIPTS_SPEC"' in line for line in installs), installs


def test_the_readme_says_how_to_install_it():
    """The front page's install lines work today (from a clone: the distribution is not on PyPI yet) and name
    the distribution for when it is."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "not on PyPI yet" in readme and "pip install .  " in readme and "pip install '.[dashboard]'" in readme
    assert "pip install gpu-receipts" in readme
    assert "pip install 'gpu-receipts[dashboard]'" in readme
