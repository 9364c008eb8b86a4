"""REST routes of checkpoints under ``/api/v1``: one checkpoint and its download as a
gzipped tar (docs/protocol.md).

Split out of :mod:`dauntless.master.routes`, which keeps the error handlers and the
JSON view helpers the route modules share."""

from __future__ import annotations

import os
import tarfile
import tempfile
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse
from starlette.background import BackgroundTask

from dauntless.storage import StoreError, build_storage

from . import det_shapes
from . import responses as R
from .det_dialect import speaks_determined
from .errors import Conflict, NotFound
from .models import checkpoints, registered
from .registry_views import version_checkpoint
from .routes import StoreUnavailable, _checkpoint_views, _ctx, _get_experiment, _storage_dir

router = APIRouter(prefix="/api/v1")


def _tar_object_checkpoint(config: dict[str, Any], uuid: str) -> str:
    """Download a checkpoint from its object store and pack it as a gzipped tar file
    (a temporary file the caller removes)."""
    try:
        storage = build_storage(checkpoints.storage_config(config))
    except (ImportError, ValueError) as exc:
        raise Conflict(f"cannot open the checkpoint storage of checkpoint {uuid}: {exc}") from None
    fd, tmp = tempfile.mkstemp(suffix=".tar.gz")
    try:
        with storage.restore_path(uuid) as path:
            with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w:gz") as tar:
                tar.add(path, arcname=".")
    except FileNotFoundError:
        os.remove(tmp)
        raise NotFound(f"checkpoint {uuid} has no files in its storage") from None
    except StoreError as exc:
        os.remove(tmp)
        raise StoreUnavailable(str(exc)) from None
    except BaseException:
        os.remove(tmp)
        raise
    return tmp


@router.get("/checkpoints/{uuid}", response_model=R.CheckpointBody)
def get_checkpoint(uuid: str, request: Request) -> Any:
    """One checkpoint (also one that only a model version keeps, its experiment deleted);
    asked with ``Accept: application/gzip`` (as Determined's client downloads through
    the master), its files as ``/download`` gives them; to Determined's client, its
    ``GetCheckpointResponse``."""
    if "application/gzip" in request.headers.get("accept", ""):
        return download_checkpoint(uuid, request)
    with _ctx(request).db.read() as s:
        kept = registered.kept_only_by_version(s, uuid)
        if kept is not None:
            return {"checkpoint": version_checkpoint(s, kept)}
        c = checkpoints.read_checkpoint(s, uuid)
        exp = _get_experiment(s, c.experiment_id)
        view = _checkpoint_views(s, exp, [c])[0]
        if speaks_determined(request):
            return JSONResponse({"checkpoint": det_shapes.checkpoint(view, exp.config)})
        return {"checkpoint": view}


def _stored(request: Request, uuid: str) -> dict[str, Any]:
    """The config (``checkpoint_storage``) of a checkpoint whose files are all stored.

    Raises:
        NotFound: no such checkpoint. Conflict: it was deleted, or is not COMPLETED.
    """
    with _ctx(request).db.read() as s:
        kept = registered.kept_only_by_version(s, uuid)
        if kept is not None:
            return {"checkpoint_storage": kept.checkpoint.get("storage") or {}}
        c = checkpoints.read_checkpoint(s, uuid)
        exp = _get_experiment(s, c.experiment_id)
    if c.state in ("DELETING", "DELETED"):
        raise Conflict(f"checkpoint {uuid} was deleted by checkpoint GC")
    if c.state != "COMPLETED":
        raise Conflict(
            f"checkpoint {uuid} is {c.state}, not COMPLETED: its files are not all stored"
        )
    return dict(exp.config)


@router.get("/checkpoints/{uuid}/download")
def download_checkpoint(uuid: str, request: Request) -> FileResponse:
    """The checkpoint directory as a gzipped tar (streamed from a temporary file)."""
    config = _stored(request, uuid)
    storage_cfg = config.get("checkpoint_storage") or {}
    if storage_cfg.get("type") in ("s3", "gcs", "azure"):
        tmp = _tar_object_checkpoint(config, uuid)
    else:
        path = _storage_dir(config, uuid)
        if path is None or not os.path.isdir(path):
            raise NotFound(f"checkpoint {uuid} is not in storage the master can read ({path})")
        fd, tmp = tempfile.mkstemp(suffix=".tar.gz")
        with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w:gz") as tar:
            tar.add(path, arcname=".")
    return FileResponse(
        tmp,
        media_type="application/gzip",
        filename=f"{uuid}.tar.gz",
        background=BackgroundTask(os.remove, tmp),
    )
