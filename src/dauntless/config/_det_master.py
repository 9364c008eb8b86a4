"""Determined 0.38.1's ``master.yaml`` read by Dauntless's master (issue 33, scope 4).

:func:`translate_master_config` takes the mapping of a Determined master config and
returns the mapping :class:`dauntless.config.MasterConfig` validates, plus one warning
per field Dauntless does not act on; a field Dauntless cannot honour in a way the
operator would rely on is refused, naming it and why. Each top-level key of Determined's
reference (``determined-surface-platform.md`` §9.2) is in exactly one of the tables
below; keys Dauntless itself defines pass through unchanged (its own strict validation
then applies). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote


class RefusedField(ValueError):
    """A field of a Determined master config that Dauntless refuses; ``field`` names it
    and the message says why."""

    def __init__(self, field: str, why: str) -> None:
        self.field = field
        super().__init__(f"{field}: {why}")


IGNORED = {
    "config_file": "the master reads the file given by --config-file",
    "root": "the master serves its WebUI and migrations from its Python package",
    "telemetry": "Dauntless sends no telemetry",
    "enable_cors": "the master answers no cross-origin request (its CSRF protection relies on it)",
    "cache": "the master keeps no model-definition cache directory",
    "feature_switches": "the WebUI has no feature switches",
    "reserved_ports": "the master allocates no task ports of its own",
    "tensorboard_timeout": "TensorBoards run until killed",
    "notebook_timeout": "notebooks run until killed",
    "launch_error": "a request for more slots than the cluster has waits in the queue",
    "ui_customization": "the WebUI has no custom logos",
    "task_container_defaults": (
        "tasks run with the pool's runtime defaults; give environment settings in each "
        "experiment's config"
    ),
    "det_cloud": "not applicable",
    "integrations": "no Pachyderm integration",
    "__internal": "internal Determined settings",
    "scim": "SCIM provisioning is not implemented",
    "saml": "SAML single sign-on is not implemented (use oidc)",
}
"""Top-level keys accepted with a warning: Dauntless does not act on them (why)."""

REFUSED = {
    "additional_resource_managers": "several resource managers in one master are not supported",
}
"""Top-level keys refused when set (why)."""

_REFUSED_WHEN_ENABLED = ("scim", "saml")
"""Ignored keys refused instead when ``enabled: true``: an operator relies on them."""


def _refuse(field: str, why: str) -> RefusedField:
    return RefusedField(field, why)


def _db_url(db: Any) -> str:
    """A PostgreSQL URL of Determined's ``db`` block (user, password, host, port, name,
    ssl_mode, ssl_root_cert)."""
    if not isinstance(db, dict):
        raise _refuse("db", "a mapping of user, password, host, port, name")
    missing = [k for k in ("user", "host", "name") if not db.get(k)]
    if missing:
        raise _refuse(f"db.{missing[0]}", "required (Determined's db needs user, host, name)")
    unknown = sorted(
        set(db) - {"user", "password", "host", "port", "name", "ssl_mode", "ssl_root_cert"}
    )
    if unknown:
        raise _refuse(f"db.{unknown[0]}", "unknown field")
    auth = quote(str(db["user"]), safe="")
    if db.get("password"):
        auth += ":" + quote(str(db["password"]), safe="")
    url = f"postgresql+psycopg://{auth}@{db['host']}:{int(db.get('port') or 5432)}/{quote(str(db['name']), safe='')}"
    params = []
    if db.get("ssl_mode"):
        params.append(f"sslmode={quote(str(db['ssl_mode']), safe='')}")
    if db.get("ssl_root_cert"):
        params.append(f"sslrootcert={quote(str(db['ssl_root_cert']), safe='/')}")
    return url + ("?" + "&".join(params) if params else "")


def translate_master_config(raw: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Determined's master config -> Dauntless's, and the warnings to log.

    Acted on: ``db`` (-> ``db_url``, PostgreSQL), ``log.level`` (-> ``log_level``),
    ``logging`` (``type: default`` is what the master does; ``elastic`` is refused),
    ``port``, ``cluster_name``, ``checkpoint_storage``, ``resource_manager``,
    ``resource_pools``, ``security``, ``oidc`` (Dauntless's own validation of these
    applies); ``observability``, ``retention_policy``, ``webhooks``; ``security.ssh`` (shells'
    key pairs; an ``rsa_key_size`` beside another key type is dropped with a warning).

    Args:
        raw: the parsed YAML mapping (not changed).

    Returns:
        ``(config, warnings)``: a new mapping for :class:`MasterConfig`, and one warning
        per ignored field, each naming it.

    Raises:
        RefusedField: a refused field, named with the reason (also ``db`` beside
            ``db_url``).
    """
    out = dict(raw)
    warnings: list[str] = []
    for key, why in REFUSED.items():
        if out.get(key):
            raise _refuse(key, why)
        out.pop(key, None)
    for key in _REFUSED_WHEN_ENABLED:
        block = out.get(key)
        if isinstance(block, dict) and block.get("enabled"):
            raise _refuse(f"{key}.enabled", IGNORED[key])
    for key, why in IGNORED.items():
        if key in out:
            out.pop(key)
            warnings.append(f"master config field {key} is ignored: {why}")
    if "db" in out:
        db = out.pop("db")
        if out.get("db_url"):
            raise _refuse("db", "give either db (Determined's) or db_url, not both")
        out["db_url"] = _db_url(db)
    if "log" in out:
        log = out.pop("log")
        if not isinstance(log, dict):
            raise _refuse("log", "a mapping (level, color)")
        if "level" in log:
            level = str(log["level"]).lower()
            out["log_level"] = {"warn": "warning", "fatal": "error", "trace": "debug"}.get(
                level, level
            )
        if "color" in log:
            warnings.append("master config field log.color is ignored: log lines are plain text")
    if "logging" in out:
        logging_block = out.pop("logging")
        kind = logging_block.get("type", "default") if isinstance(logging_block, dict) else None
        if kind != "default":
            # Task logs go to the master's database, as Determined's default does.
            raise _refuse("logging.type", "only default (task logs in the master's database)")
    if out.get("port") == 0:
        out.pop("port")  # Determined's 0: the default port
    hooks = out.get("webhooks")
    if isinstance(hooks, dict) and not hooks.get("signing_key"):
        # Determined's empty signing key means "make one": so does an absent one here.
        out["webhooks"] = {k: v for k, v in hooks.items() if k != "signing_key"}
    security = out.get("security")
    ssh = security.get("ssh") if isinstance(security, dict) else None
    if isinstance(ssh, dict) and "rsa_key_size" in ssh and ssh.get("key_type", "ED25519") != "RSA":
        out["security"] = {**security, "ssh": {k: v for k, v in ssh.items() if k != "rsa_key_size"}}  # type: ignore[dict-item]
        warnings.append(
            "master config field security.ssh.rsa_key_size is ignored: key_type is "
            f"{ssh.get('key_type', 'ED25519')}"
        )
    return out, warnings
