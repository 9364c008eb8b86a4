#!/usr/bin/env bash
# Installs Dauntless with its test dependencies into .venv and runs the whole test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh tests/unit -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh test
# Debian's Chromium for the WebUI browser tests (tests/integration/test_webui.py); where it
# cannot be installed those tests are skipped and say why.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing Debian's chromium for the WebUI tests (log: .venv/chromium-install.log) ..."
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } \
    >.venv/chromium-install.log 2>&1 \
    || echo "warning: chromium could not be installed; the WebUI browser tests will be skipped" >&2
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
