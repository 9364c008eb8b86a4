"""ASHA + TPE with BOHB's rule (searcher/_bohb.py): a third of the draws at random, the
rest from TPE fit on the results of the largest rung length that has enough of them;
restored mid-search it continues exactly (the hypothesis property test in
test_search_beyond.py drives the same config through random cut points)."""

from __future__ import annotations

import json
import statistics

from dauntless.config import parse_experiment_config
from dauntless.searcher import make_searcher, restore_searcher
from dauntless.searcher._bohb import RANDOM_FRACTION, RungModel
from dauntless.searcher._optuna_model import SpaceMap

from .test_search_beyond import ASHA_TPE, CONFIGS, Driver, run_to_end, validate

SPACE = {
    "x": {"type": "double", "minval": 0.0, "maxval": 1.0},
    "y": {"type": "double", "minval": 0.0, "maxval": 1.0},
}


def space():
    config = parse_experiment_config(
        {
            "searcher": {"name": "random", "metric": "loss", "max_trials": 1},
            "hyperparameters": SPACE,
        }
    )
    return SpaceMap(config.hyperparameters)


def test_the_model_is_fit_on_the_largest_rung_with_enough_results():
    model = RungModel({"multivariate": True}, 7, space())
    assert model.min_points == 4  # d + 2 for two hyperparameters
    # Rung 1 says small x is good, rung 4 the opposite; rung 16 has too few results.
    for _ in range(40):
        number, h = model.ask()
        model.report(number, 1, h["x"])
        if model.rung() < 4 or number % 2 == 0:
            model.report(number, 4, 1.0 - h["x"])
            model.report(number, 4, 99.0)  # a second result at one length is left out
        if number < 3:
            model.report(number, 16, h["x"])
    assert model.rung() == 4
    log = model.to_json()["log"]
    asks = [e for e in log if e[0] == "ask"]
    fit_on_4 = [e[2]["x"] for e in asks if e[3] == 4]
    fit_on_1 = [e[2]["x"] for e in asks if e[3] == 1]
    at_random = [e for e in asks if e[3] == -1]
    assert not [e for e in asks if e[3] == 16]
    assert len(fit_on_4) >= 15 and statistics.median(fit_on_4) > 0.75
    assert len(fit_on_1) <= 4  # only until rung 4 had 4 results
    assert 0.15 * 40 <= len(at_random) <= 0.55 * 40  # about a third (RANDOM_FRACTION)
    assert RANDOM_FRACTION == 1.0 / 3.0
    assert 99.0 not in [e[3] for e in log if e[0] == "report"]
    # The given n_startup_trials replaces d + 2; trial end tells change nothing.
    given = RungModel({"n_startup_trials": 9}, 7, space())
    assert given.min_points == 9
    given.tell(0, "complete", [1.0])
    assert given.to_json()["log"] == []


def test_a_restored_model_draws_what_the_uninterrupted_one_draws():
    whole = RungModel({"multivariate": True}, 3, space())
    saved = None
    for i in range(30):
        number, h = whole.ask()
        whole.report(number, 1, h["x"] + h["y"])
        if i % 3 == 0:
            whole.report(number, 4, h["x"] - h["y"])
        if i == 17:
            saved = json.loads(json.dumps(whole.to_json()))
    assert saved is not None and saved["kind"] == "largest_rung"
    part = RungModel(saved["options"], saved["seed"], space(), saved["log"])
    for i in range(18, 30):
        number, h = part.ask()
        part.report(number, 1, h["x"] + h["y"])
        if i % 3 == 0:
            part.report(number, 4, h["x"] - h["y"])
    assert part.to_json() == whole.to_json()
    assert {e[3] for e in saved["log"][1:] if e[0] == "ask"} >= {-1, 1, 4}


def test_asha_tpe_records_the_rule_and_draws_from_rungs():
    searcher = make_searcher(CONFIGS["asha_tpe"], 4)
    assert searcher.snapshot()["method"]["sampler"]["fit"] == "largest_rung"
    run_to_end(searcher, metric=lambda n: float((n * 7) % 5))
    state = searcher.snapshot()["method"]["sampler"]
    assert state["model"]["kind"] == "largest_rung"
    asks = [e for e in state["model"]["log"] if e[0] == "ask"]
    assert len(asks) == ASHA_TPE["max_trials"]
    assert any(e[3] >= 0 for e in asks)  # n_startup_trials 2: the model was used


def test_asha_tpe_snapshot_without_the_fit_continues_with_one_study():
    # A snapshot saved before the fit was recorded told one study every rung result; a
    # restored search keeps doing so, and a second restore mid-search changes nothing.
    config = CONFIGS["asha_tpe"]
    start = json.loads(json.dumps(make_searcher(config, 4).snapshot()))
    del start["method"]["sampler"]["fit"]
    whole = restore_searcher(config, start)
    whole_driver = run_to_end(whole, metric=lambda n: float((n * 7) % 5))
    state = whole.snapshot()["method"]["sampler"]
    assert state["fit"] == "all_rungs" and "kind" not in state["model"]
    assert [e for e in state["model"]["log"] if e[0] == "tell"]

    part = Driver(restore_searcher(config, start))
    part.apply(part.searcher.initial_operations())
    for n in range(12):
        validate(part, float((n * 7) % 5))
    part.searcher = restore_searcher(config, json.loads(json.dumps(part.searcher.snapshot())))
    n = 12
    while not part.searcher.is_shut_down:
        validate(part, float((n * 7) % 5))
        n += 1
    assert part.log == whole_driver.log
    assert part.searcher.snapshot() == whole.snapshot()
