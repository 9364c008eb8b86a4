"""Configs of Determined's own tutorials through our create path (in-process master).

The configs below restate, field for field, the experiment configs of Determined's
``examples/tutorials`` (determined-ai/determined: ``mnist_pytorch``, ``core_api``,
``core_api_pytorch_mnist``, ``trainer_api``), as stored in that repository, both the
≤0.37 versions (``searcher.max_length``, ``module:Class``) and the 0.38 shapes
(no ``max_length``; ASHA with ``time_metric``/``max_time``). Each must be accepted with
the warnings Determined 0.38 would print, or refused with the error 0.38 gives.
"""

from __future__ import annotations

import pytest
import yaml
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig, parse_experiment_config, searcher_length
from dauntless.master.app import create_app
from dauntless.master.testing import model_def_tarball, sign_in

MNIST_HPS = {
    "global_batch_size": 64,
    "learning_rate": {"type": "double", "minval": 0.0001, "maxval": 1.0},
    "n_filters1": {"type": "int", "minval": 8, "maxval": 64},
    "n_filters2": {"type": "int", "minval": 8, "maxval": 72},
    "dropout1": {"type": "double", "minval": 0.2, "maxval": 0.8},
    "dropout2": {"type": "double", "minval": 0.2, "maxval": 0.8},
}
MNIST_DATA = {"url": "https://example.invalid/pytorch_mnist.tar.gz"}

# name -> (config, expected: "ok" | "refused:<field>", warned fields, 0.38 mode?)
EXAMPLES = {
    "mnist_pytorch/const.yaml (<=0.37)": (
        {
            "description": "mnist_pytorch_const",
            "data": MNIST_DATA,
            "hyperparameters": {
                "learning_rate": 1.0,
                "global_batch_size": 64,
                "n_filters1": 32,
                "n_filters2": 64,
                "dropout1": 0.25,
                "dropout2": 0.5,
            },
            "searcher": {
                "name": "single",
                "metric": "validation_loss",
                "max_length": {"batches": 937},
                "smaller_is_better": True,
            },
            "entrypoint": "model_def:MNistTrial",
        },
        "ok",
        {"searcher.max_length", "entrypoint"},
        False,
    ),
    "mnist_pytorch/const.yaml (0.38)": (
        {
            "name": "mnist_pytorch_const",
            "hyperparameters": {"learning_rate": 1.0, "n_filters1": 32, "n_filters2": 64},
            "searcher": {"name": "single", "metric": "validation_loss"},
            "entrypoint": "python3 train.py",
        },
        "ok",
        set(),
        True,
    ),
    "mnist_pytorch/adaptive.yaml (<=0.37)": (
        {
            "description": "mnist_pytorch_adaptive_search",
            "data": MNIST_DATA,
            "hyperparameters": MNIST_HPS,
            "searcher": {
                "name": "adaptive_asha",
                "metric": "validation_loss",
                "smaller_is_better": True,
                "max_trials": 16,
                "max_length": {"batches": 937},
            },
            "entrypoint": "model_def:MNistTrial",
        },
        "ok",
        {"searcher.max_length", "entrypoint"},
        False,
    ),
    "mnist_pytorch/adaptive.yaml (0.38)": (
        {
            "hyperparameters": MNIST_HPS,
            "searcher": {
                "name": "adaptive_asha",
                "metric": "validation_loss",
                "smaller_is_better": True,
                "max_trials": 16,
                "time_metric": "batches",
                "max_time": 937,
            },
            "entrypoint": "python3 train.py",
        },
        "ok",
        set(),
        True,
    ),
    "mnist_pytorch/dist_random.yaml": (
        {
            "name": "mnist_pytorch_dist_random_search",
            "data": MNIST_DATA,
            "resources": {"slots_per_trial": 2},
            "hyperparameters": MNIST_HPS,
            "searcher": {
                "name": "random",
                "metric": "accuracy",
                "smaller_is_better": True,
                "max_trials": 2,
                "max_length": {"batches": 937},
            },
            "entrypoint": "model_def:MNistTrial",
        },
        "ok",
        {"searcher.max_length", "entrypoint"},
        False,
    ),
    "core_api/2_checkpoints.yaml": (
        {
            "name": "core-api-stage-2",
            "entrypoint": "python3 2_checkpoints.py",
            "searcher": {"name": "single", "metric": "x"},
            "max_restarts": 0,
        },
        "ok",
        set(),
        True,
    ),
    "core_api/3_hpsearch.yaml": (
        {
            "name": "core-api-stage-3",
            "entrypoint": "python3 3_hpsearch.py",
            "hyperparameters": {"increment_by": {"type": "int", "minval": 1, "maxval": 8}},
            "searcher": {
                "name": "adaptive_asha",
                "metric": "x",
                "max_trials": 10,
                "time_metric": "batches",
                "max_time": 100,
            },
            "max_restarts": 0,
        },
        "ok",
        set(),
        True,
    ),
    "core_api/4_distributed.yaml (<=0.37, unitless max_length)": (
        {
            "name": "core-api-stage-4",
            "entrypoint": "./4_distributed.py launcher",
            "resources": {"slots_per_trial": 8},
            "hyperparameters": {"increment_by": {"type": "int", "minval": 1, "maxval": 8}},
            "searcher": {"name": "single", "metric": "x", "max_length": 100},
            "max_restarts": 0,
        },
        "ok",
        {"searcher.max_length"},
        False,
    ),
    "core_api_pytorch_mnist/adaptive.yaml": (
        {
            "name": "coreapi_mnist_tutorial_adaptive_search",
            "hyperparameters": MNIST_HPS,
            "max_restarts": 0,
            "records_per_epoch": 60000,
            "searcher": {
                "name": "adaptive_asha",
                "metric": "test_loss",
                "smaller_is_better": True,
                "max_trials": 50,
                "time_metric": "epochs",
                "max_time": 20,
            },
            "entrypoint": "python3 model_def_adaptive.py --epochs 20",
        },
        "ok",
        {"records_per_epoch"},
        True,
    ),
    # ASHA without max_time/time_metric (nor max_length): Determined 0.38 refuses it.
    "core_api_pytorch_mnist/distributed.yaml": (
        {
            "name": "coreapi_mnist_tutorial_distributed",
            "entrypoint": "python3 -m determined.launch.torch_distributed python3 m.py",
            "hyperparameters": MNIST_HPS,
            "max_restarts": 0,
            "records_per_epoch": 60000,
            "searcher": {
                "name": "adaptive_asha",
                "metric": "test_loss",
                "smaller_is_better": True,
                "max_trials": 500,
            },
            "resources": {"slots_per_trial": 4},
        },
        "refused:searcher",
        set(),
        True,
    ),
    "trainer_api/det.yaml": (
        {
            "name": "mnist_pytorch_const",
            "hyperparameters": {"global_batch_size": 32},
            "searcher": {
                "name": "single",
                "metric": "validation_loss",
                "max_length": {"batches": 937},
            },
            "max_restarts": 0,
            "resources": {"slots_per_trial": 8},
            "entrypoint": "python3 -m determined.launch.torch_distributed python3 train.py",
        },
        "ok",
        {"searcher.max_length"},
        False,
    ),
}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    app = create_app(
        MasterConfig(data_dir=str(tmp_path_factory.mktemp("m")), port=18080), run_loop=False
    )
    with TestClient(app) as c:
        sign_in(c)
        yield c


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_determined_tutorial_config(client, name):
    config, expected, warned, mode_038 = EXAMPLES[name]
    r = client.post(
        "/api/v1/experiments",
        data={"config": yaml.safe_dump(config), "activate": "false"},
        files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
    )
    if expected.startswith("refused:"):
        assert r.status_code == 400, r.text
        assert expected.split(":", 1)[1] in {e["field"] for e in r.json()["errors"]}
        return
    assert r.status_code == 201, r.text
    got = {w.split(":")[0] for w in r.json()["warnings"]}
    assert got == warned, r.json()["warnings"]
    cfg = parse_experiment_config(r.json()["experiment"]["config"])
    assert (searcher_length(cfg) is None) == mode_038
