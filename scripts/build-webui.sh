#!/usr/bin/env bash
# Builds the WebUI that the master serves at /: installs its npm dependencies exactly as
# webui/package-lock.json pins them (npm ci), then bundles the UI's ES modules
# (webui/src/**/*.js) and uPlot into one minified module, main.js, with esbuild (a
# devDependency), and puts it, index.html, app.css and uPlot's stylesheet and licence into
# src/dauntless/master/webui_dist/ (git-ignored). One bundle instead of 17 modules saves
# the page a request per module before its first chart (issue 22).
# axe-core, the other devDependency, is not bundled: the Chromium tests inject it to check
# every page for contrast failures (tests/integration/test_webui_scale.py).
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
chmod 755 "$tmp"
uplot=webui/node_modules/uplot
# The source imports uPlot as ./vendor/uPlot.esm.js (it runs unbundled from a copy of
# webui/src with uPlot beside it): stage that layout, then bundle from it.
stage="$tmp/.stage"
mkdir -p "$stage" && cp -R webui/src/. "$stage/"
mkdir -p "$stage/vendor" "$tmp/vendor"
cp "$uplot/dist/uPlot.esm.js" "$stage/vendor/"
if ! webui/node_modules/.bin/esbuild "$stage/main.js" --bundle --format=esm --minify \
  --target=es2020 --log-level=warning --outfile="$tmp/main.js" >"$log" 2>&1; then
  echo "esbuild failed to bundle webui/src:" >&2
  cat "$log" >&2
  exit 1
fi
cp "$stage/index.html" "$stage/app.css" "$tmp/"
cp "$uplot/dist/uPlot.min.css" "$tmp/vendor/"
cp "$uplot/LICENSE" "$tmp/vendor/uPlot.LICENSE"
rm -rf "$stage"
rm -rf "$out"
mv "$tmp" "$out"
echo "WebUI built into $out"
