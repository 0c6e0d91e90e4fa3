"""The wheel installs one import package, `receipts`, with its data files, and the CLI starts; the slim
install leaves the dashboard's packages out, and `receipts --help` imports none of the heavy libraries."""

from __future__ import annotations

import email.parser
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from conftest import built_once

REPO = Path(__file__).resolve().parents[1]


NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "*.duckdb*",
                                    ".pytest_cache", ".hypothesis", ".import_linter_cache", ".mypy_cache", "runs")


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    # Built from a copy of the sources: a checkout's stale build/ folder would ship modules long deleted.
    # --no-isolation builds with this environment's setuptools (the [test] extra pins >=77,
    # which the SPDX `license = "MIT"` needs; a stock venv ships an older one). Built once per test run.
    def build(out: Path) -> None:
        source = tmp_path_factory.mktemp("src") / "receipts"
        shutil.copytree(REPO, source, ignore=NOT_SOURCE, symlinks=True)
        built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
                                str(source)], capture_output=True, text=True)
        assert built.returncode == 0, built.stderr[-4000:]

    out = built_once(tmp_path_factory, "wheel", build)
    return next(out.glob("gpu_receipts-*.whl"))  # the distribution gpu-receipts, the import package receipts


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs(tmp_path, wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.startswith("gpu_receipts-")}
    assert top == {"receipts"}, top  # never generic top-level modules such as `schema`
    for data in ("receipts/schema/registry.toml", "receipts/schema/kernel_categories.toml",
                 "receipts/sql/steady_steps_many.sql", "receipts/dashboards/app.py"):
        assert data in names, data
    assert not any(n.startswith("receipts/tests/") for n in names)
    # The package list is computed (pyproject.toml's packages.find), never kept by hand: every folder of the
    # source tree with an __init__.py ships.
    packages = {str(init.parent.relative_to(REPO)) for init in REPO.rglob("__init__.py")
                if not init.relative_to(REPO).parts[0].startswith((".", "build", "dist", "tests", "benchmarks"))}
    shipped = {n.removeprefix("receipts/").rpartition("/")[0] or "." for n in names if n.endswith("/__init__.py")}
    assert shipped == packages, shipped ^ packages

    # without PYTHONPATH: a checkout run as `PYTHONPATH=.pkgroot pytest` would import itself, not the wheel, and
    # pip would take .pkgroot's egg-info for the distribution already installed (no console script then)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    pip = venv / "bin" / "pip"
    subprocess.run([str(pip), "install", "--no-deps", "--quiet", str(wheel)], check=True, env=env)
    # Dependencies come from the test environment's site-packages (a plain path: the editable
    # install of this checkout there is a .pth finder, which a path entry does not activate).
    fresh_site = next((venv / "lib").glob("python*/site-packages"))
    (fresh_site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    help_text = subprocess.run([str(venv / "bin" / "receipts"), "--help"], check=True, capture_output=True, text=True,
                               cwd=tmp_path, env=env).stdout
    assert "ingest" in help_text and "compare" in help_text
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import receipts.ingest, receipts.schema.model as m;"
                            "print(m.__file__)"], check=True, capture_output=True, text=True, cwd=tmp_path,
                           env=env).stdout
    assert str(fresh_site) in where


def _requires(wheel: Path) -> dict[str, set[str]]:
    """The wheel's Requires-Dist, as {package name: the extras that pull it ('' = always)}."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        message = email.parser.Parser().parsestr(z.read(meta).decode())
    out: dict[str, set[str]] = {}
    for req in message.get_all("Requires-Dist") or []:
        name = re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower()
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", req)
        out.setdefault(name, set()).add(extra.group(1) if extra else "")
    return out


@pytest.mark.slow
def test_the_slim_install_leaves_the_dashboard_out(wheel):
    requires = _requires(wheel)
    for package in ("streamlit", "altair"):
        assert requires.get(package) == {"dashboard"}, (package, requires.get(package))
    for package in ("duckdb", "polars", "typer", "pyyaml"):  # what the gate and check need
        assert "" in requires.get(package, set()), package
    assert requires.get("scipy") == {"test"}  # only the reference the standard-library distributions are tested to
    assert "" not in requires.get("torch", {"capture"})


HEAVY = ("polars", "duckdb", "streamlit", "altair", "scipy", "sqlalchemy", "numpy", "pyarrow")


def _modules_after(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_importing_the_cli_imports_no_heavy_library():
    loaded = _modules_after("import receipts.cli.main")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_import_no_heavy_library(flag):
    loaded = _modules_after("import contextlib, io, sys\nfrom receipts.cli.main import main\n"
                            f"sys.argv = ['receipts', '{flag}']\n"
                            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
                            "    main()")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_a_command_loads_only_its_own_module():
    loaded = _modules_after("import contextlib, io, sys\nfrom receipts.cli.main import main\n"
                            "sys.argv = ['receipts', 'gate', '--help']\n"
                            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
                            "    main()")
    assert "receipts.cli.gate_cmd" in loaded
    assert not {"receipts.cli.ingest_cmd", "receipts.cli.dashboard_cmd", "streamlit"} & loaded


def test_the_lazy_help_shows_what_each_loaded_command_says():
    """`receipts --help` reads each command's summary from source (cli/main.py _summary, no import): it must
    be the text the loaded command itself shows, and every command module must be listed."""
    import click
    import typer.main

    from receipts.cli.main import COMMAND_MODULES, COMMANDS, _summary, app

    assert {module for module, _ in COMMANDS.values()} == set(COMMAND_MODULES), \
        "every command module needs its commands in cli/main.py COMMANDS (the lazy --help lists them)"
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    for name, (module, attr) in COMMANDS.items():
        real = group.get_command(ctx, name)
        first_paragraph = " ".join((real.help or "").split("\n\n")[0].split())
        assert first_paragraph and _summary(module, attr) == first_paragraph, (name, module, attr)
    assert set(group.list_commands(ctx)) == set(COMMANDS)


def test_dashboard_without_streamlit_says_how_to_install_it(tmp_path):
    # sys.modules[name] = None is how Python spells "not installed" to importlib.util.find_spec.
    code = ("import sys\nsys.modules['streamlit'] = None\nfrom receipts.cli.main import main\n"
            f"sys.argv = ['receipts', 'dashboard', '--db', {str(tmp_path / 'x.duckdb')!r}]\nmain()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "streamlit" in done.stderr and "pip install 'gpu-receipts[dashboard]'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["gate", "--help"], ["list", "--db", "{tmp}/none.duckdb"]])
def test_the_cli_runs_without_the_click_package(argv, tmp_path):
    """Typer vendors click now, so the slim install has no `click` package: a CLI that imports it crashes on
    start (found by mypy: cli/main.py imported click for its LazyGroup's types)."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code = ("import sys\nsys.modules['click'] = None\nfrom receipts.cli.main import main\n"
            f"sys.argv = ['receipts', *{argv!r}]\nmain()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 2), done.stderr  # `list` on a missing store: one error line, exit 2


@pytest.mark.slow
def test_the_version_has_one_source(wheel):
    """pyproject.toml takes the version from receipts/__init__.py (dynamic): the wheel, `receipts --version` and
    the package agree, and pyproject.toml states no second copy."""
    from receipts import __version__

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        version = email.parser.Parser().parsestr(z.read(meta).decode())["Version"]
    assert version == __version__
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
