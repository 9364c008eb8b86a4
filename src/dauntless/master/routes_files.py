"""The files of an experiment's model definition (its context directory), one by one,
under ``/api/v1`` (Determined's ``GetModelDef``/``GetModelDefTree``/``GetModelDefFile``,
which its WebUI's "Code" tab shows):

- ``GET /experiments/{exp_id}/model_def/tree``: ``{"files": [{"path", "size", "type"}]}``,
  every file and directory of the stored tar (``type`` ``file`` or ``dir``; ``size`` in
  bytes), sorted by path.
- ``GET /experiments/{exp_id}/model_def/file?path=P``: one file's bytes (``text/plain``
  when they decode as UTF-8, else ``application/octet-stream``).

The whole context is still served as a gzipped tar by ``GET .../model_def``
(:mod:`dauntless.master.routes_experiments`). The tar is read with the standard library's
:mod:`tarfile`; nothing is extracted to disk.
"""

from __future__ import annotations

import io
import tarfile
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from . import responses as R
from .api_spec import DbId
from .errors import BadRequest, NotFound
from .models import experiment_reads, experiments

router = APIRouter(prefix="/api/v1")

MAX_FILE_BYTES = 5_000_000
"""The largest single file served by ``model_def/file`` (bytes)."""


def _tar(request: Request, exp_id: int) -> tarfile.TarFile:
    with request.app.state.ctx.db.read() as s:
        experiment_reads.read_experiment(s, exp_id, deleted=False)
        content = experiments.model_definition(s, exp_id)
    if content is None:
        raise NotFound(f"experiment {exp_id} was created without a context directory")
    return tarfile.open(fileobj=io.BytesIO(content), mode="r:*")


def _clean(name: str) -> str:
    name = name.removeprefix("./").strip("/")
    return name


@router.get("/experiments/{exp_id}/model_def/tree", response_model=R.ModelDefTree)
def get_model_def_tree(exp_id: DbId, request: Request) -> dict[str, Any]:
    """The model definition's files and directories.

    Raises:
        NotFound: no such experiment, or it has no context directory (404).
    """
    with _tar(request, exp_id) as tar:
        files = [
            {
                "path": _clean(m.name),
                "size": m.size if m.isfile() else 0,
                "type": "dir" if m.isdir() else "file",
            }
            for m in tar.getmembers()
            if _clean(m.name) and (m.isfile() or m.isdir())
        ]
    files.sort(key=lambda f: f["path"])
    return {"files": files}


@router.get(
    "/experiments/{exp_id}/model_def/file",
    response_class=Response,
    responses={
        200: {
            "description": "The file's bytes: text/plain when they decode as UTF-8",
            "content": {
                "text/plain": {"schema": {"type": "string"}},
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            },
        }
    },
)
def get_model_def_file(
    exp_id: DbId,
    request: Request,
    path: str = Query(..., min_length=1, max_length=4096, description="a file of the tree"),
) -> Response:
    """One file of the model definition.

    Raises:
        NotFound: no such experiment or file (404).
        BadRequest: ``path`` names a directory, or a file over :data:`MAX_FILE_BYTES` (400).
    """
    want = _clean(path)
    with _tar(request, exp_id) as tar:
        member = next((m for m in tar.getmembers() if _clean(m.name) == want), None)
        if member is None:
            raise NotFound(f"experiment {exp_id}'s model definition has no file {want!r}")
        if not member.isfile():
            raise BadRequest(f"{want!r} is not a file", [("path", "a directory, not a file")])
        if member.size > MAX_FILE_BYTES:
            raise BadRequest(
                f"{want!r} is {member.size} bytes",
                [("path", f"files over {MAX_FILE_BYTES} bytes: download the whole model_def")],
            )
        f = tar.extractfile(member)
        data = f.read() if f is not None else b""
    try:
        data.decode("utf-8")
        media = "text/plain; charset=utf-8"
    except UnicodeDecodeError:
        media = "application/octet-stream"
    return Response(content=data, media_type=media)
