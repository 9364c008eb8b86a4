"""Issue 35: Optuna samplers (alone and in ASHA), multi-objective search, PBT and custom
search methods. Each is pure: a snapshot restored at any point continues with exactly
the operations of the uninterrupted search (property-based, with hypothesis)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dauntless.config import ConfigError, parse_experiment_config
from dauntless.searcher import (
    Close,
    Create,
    CustomSearch,
    ExitedReason,
    PBTSearch,
    SearcherConfigError,
    ValidateAfter,
    explore_hparams,
    make_searcher,
    operation_to_json,
    pareto_front,
    preview_document,
    restore_searcher,
    simulate,
)

from .search_methods import MAX_TRIALS, Broken, SeededRandom

HPS = {
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
    "width": {"type": "int", "minval": 4, "maxval": 64},
    "drop": {"type": "double", "minval": 0.0, "maxval": 0.5},
    "global_batch_size": {"type": "categorical", "vals": [8, 16]},
    "opt": {"name": {"type": "categorical", "vals": ["sgd", {"adam": [0.9, 0.99]}]}},
    "const": 3,
}
PBT_HPS = {k: v for k, v in HPS.items() if k != "global_batch_size"}


def cfg(searcher, hps=None, **extra):
    return parse_experiment_config(
        {"searcher": {"metric": "loss", **searcher}, "hyperparameters": hps or HPS, **extra}
    )


ASHA_TPE = {
    "name": "adaptive_asha",
    "max_trials": 10,
    "max_time": 32,
    "time_metric": "batches",
    "divisor": 2,
    "max_concurrent_trials": 3,
    "sampler": "tpe",
    "sampler_options": {"n_startup_trials": 2},
}

CONFIGS = {
    "tpe": cfg(
        {
            "name": "tpe",
            "max_trials": 10,
            "max_concurrent_trials": 3,
            "max_length": {"batches": 20},
            "sampler_options": {"n_startup_trials": 3},
        }
    ),
    "cmaes": cfg(
        {
            "name": "cmaes",
            "max_trials": 8,
            "max_concurrent_trials": 2,
            "max_length": {"batches": 20},
            "sampler_options": {"popsize": 4},
        }
    ),
    "nsgaii": cfg(
        {
            "name": "nsgaii",
            "metrics": [{"name": "loss"}, {"name": "acc", "smaller_is_better": False}],
            "max_trials": 10,
            "max_concurrent_trials": 2,
            "max_length": {"batches": 20},
            "sampler_options": {"population_size": 4},
        }
    ),
    "tpe_multi": cfg(
        {
            "name": "tpe",
            "metrics": [{"name": "loss"}, {"name": "acc", "smaller_is_better": False}],
            "max_trials": 8,
            "max_concurrent_trials": 2,
            "max_length": {"batches": 20},
            "sampler_options": {"n_startup_trials": 2},
        }
    ),
    "asha_tpe": cfg(ASHA_TPE),
    "pbt": cfg(
        {
            "name": "pbt",
            "population_size": 4,
            "num_rounds": 3,
            "length_per_round": {"batches": 10},
            "replace_function": {"truncate_fraction": 0.25},
            "explore_function": {"resample_probability": 0.3, "perturb_factor": 0.2},
        },
        PBT_HPS,
    ),
    "custom": cfg({"name": "custom", "method": "search_methods:SeededRandom"}),
}


def new(kind, seed):
    method = SeededRandom if kind == "custom" else None
    return make_searcher(CONFIGS[kind], seed, method=method)


def round_trip(searcher, kind):
    text = json.dumps(searcher.snapshot(), allow_nan=False)  # strict JSON
    method = SeededRandom if kind == "custom" else None
    return restore_searcher(CONFIGS[kind], json.loads(text), method=method)


class Driver:
    """A scripted cluster: ``step`` picks a trial and what it does next."""

    def __init__(self, searcher):
        self.searcher = searcher
        self.log = []
        self.targets = {}
        self.closing = []

    def apply(self, ops):
        queue = deque(ops)
        while queue:
            op = queue.popleft()
            self.log.append(operation_to_json(op))
            if isinstance(op, Create):
                queue.extend(self.searcher.on_trial_created(op.request_id))
            elif isinstance(op, ValidateAfter):
                self.targets[op.request_id] = op.length
            elif isinstance(op, Close):
                self.targets.pop(op.request_id, None)
                self.closing.append(op.request_id)

    def step(self, choice, metric):
        options = [("close", r) for r in self.closing] + [("run", r) for r in self.targets]
        if not options:
            return
        what, rid = options[choice % len(options)]
        mode = (choice // len(options)) % 10
        if what == "close":
            self.closing.remove(rid)
            self.apply(self.searcher.on_trial_closed(rid))
        elif mode == 0:
            del self.targets[rid]
            reason = [ExitedReason.ERRORED, ExitedReason.INVALID_HP][choice % 2]
            self.apply(
                self.searcher.on_trial_exited_early(rid, reason)
                + self.searcher.on_trial_closed(rid)
            )
        else:
            metrics = {"loss": metric, "acc": 1.0 - metric / 2}
            length = self.targets.pop(rid)
            self.apply(self.searcher.on_validation_completed(rid, metric, length, metrics))


STEP = st.tuples(st.integers(0, 10_000), st.sampled_from([0.1, 0.2, 0.5, 0.7, 1.3, math.nan]))


@settings(max_examples=30, deadline=None)
@given(
    kind=st.sampled_from(sorted(CONFIGS)),
    seed=st.integers(0, 2**31 - 1),
    steps=st.lists(STEP, max_size=40),
    cut=st.integers(0, 40),
)
def test_restore_mid_search_gives_the_same_decisions(kind, seed, steps, cut):
    original = Driver(new(kind, seed))
    original.apply(original.searcher.initial_operations())
    for step in steps:
        original.step(*step)

    resumed = Driver(new(kind, seed))
    resumed.apply(resumed.searcher.initial_operations())
    for i, step in enumerate(steps):
        if i == cut:
            resumed.searcher = round_trip(resumed.searcher, kind)
        resumed.step(*step)
    if cut >= len(steps):
        resumed.searcher = round_trip(resumed.searcher, kind)
    # ... and once more with nothing cached (the study is rebuilt from the log).
    resumed.searcher = round_trip(resumed.searcher, kind)
    for step in [(7, 0.3), (3, 0.1), (11, 0.2)]:
        original.step(*step)
        resumed.step(*step)

    assert resumed.log == original.log
    assert resumed.searcher.progress() == original.searcher.progress()
    assert resumed.searcher.snapshot() == original.searcher.snapshot()
    assert 0.0 <= original.searcher.progress() <= 1.0


def run_to_end(searcher, metric=lambda n: 1.0 / (n + 1)):
    driver = Driver(searcher)
    driver.apply(searcher.initial_operations())
    n = 0
    while not searcher.is_shut_down:
        assert driver.targets or driver.closing, "the search stalled"
        validate(driver, metric(n))
        n += 1
    return driver


def validate(driver, metric):
    """Close a closing trial if there is one, else validate the oldest running one."""
    if driver.closing:
        driver.apply(driver.searcher.on_trial_closed(driver.closing.pop(0)))
        return
    rid = next(iter(driver.targets))
    length = driver.targets.pop(rid)
    metrics = {"loss": metric, "acc": 1.0 - metric / 2}
    driver.apply(driver.searcher.on_validation_completed(rid, metric, length, metrics))


def test_gp_restores_exactly():
    config = cfg(
        {
            "name": "gp",
            "max_trials": 4,
            "max_concurrent_trials": 1,
            "max_length": {"batches": 5},
            "sampler_options": {"n_startup_trials": 2},
        },
        {"x": {"type": "double", "minval": 0, "maxval": 1}},
    )
    whole = run_to_end(make_searcher(config, 5))
    part = Driver(make_searcher(config, 5))
    part.apply(part.searcher.initial_operations())
    n = 0
    while not part.searcher.is_shut_down:
        validate(part, 1.0 / (n + 1))
        n += 1
        if n == 5:  # a restore replays the GP fits so far (slow): once, mid-search
            snap = json.loads(json.dumps(part.searcher.snapshot()))
            part.searcher = restore_searcher(config, snap)
    assert part.log == whole.log
    assert len([e for e in whole.log if e["type"] == "create"]) == 4


def test_tpe_learns_and_optuna_is_imported_only_when_used():
    branin = cfg(
        {"name": "tpe", "max_trials": 40, "max_length": {"batches": 1}, "max_concurrent_trials": 1},
        {
            "x": {"type": "double", "minval": -5, "maxval": 10},
            "y": {"type": "double", "minval": 0, "maxval": 15},
        },
    )

    def objective(h, _length, _seed):
        x, y = h["x"], h["y"]
        return (
            (y - 5.1 / (4 * math.pi**2) * x * x + 5 / math.pi * x - 6) ** 2
            + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x)
            + 10
        )

    result = simulate(branin, objective, 1)
    assert result.best_metric < 3.0  # Branin's minimum is 0.398
    late = [objective(t.hparams, 1, 0) for t in result.trials[20:]]
    early = [objective(t.hparams, 1, 0) for t in result.trials[:10]]
    assert sorted(late)[len(late) // 2] < sorted(early)[len(early) // 2]
    code = (
        "import sys, dauntless, dauntless.searcher, dauntless.master.app;"
        "print('optuna' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_optuna_is_refused_naming_the_field():
    code = (
        "import sys; sys.modules['optuna'] = None\n"
        "from dauntless.config import parse_experiment_config\n"
        "from dauntless.searcher import make_searcher, SearcherConfigError\n"
        "c = parse_experiment_config({'searcher': {'name': 'tpe', 'metric': 'm',"
        " 'max_trials': 2}})\n"
        "try:\n    make_searcher(c, 0)\nexcept SearcherConfigError as e:\n"
        "    print(e.field, '|', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("searcher.name |"), out
    assert "dauntless[search]" in out.stdout


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="sampler_options.bogus"):
        cfg({"name": "tpe", "max_trials": 2, "sampler_options": {"bogus": 1}})
    with pytest.raises(ConfigError, match="sampler_options.n_startup_trials: expected int"):
        cfg({"name": "tpe", "max_trials": 2, "sampler_options": {"n_startup_trials": "x"}})
    with pytest.raises(ConfigError, match="one objective only"):
        parse_experiment_config(
            {
                "searcher": {
                    "name": "cmaes",
                    "max_trials": 2,
                    "metrics": [{"name": "a"}, {"name": "b"}],
                }
            }
        )
    with pytest.raises(ConfigError, match="truncate_fraction"):
        cfg(
            {
                "name": "pbt",
                "population_size": 2,
                "num_rounds": 1,
                "length_per_round": 5,
                "replace_function": {"truncate_fraction": 0.9},
                "explore_function": {"resample_probability": 0, "perturb_factor": 0},
            }
        )
    with pytest.raises(ConfigError, match="method"):
        cfg({"name": "custom", "method": "not a class"})


def test_multi_objective_reads_every_objective():
    searcher = make_searcher(CONFIGS["nsgaii"], 3)
    ops = searcher.initial_operations()
    rid = ops[0].request_id
    searcher.on_trial_created(rid)
    assert searcher.wants_validation_metrics
    with pytest.raises(ValueError, match="'acc'"):
        searcher.on_validation_completed(rid, 0.5, 20, {"loss": 0.5})
    points = [[1, 5], [2, 6], [0.5, 1], [1, 5], [3, 4], [0, math.nan]]
    assert pareto_front(points, [True, False]) == [0, 1, 2, 3]
    assert pareto_front([[1, 1], [1, 1]], [True, True]) == [0, 1]
    result = simulate(
        CONFIGS["nsgaii"], lambda h, _l, _s: {"loss": h["drop"], "acc": h["drop"] ** 0.5}, 2
    )
    assert len(result.trials) == 10 and result.shutdown.failure is False


def test_asha_with_tpe_tells_each_trial_its_latest_rung_result():
    config = CONFIGS["asha_tpe"]
    result = simulate(config, lambda h, length, _s: h["drop"] + 1.0 / length, 4, max_concurrent=3)
    assert len(result.trials) == 10
    snap = make_searcher(config, 4).snapshot()
    assert snap["method"]["sampler"]["model"] is None  # not started: no sampler yet
    searcher = make_searcher(config, 4)
    driver = run_to_end(searcher, metric=lambda n: float((n * 7) % 5))
    state = searcher.snapshot()["method"]["sampler"]
    assert state["stopped"] == "complete"
    log = state["model"]["log"]
    latest = {}  # trial number -> (step, value) of its last rung result
    for e in log:
        if e[0] == "report":
            latest[e[1]] = (e[2], e[3])
    tells = [e for e in log if e[0] == "tell"]
    assert len(tells) == 10 and {e[2] for e in tells} == {"complete"}
    # Every trial is told the value of the last rung it reached, stopped ones included.
    assert all(e[3] == [latest[e[1]][1]] for e in tells)
    assert any(latest[e[1]][0] < 32 for e in tells)  # some were stopped below the top
    assert driver.log[-1]["type"] == "shutdown"


def test_asha_with_cmaes_still_prunes_stopped_trials():
    config = cfg({**ASHA_TPE, "sampler": "cmaes", "sampler_options": {}})
    searcher = make_searcher(config, 4)
    run_to_end(searcher, metric=lambda n: float((n * 7) % 5))
    state = searcher.snapshot()["method"]["sampler"]
    assert state["stopped"] == "pruned"
    tells = [e[2] for e in state["model"]["log"] if e[0] == "tell"]
    assert "pruned" in tells and "complete" in tells


def test_asha_tpe_snapshot_without_the_rule_continues_pruning_as_it_was_made():
    # A snapshot saved before the rule was recorded told stopped trials PRUNED; a
    # restored search keeps doing so, and a second restore mid-search changes nothing.
    config = CONFIGS["asha_tpe"]
    start = json.loads(json.dumps(make_searcher(config, 4).snapshot()))
    del start["method"]["sampler"]["stopped"]
    whole = restore_searcher(config, start)
    whole_driver = run_to_end(whole, metric=lambda n: float((n * 7) % 5))
    state = whole.snapshot()["method"]["sampler"]
    assert state["stopped"] == "pruned"
    assert "pruned" in [e[2] for e in state["model"]["log"] if e[0] == "tell"]

    part = Driver(restore_searcher(config, start))
    part.apply(part.searcher.initial_operations())
    for n in range(12):
        validate(part, float((n * 7) % 5))
    mid = json.loads(json.dumps(part.searcher.snapshot()))
    del mid["method"]["sampler"]["stopped"]
    part.searcher = restore_searcher(config, mid)
    n = 12
    while not part.searcher.is_shut_down:
        validate(part, float((n * 7) % 5))
        n += 1
    assert part.log == whole_driver.log
    assert part.searcher.snapshot() == whole.snapshot()


def test_replay_refuses_a_diverging_optuna():
    searcher = make_searcher(CONFIGS["tpe"], 9)
    Driver(searcher).apply(searcher.initial_operations())
    snap = json.loads(json.dumps(searcher.snapshot()))
    ask = next(e for e in snap["method"]["model"]["log"] if e[0] == "ask")
    ask[2]["drop"] = -1.0
    restored = restore_searcher(CONFIGS["tpe"], snap)
    rid = snap["trials"][0]["request_id"]
    with pytest.raises(ValueError, match="samples differently"):
        restored.on_validation_completed(rid, 0.1, 20)
        restored.on_trial_closed(rid)


def test_tpe_defaults_are_pinned_and_recorded_and_old_snapshots_replay_as_made():
    # One objective: multivariate TPE with the constant liar, whatever Optuna's own
    # defaults are; an option the config gives wins; several objectives: no multivariate.
    single = make_searcher(CONFIGS["tpe"], 4)
    Driver(single).apply(single.initial_operations())
    assert single.snapshot()["method"]["model"]["options"] == {
        "n_startup_trials": 3,
        "multivariate": True,
        "constant_liar": True,
    }
    multi = make_searcher(CONFIGS["tpe_multi"], 4)
    Driver(multi).apply(multi.initial_operations())
    assert multi.snapshot()["method"]["model"]["options"] == {
        "n_startup_trials": 2,
        "constant_liar": True,
    }
    given = cfg(
        {
            "name": "tpe",
            "max_trials": 4,
            "max_length": {"batches": 20},
            "sampler_options": {"multivariate": False, "constant_liar": False},
        }
    )
    own = make_searcher(given, 4)
    Driver(own).apply(own.initial_operations())
    assert own.snapshot()["method"]["model"]["options"] == {
        "multivariate": False,
        "constant_liar": False,
    }
    asha = make_searcher(CONFIGS["asha_tpe"], 4)
    Driver(asha).apply(asha.initial_operations())
    assert asha.snapshot()["method"]["sampler"]["model"]["options"]["multivariate"] is True

    # A snapshot from before the options were recorded was built with the config's
    # options alone; it is restored with exactly those (and says so when saved again).
    original = Driver(make_searcher(CONFIGS["tpe"], 8))
    original.apply(original.searcher.initial_operations())
    old = json.loads(json.dumps(original.searcher.snapshot()))
    del old["method"]["model"]["options"]
    restored = Driver(restore_searcher(CONFIGS["tpe"], old))
    restored.targets = dict(original.targets)
    before = len(original.log)
    for step in [(0, 0.3), (1, 0.1), (2, 0.2), (0, 0.5)]:
        original.step(*step)
        restored.step(*step)
    assert len(original.log) > before + 2  # the steps made new proposals
    assert restored.log == original.log[before:]
    assert restored.searcher.snapshot()["method"]["model"]["options"] == {"n_startup_trials": 3}


def test_pbt_rounds_truncate_clone_and_continue():
    config = cfg(
        {
            "name": "pbt",
            "population_size": 4,
            "num_rounds": 2,
            "length_per_round": {"batches": 10},
            "replace_function": {"truncate_fraction": 0.25},
            "explore_function": {"resample_probability": 0.0, "perturb_factor": 0.5},
        },
        {
            "w": {"type": "int", "minval": 1, "maxval": 100},
            "c": {"type": "categorical", "vals": [1, 2]},
        },
    )
    searcher = make_searcher(config, 11)
    assert isinstance(searcher, PBTSearch)
    first = [op.request_id for op in searcher.initial_operations()]
    ops = []
    for i, rid in enumerate(first):
        assert searcher.on_trial_created(rid) == [ValidateAfter(rid, 10)]
        ops = searcher.on_validation_completed(rid, [0.4, 0.1, 0.9, 0.2][i], 10)
        if i < 3:
            assert ops == []
    # The worst (0.9) is closed, the best (0.1) cloned, the others train on to 20.
    closes = [op for op in ops if isinstance(op, Close)]
    creates = [op for op in ops if isinstance(op, Create)]
    validates = [op for op in ops if isinstance(op, ValidateAfter)]
    assert closes == [Close(first[2])]
    assert len(creates) == 1 and creates[0].parent_request_id == first[1]
    parent = {t.request_id: t for t in searcher.trials()}[first[1]].hparams
    assert creates[0].hparams["c"] == parent["c"]
    assert creates[0].hparams["w"] in (
        max(1, parent["w"] // 2),
        min(100, math.ceil(parent["w"] * 1.5)),
    )
    assert sorted(v.request_id for v in validates) == sorted([first[0], first[1], first[3]])
    assert all(v.length == 20 for v in validates)
    assert searcher.on_trial_created(creates[0].request_id) == [
        ValidateAfter(creates[0].request_id, 10)
    ]
    assert searcher.lineage()[creates[0].request_id] == first[1]
    assert 0 < searcher.progress() < 1


def test_explore_clamps_and_resamples():
    import numpy as np

    from dauntless.config import parse_hyperparameters

    space = parse_hyperparameters(
        {
            "i": {"type": "int", "minval": 1, "maxval": 10},
            "d": {"type": "double", "minval": 0.0, "maxval": 1.0},
            "l": {"type": "log", "base": 10, "minval": -3, "maxval": -1},
            "n": {"k": 5},
        }
    )
    rng = np.random.RandomState(0)
    for _ in range(50):
        out = explore_hparams(space, {"i": 10, "d": 1.0, "l": 0.1, "n": {"k": 5}}, 0.0, 0.9, rng)
        assert 1 <= out["i"] <= 10 and 0.0 <= out["d"] <= 1.0 and 1e-3 <= out["l"] <= 0.1
        assert out["n"] == {"k": 5}
    resampled = explore_hparams(space, {"i": 10, "d": 1.0, "l": 0.1, "n": {"k": 5}}, 1.0, 0.0, rng)
    assert resampled["n"] == {"k": 5}


def test_custom_method_runs_and_its_errors_fail_the_search_only():
    config = CONFIGS["custom"]
    driver = run_to_end(make_searcher(config, 4, method=SeededRandom))
    creates = [e for e in driver.log if e["type"] == "create"]
    assert [e["request_id"] for e in creates] == [f"trial-{i}" for i in range(1, MAX_TRIALS + 1)]
    assert driver.log[-1] == {"type": "shutdown", "cancel": False, "failure": False}

    broken = make_searcher(config, 4, method=Broken)
    d = Driver(broken)
    d.apply(broken.initial_operations())
    validate(d, 0.5)
    assert broken.method_error is not None
    assert "broken on purpose" in broken.method_error and "Traceback" in broken.method_error
    restored = round_trip(broken, "custom")
    assert restored.method_error == broken.method_error


def test_remote_custom_search_acknowledges_events_once():
    config = cfg({"name": "custom"})
    searcher = make_searcher(config, 1)
    assert isinstance(searcher, CustomSearch) and searcher.remote
    assert searcher.initial_operations() == []
    [event] = searcher.pending_events()
    assert event == {"id": 1, "initialOperations": {}}
    wire = [
        {"createTrial": {"requestId": "a", "hyperparams": {"x": 1}}},
        {"trialOperation": {"validateAfter": {"requestId": "a", "length": "7"}}},
    ]
    ops = searcher.apply_remote_operations(wire, 1)
    assert isinstance(ops[0], Create) and ops[0].hparams == {"x": 1}
    assert searcher.apply_remote_operations(wire, 1) == []  # a repeated post
    assert searcher.on_trial_created("a") == [ValidateAfter("a", 7)]
    assert [e["id"] for e in searcher.pending_events()] == [2]
    with pytest.raises(ValueError, match="no such event"):
        searcher.apply_remote_operations([], 9)
    with pytest.raises(ValueError, match="bad searcher operation"):
        searcher.apply_remote_operations([{"explode": {}}], 2)
    restored = restore_searcher(config, json.loads(json.dumps(searcher.snapshot())))
    assert restored.pending_events() == searcher.pending_events()
    ops = restored.apply_remote_operations([{"shutDown": {"cancel": False, "failure": True}}], 2)
    assert ops == [Close("a")]
    final = restored.on_trial_closed("a")
    assert operation_to_json(final[-1]) == {"type": "shutdown", "cancel": False, "failure": True}


def test_previews_cover_the_new_searchers():
    doc = preview_document(CONFIGS["tpe"], 3)
    assert doc["summary"]["num_trials"] == 10 and "objective" in doc["summary"]
    pbt = preview_document(CONFIGS["pbt"], 3)
    assert pbt["summary"]["num_trials"] == 4 + 1 * 2
    custom = preview_document(CONFIGS["custom"], 3, method=SeededRandom)
    assert custom["summary"]["num_trials"] == MAX_TRIALS
    with pytest.raises(SearcherConfigError, match="remote runner"):
        preview_document(cfg({"name": "custom"}), 3)


def test_det_preview_search_covers_model_and_custom_searchers(tmp_path, capsys):
    from dauntless.cli import main

    tpe = tmp_path / "tpe.yaml"
    tpe.write_text(
        "hyperparameters: {x: {type: double, minval: 0, maxval: 1}}\n"
        "searcher: {name: tpe, metric: loss, max_trials: 3, max_length: 5}\n"
    )
    assert main(["-m", "http://127.0.0.1:9", "preview-search", str(tpe)]) == 0
    out = capsys.readouterr().out
    assert "synthetic objective" in out and "Total: 3 trials, 15 batches" in out
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "search_methods.py").write_text(
        (Path(__file__).parent / "search_methods.py").read_text()
    )
    custom = tmp_path / "custom.yaml"
    custom.write_text(
        "hyperparameters: {global_batch_size: 32}\n"
        "searcher: {name: custom, metric: loss, method: 'search_methods:SeededRandom'}\n"
    )
    assert main(["-m", "http://127.0.0.1:9", "preview-search", str(custom), str(ctx)]) == 0
    out = capsys.readouterr().out
    assert f"Total: {MAX_TRIALS} trials" in out
    assert main(["-m", "http://127.0.0.1:9", "preview-search", str(custom)]) != 0
    assert "give the context directory" in capsys.readouterr().err
