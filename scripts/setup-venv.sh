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
# DeepSpeed (the deepspeed and test extras) is a source distribution whose setup.py imports
# torch, so it is built against the torch above without build isolation (no C++ op is
# compiled: DS_BUILD_OPS is unset), before the extras would try it in an isolated build.
case ",${extras}," in
  *,test,*|*,deepspeed,*)
    pip_install setuptools wheel
    pip_install --no-build-isolation -c scripts/constraints-frameworks.txt "deepspeed>=0.14,<1"
    ;;
esac
# The framework versions the integrations were tested with (README: framework table).
pip_install -e ".[${extras}]" -c scripts/constraints-frameworks.txt
if [ "$(.venv/bin/python -c 'import torch; print(torch.__version__.split("+")[0])')" != "2.13.0" ]; then
  echo "an extra replaced torch 2.13.0; see $log" >&2
  exit 1
fi
# The WebUI (npm ci + copy into the package); without npm the master says it was not built.
bash scripts/build-webui.sh || echo "warning: the WebUI was not built (see above); the master serves a page saying so" >&2
