"""The digits example's configs: the main job's (const.yaml) and its searches are
Determined 0.38 configs that warn about nothing; the legacy-*.yaml files keep the <=0.37
style on purpose (examples of compatibility), and say so through their warnings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dauntless.config import parse_experiment_config
from dauntless.config._fields import config_warnings

DIGITS = Path(__file__).resolve().parents[3] / "examples" / "digits"


@pytest.mark.parametrize("name", ["const", "adaptive", "grid"])
def test_current_style_configs_warn_about_nothing(name: str) -> None:
    raw = yaml.safe_load((DIGITS / f"{name}.yaml").read_text())
    config = parse_experiment_config(raw)
    assert config_warnings(raw) == []
    assert raw["entrypoint"] == "python3 train.py" and not config.is_trial_class()
    assert "max_length" not in raw["searcher"] and "records_per_epoch" not in raw
    # The length lives in train.py: the `epochs` hyperparameter, or ASHA's max_time.
    assert "epochs" in raw["hyperparameters"] or raw["searcher"].get("max_time")


@pytest.mark.parametrize("name", ["const", "adaptive", "grid"])
def test_legacy_configs_are_the_same_experiments_in_the_old_style(name: str) -> None:
    legacy = yaml.safe_load((DIGITS / f"legacy-{name}.yaml").read_text())
    current = yaml.safe_load((DIGITS / f"{name}.yaml").read_text())
    assert legacy["entrypoint"] == "model_def:DigitsTrial"
    warnings = config_warnings(legacy)
    assert any(w.startswith("entrypoint: ") for w in warnings), warnings
    assert any(w.startswith("records_per_epoch: ") for w in warnings), warnings
    assert legacy["searcher"]["metric"] == current["searcher"]["metric"]
    hparams = {k: v for k, v in current["hyperparameters"].items() if k != "epochs"}
    assert legacy["hyperparameters"] == hparams
