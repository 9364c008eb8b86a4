"""Argument parsing of every command, and --config overrides."""

from __future__ import annotations

import argparse

import pytest

from dauntless.cli import (
    agent,
    apply_overrides,
    build_parser,
    checkpoint,
    deploy,
    experiment,
    main,
    master,
    slot,
    trial,
    version,
)


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_experiment_create_flags() -> None:
    a = _parse("experiment", "create", "const.yaml", "./ctx", "-f", "--paused",
               "--config", "a.b=1", "--config", "name=x")  # fmt: skip
    assert (a.config_file, a.context, a.follow, a.paused) == ("const.yaml", "./ctx", True, True)
    assert a.config == ["a.b=1", "name=x"] and a.master is None
    assert a.func.__module__ == experiment.__name__
    b = _parse("e", "create", "const.yaml")
    assert b.context is None and not b.follow and not b.paused and b.config is None
    assert _parse("e", "create", "c.yaml", "--follow-first-trial").follow


@pytest.mark.parametrize(
    ("argv", "module", "attrs"),
    [
        (["experiment", "list"], experiment, {"all": False, "json": False}),
        (["e", "ls", "-a", "--json"], experiment, {"all": True, "json": True}),
        (["e", "describe", "4", "--json"], experiment, {"experiment_ids": [4], "json": True}),
        (["e", "list-trials", "4"], experiment, {"experiment_id": 4, "json": False}),
        (["e", "lt", "4", "--json"], experiment, {"experiment_id": 4, "json": True}),
        (["e", "list-checkpoints", "4"], experiment, {"experiment_id": 4}),
        (["e", "lc", "4"], experiment, {"experiment_id": 4}),
        (["e", "config", "4", "--json"], experiment, {"experiment_id": 4, "json": True}),
        (["trial", "describe", "9", "--metrics"], trial, {"trial_id": 9, "metrics": True}),
        (["t", "describe", "9", "--json"], trial, {"trial_id": 9, "json": True}),
        (["t", "logs", "9", "-f"], trial, {"trial_id": 9, "follow": True}),
        (["t", "logs", "9"], trial, {"follow": False, "json": False}),
        (["t", "list-checkpoints", "9", "--json"], trial, {"trial_id": 9, "json": True}),
        (["checkpoint", "describe", "ab-12", "--json"], checkpoint, {"uuid": "ab-12"}),
        (["c", "describe", "ab-12"], checkpoint, {"uuid": "ab-12", "json": False}),
        (["agent", "list", "--json"], agent, {"json": True}),
        (["a", "ls"], agent, {"json": False}),
        (["slot", "list", "--json"], slot, {"json": True}),
        (["s", "list"], slot, {"json": False}),
        (["master", "info", "--json"], master, {"json": True}),
        (["version", "--json"], version, {"json": True}),
    ],
)
def test_read_commands(argv: list[str], module: object, attrs: dict[str, object]) -> None:
    args = _parse(*argv)
    assert args.func.__module__ == module.__name__
    for key, value in attrs.items():
        assert getattr(args, key) == value


def test_master_option_before_or_after_the_command() -> None:
    assert _parse("-m", "h:1", "e", "list").master == "h:1"
    assert _parse("e", "list", "-m", "h:2").master == "h:2"
    assert _parse("--master", "http://x:3", "agent", "list").master == "http://x:3"
    assert _parse("t", "logs", "1").master is None


def test_deploy_local_options() -> None:
    up = _parse("deploy", "local", "cluster-up")
    assert up.func.__module__ == deploy.__name__
    assert (up.master_port, up.agents, up.data_dir, up.artificial_slots, up.timeout) == (
        8080, 1, None, None, 60.0,
    )  # fmt: skip
    up = _parse("deploy", "local", "cluster-up", "--master-port", "9090", "--agents", "3",
                "--data-dir", "/tmp/d", "--artificial-slots", "4")  # fmt: skip
    assert (up.master_port, up.agents, up.data_dir, up.artificial_slots) == (9090, 3, "/tmp/d", 4)
    down = _parse("deploy", "local", "cluster-down", "--data-dir", "/tmp/d")
    assert down.data_dir == "/tmp/d" and down.grace == 10.0


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["experiment"],
        ["e", "describe"],
        ["e", "describe", "x"],
        ["e", "describe", "0"],
        ["t", "logs", "-3"],
        ["e", "create"],
        ["deploy", "local"],
        ["deploy", "local", "cluster-up", "--agents", "-1"],
        ["nonsense"],
    ],
)
def test_bad_usage_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "usage:" in capsys.readouterr().err


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert "0.1.0" in capsys.readouterr().out


def test_apply_overrides() -> None:
    raw = {"searcher": {"name": "single", "max_length": {"batches": 10}}, "name": "a"}
    out = apply_overrides(
        raw,
        [
            "searcher.max_length.batches=200",
            "name=b c",
            "hyperparameters.lr=0.5",
            "labels=[x, y]",
            "debug=true",
        ],
    )
    assert out is raw
    assert raw["searcher"]["max_length"]["batches"] == 200
    assert raw["name"] == "b c"
    assert raw["hyperparameters"] == {"lr": 0.5}
    assert raw["labels"] == ["x", "y"] and raw["debug"] is True


@pytest.mark.parametrize(
    ("item", "match"),
    [
        ("novalue", "KEY=VALUE"),
        ("a..b=1", "KEY=VALUE"),
        ("name.x=1", "name is not a mapping"),
        ("a=[1", "not valid YAML"),
    ],  # fmt: skip
)
def test_apply_overrides_errors(item: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        apply_overrides({"name": "a"}, [item])
