#!/usr/bin/env bash
# The main job: install Dauntless, bring up a local cluster (a master and one agent),
# train the digits example on it, show the result, and take the cluster down.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh examples
export PATH="$PWD/.venv/bin:$PATH"
export DAUNTLESS_DATA_DIR="${DAUNTLESS_DATA_DIR:-$PWD/.local-cluster}"
trap 'det deploy local cluster-down >/dev/null 2>&1 || true' EXIT
det deploy local cluster-up
det experiment create examples/digits/const.yaml examples/digits --follow
det experiment list
exp_id=$(det experiment list --json | python3 -c 'import json,sys; print(max(e["id"] for e in json.load(sys.stdin)["experiments"]))')
det experiment describe "$exp_id"
trial_id=$(det experiment list-trials "$exp_id" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["trials"][0]["id"])')
det trial logs "$trial_id" | tail -n 20
det deploy local cluster-down
trap - EXIT
