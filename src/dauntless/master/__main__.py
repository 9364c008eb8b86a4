"""``python -m dauntless.master``: run the master (FastAPI under uvicorn)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from pydantic import ValidationError

from dauntless._auth import read_secret_file
from dauntless.config import (
    LimitError,
    MasterConfig,
    RefusedField,
    load_yaml_file,
    translate_master_config,
)

from . import loop, serving
from .app import create_app, default_db_url
from .db import migrate_in_child


def parse_args(argv: list[str] | None = None) -> MasterConfig:
    """Build the master config from a YAML file (``--config-file``) and flags; flags win.

    Raises:
        SystemExit: with a message naming the bad field when the config is invalid.
    """
    p = argparse.ArgumentParser(prog="dauntless master", description=__doc__)
    p.add_argument("--config-file", help="master config YAML")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 8080)")
    p.add_argument(
        "--proxy-port",
        type=int,
        help="port of the task services' own origin (task_proxy.port; default: --port + 1; "
        "0: any free port)",
    )
    p.add_argument(
        "--proxy-domain",
        help="serve each task at <task id>.<domain> (task_proxy.domain; a wildcard DNS "
        "name of the master, or 'localhost' where browsers run on the master's machine)",
    )
    p.add_argument("--data-dir", help="database, contexts and default checkpoints")
    p.add_argument("--db-url", help="SQLAlchemy URL (default: SQLite in the data dir)")
    p.add_argument("--agent-timeout", type=float, help="seconds without heartbeat = lost")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument("--tls-cert", help="PEM certificate: serve HTTPS (security.tls.cert)")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert (security.tls.key)")
    p.add_argument(
        "--cluster-secret-file",
        help="file holding the secret agents present (security.cluster_secret; "
        "default: <data_dir>/cluster_secret, made when missing)",
    )
    # Determined's flags for the identity of tasks whose owner has no link.
    for key, kind in (("uid", int), ("gid", int), ("user", str), ("group", str)):
        p.add_argument(
            f"--security-default-task-{key}",
            type=kind,
            help=f"security.default_task.{key}: the Unix {key} of tasks whose owner is not "
            "linked to one (default: nobody/nogroup, 65534)",
        )
    p.add_argument(
        "--webhooks-signing-key-file",
        help="file holding the key webhook requests are signed with (webhooks.signing_key; "
        "default: <data_dir>/webhook_signing_key, made when missing); a file, never the key "
        "itself on the command line",
    )
    p.add_argument("--webhooks-base-url", help="WebUI address for links in Slack messages")
    p.add_argument(
        "--allow-artificial-slots",
        action="store_true",
        default=None,
        help="accept agents that register artificial CPU slots (--artificial-slots, for "
        "tests and demos; security.agents.allow_artificial_slots)",
    )
    args = p.parse_args(argv)
    raw: dict = {}
    if args.config_file:
        try:
            raw = load_yaml_file(args.config_file, "master")
        except LimitError as exc:
            p.error(exc.detail)
        try:
            # Determined's master.yaml loads unchanged: its fields acted on, ignored with
            # a warning, or refused naming them (issue 33).
            raw, ignored = translate_master_config(raw)
        except RefusedField as exc:
            p.error(f"{args.config_file}: {exc}")
        for text in ignored:
            sys.stderr.write(f"warning: {text}\n")
    for flag, key in [
        ("host", "host"),
        ("port", "port"),
        ("data_dir", "data_dir"),
        ("db_url", "db_url"),
        ("agent_timeout", "agent_timeout"),
        ("log_level", "log_level"),
    ]:
        value = getattr(args, flag)
        if value is not None:
            raw[key] = value
    for flag, key in [("tls_cert", "cert"), ("tls_key", "key")]:
        value = getattr(args, flag)
        if value is not None:
            security = raw.setdefault("security", {})
            if not isinstance(security, dict):
                p.error("security in the master config must be a mapping")
            tls = security.setdefault("tls", {})
            if not isinstance(tls, dict):
                p.error("security.tls in the master config must be a mapping")
            tls[key] = value
    for key in ("port", "domain"):
        value = getattr(args, f"proxy_{key}")
        if value is not None:
            proxy = raw.setdefault("task_proxy", {})
            if not isinstance(proxy, dict):
                p.error("task_proxy in the master config must be a mapping")
            proxy[key] = value
    for key in ("uid", "gid", "user", "group"):
        value = getattr(args, f"security_default_task_{key}")
        if value is not None:
            security = raw.setdefault("security", {})
            if not isinstance(security, dict) or not isinstance(
                security.setdefault("default_task", {}), dict
            ):
                p.error("security.default_task in the master config must be a mapping")
            security["default_task"][key] = value
    if args.allow_artificial_slots:
        security = raw.setdefault("security", {})
        if not isinstance(security, dict) or not isinstance(
            security.setdefault("agents", {}), dict
        ):
            p.error("security.agents in the master config must be a mapping")
        security["agents"]["allow_artificial_slots"] = True
    if args.cluster_secret_file:
        security = raw.setdefault("security", {})
        if not isinstance(security, dict):
            p.error("security in the master config must be a mapping")
        try:
            security["cluster_secret"] = read_secret_file(args.cluster_secret_file)
        except ValueError as exc:
            p.error(str(exc))
    if args.webhooks_signing_key_file or args.webhooks_base_url is not None:
        hooks = raw.setdefault("webhooks", {})
        if not isinstance(hooks, dict):
            p.error("webhooks in the master config must be a mapping")
        if args.webhooks_base_url is not None:
            hooks["base_url"] = args.webhooks_base_url
        if args.webhooks_signing_key_file:
            try:
                hooks["signing_key"] = read_secret_file(args.webhooks_signing_key_file)
            except ValueError as exc:
                p.error(str(exc).replace("cluster secret", "webhook signing key"))
    if "data_dir" not in raw:
        import platformdirs

        raw["data_dir"] = platformdirs.user_data_dir("dauntless")
    try:
        config = MasterConfig.model_validate(raw)
    except ValidationError as exc:
        lines = [f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()]
        p.error("invalid master config:\n  " + "\n  ".join(lines))
        raise  # unreachable: p.error exits
    tls = config.security.tls
    for what, path in (("security.tls.cert", tls.cert), ("security.tls.key", tls.key)):
        if path is not None and not os.path.isfile(path):
            p.error(f"{what}: {path} is not a file")
    return config


def main(argv: list[str] | None = None) -> int:
    """Run the master until interrupted."""
    config = parse_args(argv)
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if config.log_level.lower() != "debug":
        # httpx logs every request at INFO: a line per proxied notebook/TensorBoard request.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    loop.limit_heap_arenas()  # before the server's threads start (issue 37)
    # Alembic runs in a child, so that it stays out of this long-lived process (issue 37:
    # ~12 MB resident); the start-up's own migrate then finds the schema current. On
    # failure the start-up migrates in-process and reports the error as it always did.
    migrate_in_child(default_db_url(config))
    app = create_app(config, freeze_heap=True, fold_worker=True)
    tls = config.security.tls
    # With security.tls the master serves HTTPS only (clients verify it: --cert-file),
    # on both its origins: the API's and the task services' (task_proxy).
    try:
        serving.run(
            app,
            config,
            log_level=config.log_level,
            access_log=config.log_level == "debug",
            timeout_graceful_shutdown=5,
            ssl_certfile=tls.cert,
            ssl_keyfile=tls.key,
        )
    except OSError as exc:
        sys.stderr.write(f"dauntless master: {exc.strerror or exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
