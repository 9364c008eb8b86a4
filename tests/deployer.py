"""What the tests configure as the deployer of the clusters they start (issue 29): the
test process deploys them, so, as ``det deploy local cluster-up`` does for whoever runs
it, tasks of users without a link run as the test process's own Unix identity."""

from __future__ import annotations

import grp
import os
import pwd


def deployer_identity() -> dict[str, object]:
    """This process's Unix identity as ``security.default_task`` (uid, gid, user, group)."""
    uid, gid = os.getuid(), os.getgid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = f"u{uid}"
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = f"g{gid}"
    return {"uid": uid, "gid": gid, "user": user, "group": group}


def deployer_identity_args() -> list[str]:
    """Master flags (Determined's ``--security-default-task-*``) that make this process's
    identity ``security.default_task``."""
    out = []
    for key, value in deployer_identity().items():
        out += [f"--security-default-task-{key}", str(value)]
    return out
