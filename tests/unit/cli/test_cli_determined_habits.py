"""Determined's ``det`` options: create -i/--include, --template, -t/--test-mode, and the
log filters (against the real master, in this process)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dauntless.cli import build_parser
from dauntless.cli._logs import filter_lines, line_level
from dauntless.master.testing import Cluster

sys.path.insert(0, str(Path(__file__).parent))
from test_cli_commands import VALID, run, trial_in_background  # noqa: E402


def _model_def_files(cluster: Cluster, exp_id: int) -> list[str]:
    r = cluster.admin.get(f"/api/v1/experiments/{exp_id}/model_def/tree")
    return sorted(f["path"] for f in r.json()["files"] if f["type"] == "file")


def _experiment_count(cluster: Cluster) -> int:
    r = cluster.admin.get("/api/v1/experiments", params={"archived": "all"})
    return int(r.json()["total"])


def test_include_puts_paths_under_their_base_names(
    tmp_path: Path, cluster: Cluster, capsys
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "model_def.py").write_text("x = 1\n")
    lib = tmp_path / "shared_lib"
    (lib / "pkg").mkdir(parents=True)
    (lib / "pkg" / "util.py").write_text("y = 2\n")
    extra = tmp_path / "vocab.txt"
    extra.write_text("a b c\n")
    code, out, err = run(
        capsys, "-m", cluster.url, "e", "create", str(cfg), str(ctx), "-i", str(lib),
        "--include", str(extra),
    )  # fmt: skip
    assert code == 0, err
    assert _model_def_files(cluster, 1) == ["model_def.py", "shared_lib/pkg/util.py", "vocab.txt"]
    # A name clash with the context is refused before anything is sent.
    (ctx / "vocab.txt").write_text("clash\n")
    code, _, err = run(
        capsys, "-m", cluster.url, "e", "create", str(cfg), str(ctx), "-i", str(extra)
    )
    assert code != 0 and "vocab.txt already exists in the context directory" in err
    code, _, err = run(capsys, "-m", cluster.url, "e", "create", str(cfg), "-i", str(extra))
    assert code != 0 and "needs a context directory" in err
    assert _experiment_count(cluster) == 1


def test_unknown_template_is_a_clear_error(tmp_path: Path, cluster: Cluster, capsys) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    code, _, err = run(capsys, "-m", cluster.url, "e", "create", str(cfg), "--template", "gpu")
    assert code != 0 and "template 'gpu' not found" in err
    assert _experiment_count(cluster) == 0


def test_test_mode_submits_a_one_batch_single_trial_and_follows(
    tmp_path: Path, cluster: Cluster, capsys
) -> None:
    raw = yaml.safe_load(VALID)
    raw["searcher"] = {
        "name": "random",
        "max_trials": 5,
        **{k: raw["searcher"][k] for k in ("metric",)},
    }
    raw["searcher"]["max_length"] = {"batches": 500}
    cfg = tmp_path / "random.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    with trial_in_background(cluster, "COMPLETED", length=1):
        code, out, err = run(capsys, "-m", cluster.url, "e", "create", str(cfg), "-t")
    assert code == 0, err
    body = cluster.experiment(1)
    sent = body["experiment"]["config"]
    assert sent["searcher"]["name"] == "single"
    assert sent["searcher"]["metric"] == raw["searcher"]["metric"]
    assert sent["searcher"]["smaller_is_better"] is True
    assert sent["searcher"]["max_length"]["batches"] == 1
    assert sent["max_restarts"] == 0 and sent["min_validation_period"]["batches"] == 1
    assert sent["name"].endswith("(test mode)")
    assert len(body["trials"]) == 1
    assert "Experiment 1 finished: COMPLETED" in out and "Test mode" in err


def _lines() -> list[dict[str, Any]]:
    texts = [
        (0, "stdout", "INFO: [12] dauntless: started"),
        (None, "stdout", "[rank=1] DEBUG: detail"),
        (1, "stderr", "Traceback (most recent call last):"),
        (0, "stdout", "WARNING: slow"),
        (None, "stdout", "plain line"),
        (1, "stdout", "CRITICAL: gone"),
        (0, "stdout", "[rank=0] /x/_controller.py:12: FutureWarning: old hook"),
    ]
    return [
        {"id": i, "rank_id": r, "stdtype": t, "log": text}
        for i, (r, t, text) in enumerate(texts, 1)
    ]


def _filtered(*argv: str) -> list[int]:
    args = build_parser().parse_args(["t", "logs", "3", *argv])
    return [line["id"] for line in filter_lines(_lines(), args)]


def test_log_filters() -> None:
    assert [line_level(x) for x in _lines()] == [
        "INFO",
        "DEBUG",
        "ERROR",
        "WARNING",
        "INFO",
        "CRITICAL",
        "WARNING",
    ]
    assert _filtered() == [1, 2, 3, 4, 5, 6, 7]
    assert _filtered("--rank-id", "1") == [2, 3, 6]
    assert _filtered("--level", "warning") == [3, 4, 6, 7]
    assert _filtered("--head", "2") == [1, 2]
    assert _filtered("--tail", "2") == [6, 7]
    assert _filtered("--rank-id", "1", "--tail", "1", "--level", "ERROR") == [6]
    with pytest.raises(SystemExit):
        _filtered("--level", "LOUD")


def test_aliases_parse() -> None:
    p = build_parser()
    a = p.parse_args(["e", "download", "3", "--output-dir", "d"])
    assert a.output == "d"
    a = p.parse_args(["c", "download", "u-1", "--output-dir", "d"])
    assert a.output == "d"
    a = p.parse_args(["t", "download", "3", "--uuid", "u", "--output-dir", "d"])
    assert (a.uuid, a.output, a.best, a.latest) == ("u", "d", False, False)
    with pytest.raises(SystemExit):
        p.parse_args(["t", "download", "3", "--best", "--latest"])
    a = p.parse_args(["e", "describe", "1", "2", "--metrics", "--csv"])
    assert (a.experiment_ids, a.metrics, a.csv) == ([1, 2], True, True)
    a = p.parse_args(["e", "logs", "1", "--json", "--tail", "5", "--rank-id", "0"])
    assert (a.json, a.tail, a.rank_id) == (True, 5, 0)
    a = p.parse_args(["e", "label", "add", "1", "best"])
    assert (a.label_action, a.experiment_id, a.label) == ("add", 1, "best")
    assert isinstance(p.parse_args(["c", "delete", "a,b", "--yes"]), argparse.Namespace)
