"""A wheel built from this tree carries the WebUI, and a master imported from that wheel
serves it with no npm and no source tree around (issue 22, packaging).

Builds the wheel with ``pip wheel --no-build-isolation`` (about 10 s), unpacks it into a
temporary directory (what ``pip install`` does with a pure-Python wheel) and, in a child
process whose ``PATH`` has no npm and whose ``sys.path`` puts the unpacked wheel first,
asks the master's app for ``/``, ``/experiments/3`` and the UI's bundled module.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import REPO, deadline_seconds

pytestmark = pytest.mark.integration
DIST = REPO / "src" / "dauntless" / "master" / "webui_dist"

CHECK = """
import sys, tempfile
from pathlib import Path
import dauntless.master.webui as webui
from dauntless.config import MasterConfig
from dauntless.master.app import create_app
from fastapi.testclient import TestClient

root = Path(sys.argv[1]).resolve()
assert Path(webui.__file__).resolve().is_relative_to(root), webui.__file__
assert webui.DIST_DIR.is_relative_to(root), webui.DIST_DIR
with tempfile.TemporaryDirectory() as data:
    app = create_app(MasterConfig(data_dir=data, port=18099), run_loop=False)
    with TestClient(app) as c:
        for path in ("/", "/experiments/3"):
            r = c.get(path)
            assert r.status_code == 200 and '<script type="module" src="/main.js">' in r.text, path
        r = c.get("/main.js")  # the bundle of every module (pages/experiment.js's text)
        assert r.status_code == 200 and "Parallel coordinates" in r.text
        assert c.get("/vendor/uPlot.min.css").status_code == 200
print("served from", webui.DIST_DIR)
"""


def test_wheel_ships_and_serves_the_webui(tmp_path: Path) -> None:
    if not (DIST / "index.html").is_file():
        pytest.skip("the WebUI is not built (bash scripts/build-webui.sh; needs npm)")
    out = tmp_path / "wheel"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            str(REPO),
            "-w",
            str(out),
        ],
        check=True,
        cwd=tmp_path,
        timeout=deadline_seconds(180),
    )
    (wheel,) = out.glob("dauntless-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        built = {
            str(p.relative_to(DIST.parent.parent.parent)).replace(os.sep, "/")
            for p in DIST.rglob("*")
            if p.is_file()
        }
        missing = built - names
        assert not missing, f"built UI files missing from the wheel: {sorted(missing)}"
        site = tmp_path / "site"
        z.extractall(site)
    env = {
        "PATH": str(Path(sys.executable).parent),  # the venv's python, and no npm
        "PYTHONPATH": str(site),
        "HOME": str(tmp_path),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(site)!r}); {CHECK}",
            str(site),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=deadline_seconds(120),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert str(site) in proc.stdout
