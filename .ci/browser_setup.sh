#!/usr/bin/env bash
# Installs Debian's chromium + chromium-driver for the @pytest.mark.browser tests.
# Playwright drives this system browser (executable_path=/usr/bin/chromium); it never downloads one.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
chromium --version
