"""``det experiment create`` validates only the experiment config: importing
``dauntless.config`` leaves the master's and the agent's config modules unimported until
one of their names is used (issue 37: they cost the CLI about 30 ms of CPU)."""

from __future__ import annotations

import subprocess
import sys

import dauntless.config

CLUSTER_MODULES = ("_cluster", "_provider", "_sso", "_identity", "_det_master", "_det_agent")


def test_the_experiment_config_needs_no_cluster_config_module() -> None:
    code = (
        "import sys\n"
        "from dauntless.config import ConfigError, parse_experiment_config\n"
        "parse_experiment_config({'name': 'x', 'entrypoint': 'python3 train.py', 'searcher':"
        " {'name': 'single', 'metric': 'loss', 'max_length': {'batches': 1}}})\n"
        "print(' '.join(m for m in sys.modules if m.startswith('dauntless.config.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = {m.rsplit(".", 1)[1] for m in out.split()}
    assert "_experiment" in loaded
    assert not loaded & set(CLUSTER_MODULES), loaded


def test_every_exported_name_resolves() -> None:
    for name in dauntless.config.__all__:
        assert getattr(dauntless.config, name) is not None, name
    assert dauntless.config.MasterConfig.__module__ == "dauntless.config._cluster"
    try:
        dauntless.config.NoSuchName  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchName" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
