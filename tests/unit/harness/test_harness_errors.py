"""How the harness reports a failing model definition (issue 18, scope 7)."""

from __future__ import annotations

import sys

import pytest

from dauntless.exec.harness import report_error
from dauntless.pytorch._import import load_trial_class


def test_error_in_model_code_shows_the_cause_first_and_only_user_frames(tmp_path, capsys):
    (tmp_path / "bad_model.py").write_text(
        "def helper():\n    raise RuntimeError('boom in model')\n\nhelper()\n"
    )
    try:
        with pytest.raises(RuntimeError) as info:
            load_trial_class("bad_model:Trial", str(tmp_path))
    finally:
        sys.modules.pop("bad_model", None)
    report_error(info.value)
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "harness error: RuntimeError: boom in model"
    assert "bad_model.py" in err and "helper()" in err  # the model's frames are kept
    assert "dauntless" not in err.replace("harness error", "")  # none of ours
    assert "importlib" not in err
