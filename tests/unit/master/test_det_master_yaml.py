"""Determined 0.38.1's master.yaml starts a Dauntless master (issue 33, scope 4): every
top-level field of its reference is acted on, accepted with a warning naming it, or
refused naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from databases import fresh_postgres_database, postgres_available
from fastapi.testclient import TestClient

from dauntless.config import RefusedField, translate_master_config
from dauntless.config._det_master import IGNORED
from dauntless.master.__main__ import parse_args
from dauntless.master.app import create_app

# Every top-level key of Determined's master config reference, with a plausible value.
DETERMINED_MASTER = {
    "config_file": "/etc/determined/master.yaml",
    "log": {"level": "info", "color": True},
    "port": 0,
    "root": "/usr/share/determined/master",
    "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp", "storage_path": "ckpts"},
    "task_container_defaults": {"shm_size_bytes": 4294967296, "network_mode": "bridge"},
    "tensorboard_timeout": 300,
    "notebook_timeout": None,
    "security": {"ssh": {"key_type": "ED25519", "rsa_key_size": 1024}, "authz": {"type": "basic"}},
    "telemetry": {"enabled": True, "otel_enabled": False},
    "enable_cors": False,
    "launch_error": True,
    "cluster_name": "from-determined",
    "ui_customization": {"logo_paths": None},
    "logging": {"type": "default"},
    "retention_policy": {"log_retention_days": -1},
    "observability": {"enable_prometheus": True},
    "cache": {"cache_dir": "/var/cache/determined"},
    "webhooks": {"signing_key": "", "base_url": ""},
    "feature_switches": [],
    "reserved_ports": [],
    "resource_manager": {"type": "agent"},
    "resource_pools": [{"pool_name": "default"}],
    "additional_resource_managers": [],
    "scim": {"enabled": False},
    "oidc": {"enabled": False},
    "saml": {"enabled": False},
    "det_cloud": {},
    "integrations": {},
    "__internal": {},
}


def test_every_top_level_field_is_placed():
    raw = dict(DETERMINED_MASTER, db={"user": "u", "password": "p w", "host": "h", "name": "d"})
    out, warnings = translate_master_config(raw)
    assert out["db_url"] == "postgresql+psycopg://u:p%20w@h:5432/d"
    assert out["log_level"] == "info" and "port" not in out
    assert out["security"]["ssh"] == {"key_type": "ED25519"}  # acted on (shells' keys)
    for key in IGNORED:
        assert any(f"field {key} is ignored" in w for w in warnings), key
    assert any("security.ssh.rsa_key_size is ignored: key_type is ED25519" in w for w in warnings)
    assert any("log.color" in w for w in warnings)
    for bad, field in [
        ({"additional_resource_managers": [{"resource_manager": {}}]}, "additional_resource"),
        ({"scim": {"enabled": True}}, "scim.enabled"),
        ({"db": {"host": "h"}}, "db.user"),
        ({"db": {"user": "u", "host": "h", "name": "d", "bogus": 1}}, "db.bogus"),
        ({"db": {"user": "u", "host": "h", "name": "d"}, "db_url": "sqlite://"}, "db"),
    ]:
        with pytest.raises(RefusedField, match=field):
            translate_master_config(bad)


@pytest.mark.skipif(not postgres_available(), reason="PostgreSQL is not on 127.0.0.1:5432")
def test_determined_master_yaml_starts_a_master(tmp_path: Path, capsys):
    with fresh_postgres_database() as url:
        name = url.rsplit("/", 1)[1]
        raw = dict(
            DETERMINED_MASTER,
            db={"user": "postgres", "host": "127.0.0.1", "port": 5432, "name": name},
            checkpoint_storage={"type": "shared_fs", "host_path": str(tmp_path / "ckpt")},
        )
        path = tmp_path / "master.yaml"
        path.write_text(yaml.safe_dump(raw))
        config = parse_args(["--config-file", str(path), "--data-dir", str(tmp_path / "data")])
        err = capsys.readouterr().err
        for key in ("telemetry", "task_container_defaults", "cache"):
            assert f"master config field {key} is ignored" in err, key
        assert config.cluster_name == "from-determined" and config.db_url.endswith(name)
        # Acted on, not ignored: Prometheus, log retention, webhooks (issues 31, 34).
        assert config.observability.enable_prometheus and "observability" not in err
        assert config.retention_policy.log_retention_days == -1
        app = create_app(config, run_loop=False)
        with TestClient(app) as client:
            info = client.get("/info").json()
    assert info["clusterName"] == "from-determined"


def test_agent_yaml_keys_are_placed():
    from dauntless.config import env_agent_config, translate_agent_config
    from dauntless.config._det_agent import IGNORED as AGENT_IGNORED

    raw = {
        "master_host": "m.example",
        "master_port": 8443,
        "agent_id": "a1",
        "resource_pool": "gpu",
        "slot_type": "cpu",
        "visible_gpus": "0,1",
        "artificial_slots": 2,
        "container_runtime": "podman",
        "security": {"tls": {"enabled": True, "master_cert": "/ca.pem"}},
        **{key: None for key in AGENT_IGNORED},
    }
    settings, warnings = translate_agent_config(raw)
    assert settings == {
        "master_url": "https://m.example:8443",
        "agent_id": "a1",
        "resource_pool": "gpu",
        "slot_type": "cpu",
        "visible_gpus": "0,1",
        "artificial_slots": 2,
        "runtime": "podman",
        "master_cert_file": "/ca.pem",
    }
    assert len(warnings) == len(AGENT_IGNORED)
    assert translate_agent_config({"master_host": "h"})[0]["master_url"] == "http://h:80"
    for bad, field in [
        ({"slot_type": "rocm"}, "slot_type"),
        ({"container_runtime": "containerd"}, "container_runtime"),
        ({"security": {"tls": {"client_cert": "c"}}}, "security.tls.client_cert"),
        ({"nonsense": 1}, "nonsense"),
        ({"master_port": 1}, "master_port"),
    ]:
        with pytest.raises(RefusedField, match=field):
            translate_agent_config(bad)
    env = env_agent_config({"DET_MASTER_HOST": "h", "DET_SECURITY_TLS_SKIP_VERIFY": "true"})
    assert env == {"master_host": "h", "security": {"tls": {"skip_verify": True}}}
    assert translate_agent_config(env)[0] == {
        "master_url": "http://h:80",
        "master_cert_file": "noverify",
    }
