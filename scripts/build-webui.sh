#!/usr/bin/env bash
# Builds the WebUI that the master serves at /: installs its npm dependencies exactly as
# webui/package-lock.json pins them (npm ci), then copies the UI's source (webui/src) and
# the files it uses from them (uPlot) into src/dauntless/master/webui_dist/ (git-ignored).
# Without npm it says so and exits 0: the master then serves a page saying the UI was not
# built. With npm, a failed install or copy exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
out=src/dauntless/master/webui_dist
if ! command -v npm >/dev/null 2>&1; then
  echo "npm not found: the WebUI is not built (the master will say so at /)." >&2
  exit 0
fi
log=$(mktemp)
tmp=$(mktemp -d "${out}.tmp-XXXXXX")
trap 'rm -rf "$tmp" "$log"' EXIT
if ! npm ci --prefix webui --no-audit --no-fund --prefer-offline --loglevel=error >"$log" 2>&1; then
  echo "npm ci --prefix webui failed:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
cp -R webui/src/. "$tmp/"
chmod 755 "$tmp"
mkdir -p "$tmp/vendor"
uplot=webui/node_modules/uplot
cp "$uplot/dist/uPlot.esm.js" "$uplot/dist/uPlot.min.css" "$tmp/vendor/"
cp "$uplot/LICENSE" "$tmp/vendor/uPlot.LICENSE"
rm -rf "$out"
mv "$tmp" "$out"
echo "WebUI built into $out"
