#!/usr/bin/env bash
# Builds the WebUI that the master serves at /: installs its npm dependencies exactly as
# webui/package-lock.json pins them (npm ci), then bundles the UI's ES modules
# (webui/src/**/*.js) and uPlot into one minified module, main.js, with esbuild (a
# devDependency), and puts it, index.html, app.css and uPlot's stylesheet and licence into
# src/dauntless/master/webui_dist/ (git-ignored). One bundle instead of 17 modules saves
# the page a request per module before its first chart (issue 22). What only the Tasks
# page's launch form needs (the yaml parser, nanotar's tar writer, ignore's gitignore
# rules) is bundled apart into chunks/launch_libs.js, loaded when the form is first
# shown (issue 38).
# terminal/: the browser terminal of shell tasks (webui/src/terminal: xterm.js, one
# bundle of its own), which the master serves on the task proxy origin
# (src/dauntless/master/proxy_terminal.py).
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
# Bare imports (yaml, nanotar, ignore, @xterm/*) resolve from webui/node_modules, which
# is not above the stage directory.
export NODE_PATH="$PWD/webui/node_modules"
bundle() {  # bundle ENTRY OUTFILE: one minified ES module
  if ! webui/node_modules/.bin/esbuild "$1" --bundle --format=esm --minify --target=es2020 \
    --log-level=warning --outfile="$2" >"$log" 2>&1; then
    echo "esbuild failed to bundle ${1#"$stage"/}:" >&2
    cat "$log" >&2
    exit 1
  fi
}
bundle "$stage/main.js" "$tmp/main.js"
bundle "$stage/pages/launch_libs.js" "$tmp/chunks/launch_libs.js"
bundle "$stage/terminal/terminal.js" "$tmp/terminal/terminal.js"
xterm=webui/node_modules/@xterm/xterm
cp "$stage/terminal/index.html" "$tmp/terminal/"
cp "$xterm/css/xterm.css" "$tmp/terminal/"
cp "$xterm/LICENSE" "$tmp/terminal/xterm.LICENSE"
cp webui/node_modules/@xterm/addon-fit/LICENSE "$tmp/terminal/addon-fit.LICENSE"
cp webui/node_modules/yaml/LICENSE "$tmp/chunks/yaml.LICENSE"
cp webui/node_modules/nanotar/LICENSE "$tmp/chunks/nanotar.LICENSE"
cp webui/node_modules/ignore/LICENSE-MIT "$tmp/chunks/ignore.LICENSE"
cp "$stage/index.html" "$stage/app.css" "$tmp/"
cp "$uplot/dist/uPlot.min.css" "$tmp/vendor/"
cp "$uplot/LICENSE" "$tmp/vendor/uPlot.LICENSE"
rm -rf "$stage"
rm -rf "$out"
mv "$tmp" "$out"
echo "WebUI built into $out"
