"""The commands end to end against a fake master over HTTP: output, JSON, errors."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from dauntless.cli import main
from dauntless.cli._util import fmt_time

pytestmark = pytest.mark.usefixtures("no_backoff")

VALID = """\
name: mnist
entrypoint: model_def:MNistTrial
hyperparameters:
  global_batch_size: 32
  lr: 0.1
searcher:
  name: single
  metric: validation_loss
  max_length:
    batches: 100
"""

INVALID = """\
name: x
entrypoint: model_def:T
hyperparameters:
  global_batch_size: 32
  lr: {type: double, minval: 1.0, maxval: 0.1}
searcher:
  name: random
  metric: loss
  max_trials: 0
unknown_field: 3
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def populated(fake_master: Any) -> Any:
    fm = fake_master
    fm.add_experiment(
        1,
        name="mnist",
        state="COMPLETED",
        progress=1.0,
        end_time=1_700_003_725.0,
        best_searcher_metric=0.0712,
        searcher_metric="validation_loss",
    )
    fm.add_experiment(2, name="old", archived=True, state="CANCELED")
    fm.add_trial(
        1,
        1,
        state="COMPLETED",
        hparams={"lr": 0.1, "global_batch_size": 32, "layers": [1, 2]},
        total_batches=100,
        best_validation=0.0712,
        latest_validation={"validation_loss": 0.0712, "accuracy": 0.9731, "batches": 100},
        latest_checkpoint="ck-1",
        restarts=1,
    )
    fm.add_trial(
        2,
        1,
        state="COMPLETED",
        latest_validation={
            "trial_id": 2,
            "group": "validation",
            "total_batches": 50,
            "values": {"validation_loss": 0.2, "accuracy": 0.91},
        },
    )
    fm.metrics[1] = [
        {"trial_id": 1, "group": "training", "total_batches": 50, "epoch": None,
         "trial_run_id": 1, "values": {"loss": 0.5, "batches": 50}, "reported_at": 1.0},
        {"trial_id": 1, "group": "validation", "total_batches": 100, "epoch": 1.0,
         "trial_run_id": 1, "values": {"validation_loss": 0.0712, "accuracy": 0.9731},
         "reported_at": 2.0},
    ]  # fmt: skip
    fm.checkpoints["ck-1"] = {
        "uuid": "ck-1",
        "trial_id": 1,
        "experiment_id": 1,
        "total_batches": 100,
        "state": "COMPLETED",
        "resources": {"state-dict.pth": 2048, "metadata.json": 100},
        "metadata": {"steps_completed": 100, "framework": "torch"},
        "report_time": 1_700_000_500.0,
        "storage_path": "/ckpts/ck-1",
    }
    fm.agents.append(
        {
            "id": "agent-0",
            "resource_pool": "default",
            "hostname": "box",
            "state": "ACTIVE",
            "registered_at": 1.0,
            "last_heartbeat": 1_700_000_000.0,
            "slots": [
                {
                    "id": "0",
                    "type": "cpu",
                    "device": "cpu0",
                    "enabled": True,
                    "allocation_id": "al-1",
                },
                {
                    "id": "1",
                    "type": "cpu",
                    "device": "cpu1",
                    "enabled": True,
                    "allocation_id": None,
                },
            ],
        }
    )
    return fm


# -- experiment create ------------------------------------------------------------------


def test_invalid_config_prints_field_errors_without_network(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], closed_port: int
) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(INVALID)
    code, out, err = run(
        capsys, "-m", f"127.0.0.1:{closed_port}", "e", "create", str(cfg), str(tmp_path)
    )
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0] == f"Error: the experiment config {cfg} is invalid"
    assert "  hyperparameters.lr: minval (1.0) must be less than maxval (0.1)" in lines
    assert any(line.startswith("  searcher.max_trials: ") for line in lines), lines
    assert any(line.startswith("  unknown_field: unknown field") for line in lines)
    assert "Traceback" not in err and "could not reach" not in err


def test_missing_and_unparsable_config_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "e", "create", str(tmp_path / "none.yaml"))
    assert code == 1 and err.startswith("Error: cannot read the config file") and "none.yaml" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1\n")
    code, _, err = run(capsys, "e", "create", str(bad))
    assert code == 1 and "not valid YAML" in err
    code, _, err = run(capsys, "e", "create", str(bad), "--config", "x=1")
    assert code == 1 and "not valid YAML" in err


def test_create_uploads_config_and_context(
    tmp_path: Path, fake_master: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    ctx = tmp_path / "ctx"
    (ctx / "__pycache__").mkdir(parents=True)
    (ctx / "model_def.py").write_text("class MNistTrial: pass\n")
    (ctx / "__pycache__" / "model_def.cpython-311.pyc").write_bytes(b"\0")
    code, out, err = run(capsys, "-m", fake_master.url, "e", "create", str(cfg), str(ctx))
    assert (code, out, err) == (0, "Created experiment 1\n", "")
    parts = fake_master.created[0]
    assert parts["config"] == (None, VALID.encode())  # the file's text, comments and all
    assert parts["activate"] == (None, b"true")
    with tarfile.open(fileobj=io.BytesIO(parts["context"][1]), mode="r:gz") as tar:
        assert tar.getnames() == ["model_def.py"]


def test_create_paused_with_overrides_and_no_context(
    tmp_path: Path, fake_master: Any, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    monkeypatch.setenv("DET_MASTER", fake_master.url)
    code, out, _ = run(
        capsys, "e", "create", str(cfg), "--paused", "--config", "searcher.max_length.batches=7"
    )
    assert code == 0 and out == "Created experiment 1\n"
    parts = fake_master.created[0]
    assert parts["activate"] == (None, b"false") and "context" not in parts
    assert yaml.safe_load(parts["config"][1])["searcher"]["max_length"] == {"batches": 7}
    assert fake_master.experiments[1]["state"] == "PAUSED"


def test_override_that_breaks_the_config_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    code, _, err = run(
        capsys, "e", "create", str(cfg), "--config", "searcher.max_length.batches=-5"
    )
    assert code == 1 and "searcher.max_length" in err


def test_context_over_limit_fails_before_upload(
    tmp_path: Path, fake_master: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    big = ctx / "data.bin"
    big.touch()
    os.truncate(big, 100 * 1024 * 1024)
    code, out, err = run(capsys, "-m", fake_master.url, "e", "create", str(cfg), str(ctx))
    assert code == 1 and out == ""
    assert (
        err.startswith("Error: the context directory") and "100.0 MiB" in err and "95.0 MiB" in err
    )
    assert fake_master.requests == []


def test_missing_context_dir(
    tmp_path: Path, fake_master: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    code, _, err = run(
        capsys, "-m", fake_master.url, "e", "create", str(cfg), str(tmp_path / "nope")
    )
    assert code == 1 and "does not exist" in err and fake_master.requests == []


def test_master_rejection_prints_its_field_errors(
    tmp_path: Path, fake_master: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    fake_master.forced[("POST", "/api/v1/experiments")] = (
        400,
        {
            "detail": "invalid config",
            "errors": [{"field": "resources.slots_per_trial", "message": "too many"}],
        },
    )
    code, _, err = run(capsys, "-m", fake_master.url, "e", "create", str(cfg))
    assert code == 1
    assert err == "Error: invalid config\n  resources.slots_per_trial: too many\n"


def _script_run(fm: Any, final: str) -> None:
    """After a few polls a trial appears and logs; then the experiment ends in ``final``."""
    polls = {"n": 0}

    def hook(fake: Any, method: str, path: str) -> None:
        if method != "GET" or fake.experiments.get(1) is None:
            return
        polls["n"] += 1
        n = polls["n"]
        if n == 3:
            fake.add_trial(5, 1)
            fake.add_log(5, "epoch 1 loss=0.5")
        if n == 8:
            fake.add_log(5, "epoch 2 loss=0.2", rank_id=None)
        if n == 12:
            fake.add_log(5, "done")
            fake.trials[5]["state"] = "COMPLETED" if final == "COMPLETED" else "ERROR"
            fake.experiments[1]["state"] = final

    fm.hooks.append(hook)


@pytest.mark.parametrize(("final", "code"), [("COMPLETED", 0), ("ERROR", 1), ("CANCELED", 1)])
def test_create_follow_streams_first_trial_until_terminal(
    tmp_path: Path, fake_master: Any, capsys: pytest.CaptureFixture[str], final: str, code: int
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    _script_run(fake_master, final)
    rc, out, err = run(capsys, "-m", fake_master.url, "e", "create", str(cfg), "-f")
    assert rc == code
    assert out.splitlines() == [
        "Created experiment 1",
        "[rank=0] epoch 1 loss=0.5",
        "epoch 2 loss=0.2",
        "[rank=0] done",
        f"Experiment 1 finished: {final}",
    ]
    assert "Following the logs of trial 5" in err
    log_queries = [r.query for r in fake_master.requests if r.path.endswith("/logs")]
    assert log_queries[0]["after_id"] == ["0"] and ["1"] in [q["after_id"] for q in log_queries]


def test_follow_when_experiment_errors_without_trials(
    tmp_path: Path, fake_master: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)

    def hook(fake: Any, method: str, path: str) -> None:
        if method == "GET" and 1 in fake.experiments:
            fake.experiments[1]["state"] = "ERROR"

    fake_master.hooks.append(hook)
    rc, out, _ = run(capsys, "-m", fake_master.url, "e", "create", str(cfg), "--follow")
    assert rc == 1 and out.splitlines() == ["Created experiment 1", "Experiment 1 finished: ERROR"]


# -- read commands ----------------------------------------------------------------------


def test_experiment_list_table_and_json(populated: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-m", populated.url, "e", "list")
    assert code == 0
    header, *rows = [
        line for line in out.splitlines() if line.strip() and set(line.strip()) != {"─"}
    ]
    for col in (
        "ID",
        "Name",
        "State",
        "Progress",
        "Trials",
        "Best metric",
        "Start time",
        "Duration",
    ):
        assert col in header
    assert len(rows) == 1  # the archived experiment is hidden
    row = rows[0].split()
    assert row[:5] == ["1", "mnist", "COMPLETED", "100.0%", "2"]
    assert "validation_loss=0.0712" in rows[0]
    assert fmt_time(1_700_000_000.0) in rows[0] and "1:02:05" in rows[0]

    code, out, _ = run(capsys, "-m", populated.url, "e", "list", "--json")
    data = json.loads(out)
    assert data["total"] == 1 and data["experiments"][0] == populated.experiments[1]

    code, out, _ = run(capsys, "-m", populated.url, "e", "ls", "--all")
    assert "old" in out and "Archived" in out
    data = json.loads(run(capsys, "-m", populated.url, "e", "ls", "-a", "--json")[1])
    assert [e["id"] for e in data["experiments"]] == [1, 2]


def test_experiment_describe_shows_trials_and_latest_validation(
    populated: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "-m", populated.url, "e", "describe", "1")
    assert code == 0
    assert out.startswith("Experiment ID:   1\n") and "State:" in out and "COMPLETED" in out
    assert "validation_loss (smaller is better)" in out
    for col in (
        "Trial ID",
        "H-Params",
        "Batches",
        "Best validation",
        "Restarts",
        "Latest checkpoint",
    ):
        assert col in out
    assert "global_batch_size=32, layers=[1,2], lr=0.1" in out and "ck-1" in out
    section = out[out.index("Latest validation metrics") :]
    assert "accuracy" in section and "validation_loss" in section
    row1 = next(line for line in section.splitlines() if line.split()[:1] == ["1"])
    row2 = next(line for line in section.splitlines() if line.split()[:1] == ["2"])
    assert row1.split() == ["1", "100", "0.9731", "0.0712"]
    assert row2.split() == ["2", "50", "0.91", "0.2"]

    code, out, _ = run(capsys, "-m", populated.url, "e", "describe", "1", "--json")
    data = json.loads(out)
    assert data["experiment"]["id"] == 1 and len(data["trials"]) == 2


def test_experiment_trials_checkpoints_config(
    populated: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(capsys, "-m", populated.url, "e", "list-trials", "1")[1]
    assert "COMPLETED" in out and "ck-1" in out
    assert (
        len(json.loads(run(capsys, "-m", populated.url, "e", "lt", "1", "--json")[1])["trials"])
        == 2
    )
    out = run(capsys, "-m", populated.url, "e", "list-checkpoints", "1")[1]
    assert "ck-1" in out and "2.1 KiB" in out and "100" in out
    assert (
        json.loads(run(capsys, "-m", populated.url, "e", "lc", "1", "--json")[1])["checkpoints"][0][
            "uuid"
        ]
        == "ck-1"
    )
    out = run(capsys, "-m", populated.url, "e", "config", "1")[1]
    assert yaml.safe_load(out) == populated.experiments[1]["config"]
    out = run(capsys, "-m", populated.url, "e", "config", "1", "--json")[1]
    assert json.loads(out) == populated.experiments[1]["config"]


def test_trial_describe(populated: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-m", populated.url, "trial", "describe", "1")
    assert code == 0 and "Trial ID:" in out and "Restarts:" in out
    assert "Latest validation metrics (batches 100)" in out
    assert any(line.split() == ["accuracy", "0.9731"] for line in out.splitlines())
    code, out, _ = run(capsys, "-m", populated.url, "t", "describe", "1", "--metrics")
    assert "Training metrics" in out and "Validation metrics" in out
    training = out[out.index("Training metrics") : out.index("Validation metrics")]
    assert "loss" in training.splitlines()[1]
    assert any(line.split() == ["50", "0.5"] for line in training.splitlines())
    validation = out[out.index("Validation metrics") :]
    assert any(line.split() == ["100", "1", "0.9731", "0.0712"] for line in validation.splitlines())
    data = json.loads(
        run(capsys, "-m", populated.url, "t", "describe", "1", "--json", "--metrics")[1]
    )
    assert data["trial"]["id"] == 1 and len(data["metrics"]) == 2
    assert "metrics" not in json.loads(
        run(capsys, "-m", populated.url, "t", "describe", "1", "--json")[1]
    )


def test_trial_logs_prints_all_pages_and_follows(
    populated: Any, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    from dauntless.client import _follow

    monkeypatch.setattr(_follow, "LOG_PAGE_SIZE", 2)
    for i in range(5):
        populated.add_log(1, f"line {i}")
    code, out, _ = run(capsys, "-m", populated.url, "t", "logs", "1")
    assert code == 0 and out.splitlines() == [f"[rank=0] line {i}" for i in range(5)]
    lines = run(capsys, "-m", populated.url, "t", "logs", "1", "--json")[1].splitlines()
    assert [json.loads(x)["log"] for x in lines] == [f"line {i}" for i in range(5)]

    populated.add_trial(3, 1, state="ACTIVE")
    polls = {"n": 0}

    def hook(fake: Any, method: str, path: str) -> None:
        if path == "/api/v1/trials/3/logs":
            polls["n"] += 1
            if polls["n"] == 4:
                fake.add_log(3, "late line", rank_id=None)
                fake.trials[3]["state"] = "CANCELED"

    populated.hooks.append(hook)
    code, out, _ = run(capsys, "-m", populated.url, "t", "logs", "3", "-f")
    assert code == 0 and out == "late line\n" and polls["n"] >= 5


def test_trial_and_checkpoint_describe(populated: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "-m", populated.url, "t", "list-checkpoints", "1")[1]
    assert "ck-1" in out
    code, out, _ = run(capsys, "-m", populated.url, "checkpoint", "describe", "ck-1")
    assert code == 0 and "UUID:" in out and "/ckpts/ck-1" in out
    assert any(line.split() == ["state-dict.pth", "2.0", "KiB"] for line in out.splitlines())
    assert '"framework": "torch"' in out
    data = json.loads(run(capsys, "-m", populated.url, "c", "describe", "ck-1", "--json")[1])
    assert data == {"checkpoint": populated.checkpoints["ck-1"]}


def test_agents_slots_master_info(populated: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "-m", populated.url, "agent", "list")[1]
    row = next(line for line in out.splitlines() if line.startswith("agent-0"))
    assert row.split()[:7] == ["agent-0", "box", "default", "ACTIVE", "process", "2", "1"]
    assert json.loads(run(capsys, "-m", populated.url, "a", "list", "--json")[1]) == {
        "agents": populated.agents
    }
    out = run(capsys, "-m", populated.url, "slot", "list")[1]
    rows = [line.split() for line in out.splitlines() if line.startswith("agent-0")]
    assert rows == [
        ["agent-0", "0", "cpu", "cpu0", "True", "al-1"],
        ["agent-0", "1", "cpu", "cpu1", "True", "FREE"],
    ]
    slots = json.loads(run(capsys, "-m", populated.url, "s", "list", "--json")[1])["slots"]
    assert [s["agent_id"] for s in slots] == ["agent-0", "agent-0"]
    out = run(capsys, "-m", populated.url, "master", "info")[1]
    assert f"Master URL:   {populated.url}" in out and "fake" in out and "0.1.0" in out
    assert (
        json.loads(run(capsys, "-m", populated.url, "master", "info", "--json")[1])["cluster_id"]
        == "c-1"
    )


def test_version(populated: Any, capsys: pytest.CaptureFixture[str], closed_port: int) -> None:
    code, out, _ = run(capsys, "-m", populated.url, "version")
    assert code == 0 and "Client version: 0.1.0" in out and "Master version: 0.1.0" in out
    code, out, _ = run(capsys, "-m", f"127.0.0.1:{closed_port}", "version", "--json")
    data = json.loads(out)
    assert code == 0 and data["master"] is None and data["client"]["version"] == "0.1.0"


# -- errors -------------------------------------------------------------------------------


def test_not_found_is_one_line_error(populated: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "-m", populated.url, "e", "describe", "99") == (
        1, "", "Error: experiment 99 not found\n",
    )  # fmt: skip
    assert run(capsys, "-m", populated.url, "checkpoint", "describe", "nope")[2] == (
        "Error: checkpoint nope not found\n"
    )


def test_server_error_says_so(populated: Any, capsys: pytest.CaptureFixture[str]) -> None:
    populated.forced[("GET", "/api/v1/agents")] = (500, {"detail": "boom"})
    code, _, err = run(capsys, "-m", populated.url, "agent", "list")
    assert code == 1 and err.startswith("Error: boom (HTTP 500")


def test_unreachable_master_names_url_and_fix(
    capsys: pytest.CaptureFixture[str], closed_port: int, monkeypatch: Any
) -> None:
    monkeypatch.setenv("DET_MASTER", f"127.0.0.1:{closed_port}")
    code, out, err = run(capsys, "e", "list")
    assert code == 1 and out == ""
    assert err.startswith(f"Error: could not reach the master at http://127.0.0.1:{closed_port}")
    assert "-m/--master" in err and "DET_MASTER" in err and "Traceback" not in err


def test_invalid_master_address(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "-m", "ftp://x", "agent", "list")
    assert code == 1 and err.startswith("Error: invalid master address") and "scheme" in err
