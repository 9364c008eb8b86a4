"""The commands end to end against the real master over HTTP (in this process): output,
JSON, errors, and what the master stored."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from dauntless.cli import main
from dauntless.cli._util import fmt_duration, fmt_time
from dauntless.client import Session
from dauntless.master.testing import Cluster

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


MNIST = """\
name: mnist
entrypoint: model_def:MNistTrial
hyperparameters:
  global_batch_size: 32
  layers: {type: const, val: [1, 2]}
  lr: {type: categorical, vals: [0.1, 0.2]}
searcher:
  name: grid
  metric: validation_loss
  max_length:
    batches: 100
"""

BUSY = """\
name: busy
entrypoint: model_def:T
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: loss, max_length: {batches: 10}}
"""


@pytest.fixture
def populated(cluster: Cluster) -> Cluster:
    """Experiment 1 ``mnist``: two trials that trained, validated and COMPLETED (the one
    with lr 0.1 also reported training metrics and checkpoint ``ck-1``); experiment 2
    ``old``: canceled and archived; experiment 3 ``busy``: its trial runs on slot 0 of
    ``agent-0`` (2 slots)."""
    c = cluster
    exp = c.create_experiment(MNIST)
    c.register_agent("agent-0", slots=2)
    for trial_id, alloc in c.start_trials(2):
        lr = c.admin.get(f"/api/v1/trials/{trial_id}").json()["trial"]["hparams"]["lr"]
        if lr == 0.1:
            c.report(trial_id, "training", 50, {"loss": 0.5, "batches": 50})
            c.report(
                trial_id,
                "validation",
                100,
                {"validation_loss": 0.0712, "accuracy": 0.9731, "batches": 100},
            )
            c.checkpoint(
                trial_id,
                alloc,
                "ck-1",
                100,
                resources={"state-dict.pth": 2048, "metadata.json": 100},
                metadata={"steps_completed": 100, "framework": "torch"},
            )
            c.complete(trial_id, 100, 0.0712)
        else:
            c.report(
                trial_id,
                "validation",
                50,
                {"validation_loss": 0.2, "accuracy": 0.91, "batches": 50},
            )
            c.complete(trial_id, 100, 0.2)
        c.exited(alloc, 0)
    c.wait_state(exp, "COMPLETED")
    old = c.create_experiment(MNIST.replace("name: mnist", "name: old"), activate=False)
    c.action(old, "cancel")
    c.wait_state(old, "CANCELED")
    c.action(old, "archive")
    busy = c.create_experiment(BUSY)
    c.start_trials(1)
    assert (exp, old, busy) == (1, 2, 3)
    return c


def trial_by_lr(c: Cluster, lr: float) -> dict[str, Any]:
    """Experiment 1's trial of learning rate ``lr``."""
    trials = c.experiment(1)["trials"]
    return next(t for t in trials if t["hparams"]["lr"] == lr)


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


def test_invalid_config_refused_by_the_master_prints_the_same_field_errors(
    tmp_path: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    # The CLI validates only when the submission fails (issue 37): the master's refusal
    # still reads as the config's own field errors, and nothing is created.
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(INVALID)
    code, out, err = run(capsys, "-m", cluster.url, "e", "create", str(cfg), str(tmp_path))
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0] == f"Error: the experiment config {cfg} is invalid"
    assert "  hyperparameters.lr: minval (1.0) must be less than maxval (0.1)" in lines
    assert any(line.startswith("  unknown_field: unknown field") for line in lines)
    assert cluster.admin.get("/api/v1/experiments").json()["experiments"] == []


def test_a_valid_config_is_validated_by_the_master_alone(tmp_path: Path, cluster: Cluster) -> None:
    # In a process of its own: a create the master accepts never builds the experiment
    # config's models in the CLI (0.3 s of its 0.8 s of CPU; issue 37).
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    (tmp_path / "model_def.py").write_text("class MNistTrial: pass\n")
    script = (
        "import sys\n"
        "from dauntless.cli import main\n"
        f"code = main(['-m', {cluster.url!r}, 'e', 'create', {str(cfg)!r}, {str(tmp_path)!r}])\n"
        "print(code, 'dauntless.config._experiment' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.splitlines() == ["Created experiment 1", "0 False"], done
    assert cluster.experiment(1)["experiment"]["name"] == "mnist"


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
    tmp_path: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    ctx = tmp_path / "ctx"
    (ctx / "__pycache__").mkdir(parents=True)
    (ctx / "model_def.py").write_text("class MNistTrial: pass\n")
    (ctx / "__pycache__" / "model_def.cpython-311.pyc").write_bytes(b"\0")
    code, out, err = run(capsys, "-m", cluster.url, "e", "create", str(cfg), str(ctx))
    assert (code, out) == (0, "Created experiment 1\n")
    # The master's warnings of Determined 0.38 deprecations (module:Class entrypoint,
    # searcher.max_length), one line each.
    assert err and all(line.startswith("Warning: ") for line in err.splitlines()), err
    exp = cluster.experiment(1)["experiment"]
    assert exp["state"] == "ACTIVE" and exp["name"] == "mnist"
    assert exp["config"]["searcher"]["max_length"]["batches"] == 100
    # The context went up without the byte-code cache.
    tree = cluster.admin.get("/api/v1/experiments/1/model_def/tree").json()["files"]
    assert [f["path"] for f in tree] == ["model_def.py"]


def test_create_paused_with_overrides_and_no_context(
    tmp_path: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    monkeypatch.setenv("DET_MASTER", cluster.url)
    code, out, _ = run(
        capsys, "e", "create", str(cfg), "--paused", "--config", "searcher.max_length.batches=7"
    )
    assert code == 0 and out == "Created experiment 1\n"
    exp = cluster.experiment(1)["experiment"]
    assert exp["state"] == "PAUSED"
    assert exp["config"]["searcher"]["max_length"]["batches"] == 7
    tree = cluster.admin.get("/api/v1/experiments/1/model_def/tree")
    assert tree.status_code == 404, tree.text  # no context was uploaded


def test_override_that_breaks_the_config_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    code, _, err = run(
        capsys, "e", "create", str(cfg), "--config", "searcher.max_length.batches=-5"
    )
    assert code == 1 and "searcher.max_length" in err


def _no_experiments(cluster: Cluster) -> bool:
    return cluster.admin.get("/api/v1/experiments", params={"archived": "all"}).json()["total"] == 0


def test_context_over_limit_fails_before_upload(
    tmp_path: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    big = ctx / "data.bin"
    big.touch()
    os.truncate(big, 100 * 1024 * 1024)
    code, out, err = run(capsys, "-m", cluster.url, "e", "create", str(cfg), str(ctx))
    assert code == 1 and out == ""
    assert (
        err.startswith("Error: the context directory") and "100.0 MiB" in err and "95.0 MiB" in err
    )
    assert _no_experiments(cluster)


def test_missing_context_dir(
    tmp_path: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID)
    code, _, err = run(capsys, "-m", cluster.url, "e", "create", str(cfg), str(tmp_path / "nope"))
    assert code == 1 and "does not exist" in err and _no_experiments(cluster)


def test_master_rejection_prints_its_field_errors(
    tmp_path: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    # Valid on its own (the CLI checks that first), refused by this master: it has no
    # such resource pool.
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID + "resources: {resource_pool: nowhere}\n")
    code, _, err = run(capsys, "-m", cluster.url, "e", "create", str(cfg))
    assert code == 1 and "Traceback" not in err
    assert err.startswith("Error: ") and "\n  resources.resource_pool: " in err, err
    assert _no_experiments(cluster)


def end_everything(cluster: Cluster, exp_id: int) -> None:
    """After a failed step of a test's player: end the experiment (cancel it, and fail
    whatever the agent runs), so that a command following it returns instead of waiting
    forever; the test then reports the player's error."""
    with contextlib.suppress(Exception):
        cluster.action(exp_id, "cancel")
    for alloc in list(cluster.running.get("agent-0", [])):
        with contextlib.suppress(Exception):
            cluster.exited(alloc, 1)


@contextlib.contextmanager
def trial_in_background(cluster: Cluster, final: str, length: int = 100) -> Iterator[None]:
    """Play agent-0 and its trial while the command under test runs: once experiment 1's
    trial starts it logs three lines and then ends so that the experiment is ``final``
    (COMPLETED: the searcher's ``length`` done and exit 0; ERROR: exit 1 with no restarts
    left; CANCELED: the experiment is canceled and the trial exits when told to stop)."""
    cluster.register_agent("agent-0", slots=1)
    errors: list[BaseException] = []

    def act() -> None:
        try:
            ((trial, alloc),) = cluster.start_trials(1)
            cluster.log(alloc, "epoch 1 loss=0.5")
            cluster.log(alloc, "epoch 2 loss=0.2", rank_id=None)
            cluster.log(alloc, "done")
            if final == "COMPLETED":
                cluster.complete(trial, length, 0.2)
                cluster.exited(alloc, 0)
            elif final == "ERROR":
                cluster.exited(alloc, 1)
            else:
                cluster.action(1, "cancel")
                cluster.wait_preempted(alloc)
                cluster.exited(alloc, 0)
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)
            end_everything(cluster, 1)

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    yield
    thread.join(60)
    assert not thread.is_alive(), "the trial's player did not finish"
    if errors:
        raise errors[0]


@pytest.mark.parametrize(("final", "code"), [("COMPLETED", 0), ("ERROR", 1), ("CANCELED", 1)])
def test_create_follow_streams_first_trial_until_terminal(
    tmp_path: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str], final: str, code: int
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID + "max_restarts: 0\n")
    with trial_in_background(cluster, final):
        rc, out, err = run(capsys, "-m", cluster.url, "e", "create", str(cfg), "-f")
    assert rc == code, err
    assert out.splitlines() == [
        "Created experiment 1",
        "[rank=0] epoch 1 loss=0.5",
        "epoch 2 loss=0.2",
        "[rank=0] done",
        f"Experiment 1 finished: {final}",
    ]
    trial = cluster.experiment(1)["trials"][0]
    assert f"Following the logs of trial {trial['id']}" in err


def test_follow_when_the_trial_fails_without_a_line(
    tmp_path: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "const.yaml"
    cfg.write_text(VALID + "max_restarts: 0\n")
    cluster.register_agent("agent-0", slots=1)

    def fail() -> None:
        try:
            cluster.exited(cluster.start_trials(1)[0][1], 1)
        finally:
            end_everything(cluster, 1)  # a no-op once the experiment is over

    thread = threading.Thread(target=fail, daemon=True)
    thread.start()
    rc, out, _ = run(capsys, "-m", cluster.url, "e", "create", str(cfg), "--follow")
    thread.join(60)
    assert rc == 1 and out.splitlines() == ["Created experiment 1", "Experiment 1 finished: ERROR"]


# -- read commands ----------------------------------------------------------------------


def test_experiment_list_table_and_json(
    populated: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
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
    # Newest first; the archived experiment is hidden.
    assert [r.split()[0] for r in rows] == ["3", "1"]
    mnist = populated.experiment(1)["experiment"]
    row = rows[1].split()
    assert row[:5] == ["1", "mnist", "COMPLETED", "100.0%", "2"]
    assert "validation_loss=0.0712" in rows[1]
    duration = fmt_duration(mnist["start_time"], mnist["end_time"])
    assert fmt_time(mnist["start_time"]) in rows[1] and duration in rows[1]

    code, out, _ = run(capsys, "-m", populated.url, "e", "list", "--json")
    data = json.loads(out)
    assert data["total"] == 2 and data["experiments"][1] == mnist

    code, out, _ = run(capsys, "-m", populated.url, "e", "ls", "--all")
    assert "old" in out and "Archived" in out
    data = json.loads(run(capsys, "-m", populated.url, "e", "ls", "-a", "--json")[1])
    assert [e["id"] for e in data["experiments"]] == [3, 2, 1]

    # Search on the master (issue 31): filters, extra columns, CSV, projected JSON.
    code, out, _ = run(
        capsys,
        "-m",
        populated.url,
        "e",
        "list",
        "--best-metric",
        "validation_loss<0.1",
        "--columns",
        "hp.lr,searcher",
        "--csv",
    )
    header, *rows = out.splitlines()
    assert code == 0 and header.split(",")[-2:] == ["hp.lr", "Searcher"]
    assert [r.split(",")[0] for r in rows] == ["1"] and rows[0].endswith(",0.1,grid")
    code, out, _ = run(
        capsys,
        "-m",
        populated.url,
        "e",
        "ls",
        "-a",
        "--sort-by",
        "id",
        "--order-by",
        "asc",
        "--state",
        "CANCELED",
        "--state",
        "COMPLETED",
        "--json",
        "--fields",
        "name",
    )
    assert json.loads(out) == {
        "experiments": [{"id": 1, "name": "mnist"}, {"id": 2, "name": "old"}],
        "total": 2,
    }
    code, _, err = run(capsys, "-m", populated.url, "e", "list", "--hp", "lr>>1")
    assert code == 1 and "hp" in err


def test_experiment_describe_shows_trials_and_latest_validation(
    populated: Cluster, capsys: pytest.CaptureFixture[str]
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
    t1, t2 = trial_by_lr(populated, 0.1)["id"], trial_by_lr(populated, 0.2)["id"]
    row1 = next(line for line in section.splitlines() if line.split()[:1] == [str(t1)])
    row2 = next(line for line in section.splitlines() if line.split()[:1] == [str(t2)])
    assert row1.split() == [str(t1), "100", "0.9731", "0.0712"]
    assert row2.split() == [str(t2), "50", "0.91", "0.2"]

    code, out, _ = run(capsys, "-m", populated.url, "e", "describe", "1", "--json")
    data = json.loads(out)
    assert data == populated.experiment(1) and len(data["trials"]) == 2


def test_latest_validation_batches_of_a_core_api_trial(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Core API trial reports validation values without a ``batches`` key: the tables
    show the batch count the master stored with the report."""
    exp = cluster.create_experiment(VALID)
    cluster.register_agent("agent-0", slots=1)
    [(trial_id, _alloc)] = cluster.start_trials(1)
    cluster.report(trial_id, "validation", 20, {"validation_loss": 0.5})
    cluster.report(trial_id, "validation", 40, {"validation_loss": 0.25})
    trial = cluster.admin.get(f"/api/v1/trials/{trial_id}").json()["trial"]
    assert trial["latest_validation"] == {"validation_loss": 0.25}
    assert trial["latest_validation_batches"] == 40

    code, out, _ = run(capsys, "-m", cluster.url, "e", "describe", str(exp))
    assert code == 0
    section = out[out.index("Latest validation metrics") :]
    row = next(line for line in section.splitlines() if line.split()[:1] == [str(trial_id)])
    assert row.split() == [str(trial_id), "40", "0.25"]

    code, out, _ = run(capsys, "-m", cluster.url, "trial", "describe", str(trial_id))
    assert code == 0 and "Latest validation metrics (batches 40)" in out


def test_experiment_trials_checkpoints_config(
    populated: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(capsys, "-m", populated.url, "e", "list-trials", "1")[1]
    assert "COMPLETED" in out and "ck-1" in out
    trials = json.loads(run(capsys, "-m", populated.url, "e", "lt", "1", "--json")[1])["trials"]
    assert trials == populated.experiment(1)["trials"]
    out = run(capsys, "-m", populated.url, "e", "list-checkpoints", "1")[1]
    assert "ck-1" in out and "2.1 KiB" in out and "100" in out
    data = json.loads(run(capsys, "-m", populated.url, "e", "lc", "1", "--json")[1])
    assert [c["uuid"] for c in data["checkpoints"]] == ["ck-1"]
    config = populated.experiment(1)["experiment"]["config"]
    out = run(capsys, "-m", populated.url, "e", "config", "1")[1]
    assert yaml.safe_load(out) == config
    out = run(capsys, "-m", populated.url, "e", "config", "1", "--json")[1]
    assert json.loads(out) == config


def test_trial_describe(populated: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    t1 = str(trial_by_lr(populated, 0.1)["id"])
    code, out, _ = run(capsys, "-m", populated.url, "trial", "describe", t1)
    assert code == 0 and "Trial ID:" in out and "Restarts:" in out
    assert "Latest validation metrics (batches 100)" in out
    assert any(line.split() == ["accuracy", "0.9731"] for line in out.splitlines())
    code, out, _ = run(capsys, "-m", populated.url, "t", "describe", t1, "--metrics")
    assert "Training metrics" in out and "Validation metrics" in out
    training = out[out.index("Training metrics") : out.index("Validation metrics")]
    assert "loss" in training.splitlines()[1]
    assert any(line.split() == ["50", "0.5"] for line in training.splitlines())
    validation = out[out.index("Validation metrics") :]
    assert any(line.split() == ["100", "0.9731", "0.0712"] for line in validation.splitlines())
    data = json.loads(
        run(capsys, "-m", populated.url, "t", "describe", t1, "--json", "--metrics")[1]
    )
    assert data["trial"]["id"] == int(t1) and len(data["metrics"]) == 2
    assert "metrics" not in json.loads(
        run(capsys, "-m", populated.url, "t", "describe", t1, "--json")[1]
    )


def test_trial_logs_prints_all_pages_and_follows(
    populated: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    from dauntless.client import _follow

    monkeypatch.setattr(_follow, "LOG_PAGE_SIZE", 2)
    # Experiment 3's trial runs on agent-0's slot 0.
    busy = populated.experiment(3)["trials"][0]["id"]
    alloc = populated.running["agent-0"][-1]
    populated.log(alloc, *[f"line {i}" for i in range(5)])
    code, out, _ = run(capsys, "-m", populated.url, "t", "logs", str(busy))
    assert code == 0 and out.splitlines() == [f"[rank=0] line {i}" for i in range(5)]
    lines = run(capsys, "-m", populated.url, "t", "logs", str(busy), "--json")[1].splitlines()
    assert [json.loads(x)["log"] for x in lines] == [f"line {i}" for i in range(5)]

    # Following: once the command has read every stored line (a page came back empty),
    # a late line comes, then the trial is canceled and exits; the command prints the
    # line and returns once the trial has ended.
    caught_up = threading.Event()
    read = Session.get_trial_logs

    def noted(self: Session, trial_id: int, after_id: int = 0, limit: int = 1000) -> Any:
        page = read(self, trial_id, after_id=after_id, limit=limit)
        if not page["logs"]:
            caught_up.set()
        return page

    monkeypatch.setattr(Session, "get_trial_logs", noted)
    errors: list[BaseException] = []

    def late() -> None:
        try:
            assert caught_up.wait(60), "the command never caught up with the stored lines"
            populated.log(alloc, "late line", rank_id=None)
            populated.action(3, "cancel")
            populated.wait_preempted(alloc)
            populated.exited(alloc, 0)
        except BaseException as exc:  # re-raised below
            errors.append(exc)
            end_everything(populated, 3)

    follower = threading.Thread(target=late, daemon=True)
    follower.start()
    code, out, _ = run(capsys, "-m", populated.url, "t", "logs", str(busy), "-f")
    follower.join(60)
    if errors:
        raise errors[0]
    assert code == 0 and out.splitlines()[-1] == "late line"
    assert out.splitlines()[:-1] == [f"[rank=0] line {i}" for i in range(5)]
    assert populated.experiment(3)["trials"][0]["state"] == "CANCELED"


def test_trial_and_checkpoint_describe(
    populated: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    t1 = str(trial_by_lr(populated, 0.1)["id"])
    out = run(capsys, "-m", populated.url, "t", "list-checkpoints", t1)[1]
    assert "ck-1" in out
    code, out, _ = run(capsys, "-m", populated.url, "checkpoint", "describe", "ck-1")
    ckpt = populated.admin.get("/api/v1/checkpoints/ck-1").json()
    assert code == 0 and "UUID:" in out and ckpt["checkpoint"]["storage_path"] in out
    assert any(line.split() == ["state-dict.pth", "2.0", "KiB"] for line in out.splitlines())
    assert '"framework": "torch"' in out
    data = json.loads(run(capsys, "-m", populated.url, "c", "describe", "ck-1", "--json")[1])
    assert data == ckpt


def test_agents_slots_master_info(populated: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "-m", populated.url, "agent", "list")[1]
    row = next(line for line in out.splitlines() if line.startswith("agent-0"))
    assert row.split()[:7] == ["agent-0", "box", "default", "ACTIVE", "process", "2", "1"]
    agents = populated.admin.get("/api/v1/agents").json()
    assert json.loads(run(capsys, "-m", populated.url, "a", "list", "--json")[1]) == agents
    alloc = populated.running["agent-0"][-1]
    out = run(capsys, "-m", populated.url, "slot", "list")[1]
    rows = [line.split() for line in out.splitlines() if line.startswith("agent-0")]
    assert rows == [
        ["agent-0", "0", "cpu", "cpu0", "True", alloc],
        ["agent-0", "1", "cpu", "cpu1", "True", "FREE"],
    ]
    slots = json.loads(run(capsys, "-m", populated.url, "s", "list", "--json")[1])["slots"]
    assert [s["agent_id"] for s in slots] == ["agent-0", "agent-0"]
    info = populated.admin.get("/api/v1/master").json()
    out = run(capsys, "-m", populated.url, "master", "info")[1]
    assert f"Master URL:   {populated.url}" in out
    assert info["cluster_name"] in out and info["version"] in out
    data = json.loads(run(capsys, "-m", populated.url, "master", "info", "--json")[1])
    assert data["cluster_id"] == info["cluster_id"]


def test_version(cluster: Cluster, capsys: pytest.CaptureFixture[str], closed_port: int) -> None:
    code, out, _ = run(capsys, "-m", cluster.url, "version")
    assert code == 0 and "Client version: 0.1.0" in out and "Master version: 0.1.0" in out
    code, out, _ = run(capsys, "-m", f"127.0.0.1:{closed_port}", "version", "--json")
    data = json.loads(out)
    assert code == 0 and data["master"] is None and data["client"]["version"] == "0.1.0"


# -- errors -------------------------------------------------------------------------------


def test_not_found_is_one_line_error(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "-m", cluster.url, "e", "describe", "99") == (
        1, "", "Error: experiment 99 not found\n",
    )  # fmt: skip
    assert run(capsys, "-m", cluster.url, "checkpoint", "describe", "nope")[2] == (
        "Error: checkpoint nope not found\n"
    )


@pytest.fixture
def failing_server() -> Iterator[str]:
    """A server that answers every request with HTTP 500 and ``{"detail": "boom"}``: the
    real master answers 500 only for a bug, so the client's handling of one is shown
    against this."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            body = b'{"detail": "boom"}'
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_server_error_says_so(failing_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "-m", failing_server, "agent", "list")
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
