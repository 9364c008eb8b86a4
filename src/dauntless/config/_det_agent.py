"""Determined 0.38.1's ``agent.yaml`` (and its ``DET_*`` environment variables) read by
Dauntless's agent (issue 33, scope 4): ``python -m dauntless.agent --config-file
agent.yaml``.

:func:`translate_agent_config` maps each key of Determined's agent reference
(``determined-surface-platform.md`` §9.3) to the agent's own settings (the names of its
flags, with ``_``), or accepts it with a warning naming it, or refuses it naming it and
why; Dauntless's own agent settings are accepted under their names too. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._det_master import RefusedField

OWN = frozenset(
    {
        "master_url",
        "agent_id",
        "resource_pool",
        "slot_type",
        "artificial_slots",
        "visible_gpus",
        "work_dir",
        "heartbeat_interval",
        "advertise_addr",
        "runtime",
        "orphan_grace_period",
        "master_cert_file",
        "cluster_secret_file",
        "warm_start",
    }
)
"""Dauntless's own agent settings (its flags' names with ``_``)."""

IGNORED = {
    "config_file": "the agent reads the file given by --config-file",
    "debug": "use the agent's log output",
    "log": "the agent logs at INFO to stderr",
    "container_master_host": "tasks reach the master at the agent's --master-url",
    "container_master_port": "tasks reach the master at the agent's --master-url",
    "tls": "the agent serves no API of its own",
    "tls_cert": "the agent serves no API of its own",
    "tls_key": "the agent serves no API of its own",
    "api_enabled": "the agent serves no API of its own",
    "bind_ip": "the agent serves no API of its own",
    "bind_port": "the agent serves no API of its own",
    "http_proxy": "not passed to tasks: set it in the experiment's environment variables",
    "https_proxy": "not passed to tasks: set it in the experiment's environment variables",
    "ftp_proxy": "not passed to tasks: set it in the experiment's environment variables",
    "no_proxy": "not passed to tasks: set it in the experiment's environment variables",
    "agent_reconnect_attempts": "the agent retries the master until it is stopped",
    "agent_reconnect_backoff": "the agent retries the master until it is stopped",
    "container_auto_remove_disabled": "task containers are always removed",
    "fluent": "removed in Determined too: logs are shipped by the agent",
    "hooks": "no hooks run when the master is lost (the agent keeps retrying)",
}
"""Determined agent keys accepted with a warning (why)."""

ENV = {
    "DET_MASTER_HOST": "master_host",
    "DET_MASTER_PORT": "master_port",
    "DET_AGENT_ID": "agent_id",
    "DET_RESOURCE_POOL": "resource_pool",
    "DET_SLOT_TYPE": "slot_type",
    "DET_VISIBLE_GPUS": "visible_gpus",
    "DET_ARTIFICIAL_SLOTS": "artificial_slots",
    "DET_CONTAINER_RUNTIME": "container_runtime",
    "DET_SECURITY_TLS_ENABLED": "security.tls.enabled",
    "DET_SECURITY_TLS_SKIP_VERIFY": "security.tls.skip_verify",
    "DET_SECURITY_TLS_MASTER_CERT": "security.tls.master_cert",
}
"""Determined's environment variables of agent keys (``DET_`` + the flag's name)."""


def env_agent_config(environ: Mapping[str, str]) -> dict[str, Any]:
    """The agent keys set by Determined's ``DET_*`` environment variables (dotted keys
    nested), as :func:`translate_agent_config` takes them."""
    out: dict[str, Any] = {}
    for name, key in ENV.items():
        if environ.get(name):
            value: Any = environ[name]
            if key.endswith(("enabled", "skip_verify")):
                value = value.strip().lower() in ("1", "true", "yes")
            node = out
            *parents, leaf = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
    return out


def _master_url(raw: dict[str, Any], tls: dict[str, Any]) -> str:
    host = str(raw["master_host"])
    secure = bool(tls.get("enabled"))
    port = raw.get("master_port") or (443 if secure else 80)
    if "://" in host:
        raise RefusedField("master_host", "a host name or address, without a scheme")
    return f"{'https' if secure else 'http'}://{host}:{int(port)}"


def translate_agent_config(raw: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Determined's agent config -> the agent's settings, and the warnings to log.

    Acted on: ``master_host``/``master_port`` (and ``security.tls.enabled``: https) ->
    ``master_url``; ``agent_id``, ``resource_pool``, ``slot_type``, ``visible_gpus``,
    ``artificial_slots``; ``container_runtime`` (docker, podman) -> ``runtime``;
    ``security.tls.skip_verify`` / ``master_cert`` -> ``master_cert_file``.

    Returns:
        ``(settings, warnings)``: settings keyed by the agent's flag names (``_``).

    Raises:
        RefusedField: an unknown key, ``slot_type: rocm``, another ``container_runtime``,
            client certificates (``security.tls.client_cert``/``client_key``), a
            ``security.tls.master_cert_name``, or both ``master_host`` and ``master_url``.
    """
    out: dict[str, Any] = {}
    warnings: list[str] = []
    security = raw.get("security") or {}
    if not isinstance(security, dict) or set(security) - {"tls"}:
        raise RefusedField("security", "only security.tls is known")
    tls = security.get("tls") or {}
    for key in ("client_cert", "client_key", "master_cert_name"):
        if tls.get(key):
            raise RefusedField(f"security.tls.{key}", "not supported by this agent")
    unknown_tls = set(tls) - {
        "enabled",
        "skip_verify",
        "master_cert",
        "client_cert",
        "client_key",
        "master_cert_name",
    }
    if unknown_tls:
        raise RefusedField(f"security.tls.{sorted(unknown_tls)[0]}", "unknown field")
    if tls.get("skip_verify"):
        out["master_cert_file"] = "noverify"
    elif tls.get("master_cert"):
        out["master_cert_file"] = str(tls["master_cert"])
    for key, value in raw.items():
        if key in ("security", "master_port"):
            continue
        if key == "master_host":
            if raw.get("master_url"):
                raise RefusedField("master_host", "give master_host/master_port or master_url")
            out["master_url"] = _master_url(raw, tls)
        elif key == "container_runtime":
            if value not in ("docker", "podman"):
                raise RefusedField("container_runtime", "docker or podman")
            out["runtime"] = value
        elif key == "slot_type" and value == "rocm":
            raise RefusedField("slot_type", "ROCm devices are not supported")
        elif key in OWN:
            out[key] = value
        elif key in IGNORED:
            warnings.append(f"agent config field {key} is ignored: {IGNORED[key]}")
        else:
            raise RefusedField(key, "unknown agent config field")
    if "master_port" in raw and "master_host" not in raw:
        raise RefusedField("master_port", "needs master_host")
    return out, warnings
