"""TensorBoard as a TensorBoard task runs it: behind the master's proxy, with every asset
under its path prefix.

TensorBoard's page (``index.html`` of its web files, 2.x) declares its Roboto fonts with
absolute URLs, ``url(/font-roboto/<name>.woff2)``, which ``--path_prefix`` does not
rewrite: behind the proxy, where the page is ``/proxy/<task id>/``, the browser asks the
proxy origin's root for them and gets 404. ``python -m dauntless.exec.tensorboard_server
FLAGS...`` runs TensorBoard as ``tensorboard.main`` does, through its embedding API
(``tensorboard.program.TensorBoard``), but with an ``assets_zip_provider`` that serves
TensorBoard's own web files with those URLs made relative (``url(font-roboto/...)``,
resolved against the page, so under the prefix). FLAGS are TensorBoard's own.
"""

from __future__ import annotations

import io
import sys
import zipfile

ABSOLUTE_FONT_URL = b"url(/font-roboto/"
"""How TensorBoard's index.html names its fonts."""

RELATIVE_FONT_URL = b"url(font-roboto/"
"""The same files, relative to the page."""


def relative_font_urls(webfiles: bytes) -> bytes:
    """TensorBoard's web files with the font URLs of ``index.html`` made relative.

    Args:
        webfiles: the zip archive of TensorBoard's web files (``webfiles.zip``), bytes.

    Returns:
        The archive (bytes), every other member unchanged.

    Raises:
        ValueError: the archive has no ``index.html`` (not TensorBoard's web files).
    """
    with zipfile.ZipFile(io.BytesIO(webfiles)) as src:
        if "index.html" not in src.namelist():
            raise ValueError("TensorBoard's web files have no index.html")
        out = io.BytesIO()
        # Stored, not deflated: TensorBoard reads every member once at start and gzips
        # it itself (deflating here cost 0.4 s of CPU at each start, storing 0.08 s).
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
            for info in src.infolist():
                data = src.read(info)
                if info.filename == "index.html":
                    data = data.replace(ABSOLUTE_FONT_URL, RELATIVE_FONT_URL)
                dst.writestr(info.filename, data)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    """Run TensorBoard with ``argv`` (its flags; default ``sys.argv[1:]``) until it
    stops; its exit status."""
    from absl import app
    from tensorboard import assets, default, main_lib, program
    from tensorboard.plugins import base_plugin

    provider = assets.get_default_assets_zip_provider()
    if provider is None:
        print("TensorBoard's web files (webfiles.zip) are missing", file=sys.stderr)
        return 1
    with provider() as f:
        files = relative_font_urls(f.read())
    main_lib.global_init()
    board = program.TensorBoard(
        plugins=default.get_plugins(), assets_zip_provider=lambda: io.BytesIO(files)
    )
    args = [sys.argv[0], *(sys.argv[1:] if argv is None else argv)]
    try:
        app.run(board.main, argv=args, flags_parser=board.configure)
    except base_plugin.FlagsError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
