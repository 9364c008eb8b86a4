#!/usr/bin/env bash
# Creates .venv (if missing) and installs Dauntless into it, editable.
# Usage: scripts/setup-venv.sh [EXTRAS]   e.g. scripts/setup-venv.sh test
# pip's output goes to .venv/install.log and is shown only if the install fails.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-examples}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
log=.venv/install.log
: > "$log"
pip_install() {
  if ! .venv/bin/python -m pip install --disable-pip-version-check "$@" >>"$log" 2>&1; then
    echo "pip install $* failed; the end of $log:" >&2
    grep -v '^WARNING: Location' "$log" | tail -n 40 >&2
    exit 1
  fi
}
echo "Installing Dauntless and its dependencies into .venv (log: $log) ..."
# The CPU build of PyTorch that these machines carry; pinned exactly for CI and tests.
pip_install "torch==2.13.0"
# The framework versions the integrations were tested with (README: framework table).
pip_install -e ".[${extras}]" -c scripts/constraints-frameworks.txt
# DeepSpeed (the deepspeed extra) builds at install time against the torch above:
#   .venv/bin/pip install --no-build-isolation 'deepspeed>=0.14,<1'
if [ "$(.venv/bin/python -c 'import torch; print(torch.__version__.split("+")[0])')" != "2.13.0" ]; then
  echo "an extra replaced torch 2.13.0; see $log" >&2
  exit 1
fi
# The WebUI (npm ci + copy into the package); without npm the master says it was not built.
bash scripts/build-webui.sh || echo "warning: the WebUI was not built (see above); the master serves a page saying so" >&2
