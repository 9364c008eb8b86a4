"""``det preview-search`` on Determined 0.38 configs: ASHA on a time metric of the
trial's own, and a search whose trials decide their own length."""

from __future__ import annotations

import pytest

from dauntless.cli import main

NO_MASTER = "http://127.0.0.1:9"

ASHA_EPOCHS = """
entrypoint: python3 train.py
hyperparameters:
  lr: {type: double, minval: 0.001, maxval: 0.1}
searcher:
  name: adaptive_asha
  metric: loss
  max_trials: 16
  time_metric: epochs
  max_time: 16
  mode: aggressive
"""

RANDOM = """
entrypoint: python3 train.py
hyperparameters:
  lr: {type: double, minval: 0.001, maxval: 0.1}
searcher: {name: random, metric: loss, max_trials: 3}
"""


def _run(capsys: pytest.CaptureFixture[str], tmp_path, text: str) -> tuple[int, str, str]:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    code = main(["-m", NO_MASTER, "preview-search", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def test_asha_on_epochs(capsys, tmp_path):
    code, out, err = _run(capsys, tmp_path, ASHA_EPOCHS)
    assert code == 0, err
    assert "1, 4, 16 epochs" in out  # rung thresholds in the time metric's unit
    assert "Stopped at (epochs)" in out and "Train for (epochs)" in out
    assert out.splitlines()[-1].startswith("Total: 16 trials, ") and out.endswith("epochs\n")


def test_search_whose_trials_decide_their_length(capsys, tmp_path):
    code, out, err = _run(capsys, tmp_path, RANDOM)
    assert code == 0, err
    assert out.splitlines()[-1] == (
        "Total: 3 trials; each trains as long as its own code says (no searcher.max_length)"
    )
