"""Issue 37: a master that proxies nothing and calls no webhook does not import httpx
(nor the ``rich`` and ``pygments`` its command-line module pulls in) nor load the CA
bundle: the proxy's and the webhook shipper's clients are made at their first use
(4.6 MB of the import alone, 7 MB of a fresh master's resident memory)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

CHECK = """
import sys
from dauntless.config import MasterConfig
from dauntless.master.app import create_app

app = create_app(MasterConfig(data_dir={data!r}, port=18080), run_loop=False)
assert app.state.proxy_client is None
print(sorted(m for m in ("httpx", "rich", "pygments") if m in sys.modules))
"""


def test_a_master_app_is_built_without_httpx(tmp_path: Path) -> None:
    code = textwrap.dedent(CHECK.format(data=str(tmp_path / "data")))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
