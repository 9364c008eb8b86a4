"""The boot script a cloud instance runs (EC2 user data, GCP ``startup-script``)."""

from __future__ import annotations

import shlex


def agent_boot_script(
    startup_script: str,
    master_url: str,
    name: str,
    pool: str,
    cluster_secret: str,
    slot_type: str = "auto",
) -> str:
    """A bash script: the pool's ``startup_script``, then a Dauntless agent named
    ``name`` in ``pool`` (the image must have Python 3.10+ with Dauntless installed).

    The cluster secret is in the script (instance metadata or user data, readable on the
    instance only) and reaches the agent through its environment, never its command line.
    """
    agent = shlex.join(
        [
            "python3",
            "-m",
            "dauntless.agent",
            "--master-url",
            master_url,
            "--agent-id",
            name,
            "--resource-pool",
            pool,
            "--slot-type",
            slot_type,
            "--work-dir",
            "/var/lib/dauntless/agent",
        ]
    )
    return (
        "#!/bin/bash\n"
        "# startup_script of the pool's provider\n"
        f"{startup_script}\n"
        f"export DAUNTLESS_CLUSTER_SECRET={shlex.quote(cluster_secret)}\n"
        f"exec {agent}\n"
    )
