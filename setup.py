"""Build hook: a wheel of Dauntless carries the built WebUI.

Everything else about the package is in pyproject.toml. The WebUI's built files
(``src/dauntless/master/webui_dist/``, listed in its package-data) are made by
``scripts/build-webui.sh`` with ``npm ci``; they are git-ignored, so a fresh checkout
lacks them. Building a (non-editable) wheel runs that script first when they are
missing, so that ``pip install dauntless-*.whl`` serves the UI on a machine without npm.
Without npm the wheel build stops with a message saying so, unless
``DAUNTLESS_WHEEL_WITHOUT_UI=1`` asks for a wheel without the UI (its master then says at
``/`` that the UI was not built). Editable installs (``pip install -e``) are left alone:
``scripts/setup-venv.sh`` builds the UI after them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel

ROOT = Path(__file__).resolve().parent
INDEX = ROOT / "src" / "dauntless" / "master" / "webui_dist" / "index.html"


class bdist_wheel_with_ui(bdist_wheel):  # noqa: N801 (setuptools command naming)
    """``bdist_wheel`` that builds the WebUI first when it is not built."""

    def run(self) -> None:
        if not INDEX.is_file() and (ROOT / "scripts" / "build-webui.sh").is_file():
            subprocess.run(["bash", str(ROOT / "scripts" / "build-webui.sh")], check=True)
        if not INDEX.is_file():
            if os.environ.get("DAUNTLESS_WHEEL_WITHOUT_UI") != "1":
                raise SystemExit(
                    "the WebUI is not built, so the wheel would not serve it: install Node.js "
                    "and npm and run scripts/build-webui.sh, or set "
                    "DAUNTLESS_WHEEL_WITHOUT_UI=1 to build a wheel without the UI"
                )
            print("warning: building a wheel without the WebUI (DAUNTLESS_WHEEL_WITHOUT_UI=1)")
        super().run()


setup(cmdclass={"bdist_wheel": bdist_wheel_with_ui})
