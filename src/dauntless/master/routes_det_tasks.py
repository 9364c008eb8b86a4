"""Determined's dialect of the generic-task routes (:mod:`dauntless.master.routes_tasks`,
issue 33): its JSON ``Launch{Command,Notebook,Shell,Tensorboard}Request`` read into the
fields of Dauntless's multipart form, its ``Launch...Response``, and its task log stream.
The routes call these; the behaviour stays in the task model functions
(:mod:`dauntless.master.models.tasks`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from . import det_create, det_shapes_tasks
from .api_spec import INT32_MAX
from .context_archive import check_context_archive
from .errors import BadRequest
from .models import tasks as task_models
from .models.jobs import TASK_PREFIX
from .routes import _read
from .task_states import TASK_TERMINAL, TaskState

log = logging.getLogger("dauntless.master")


def query_int(raw: str, name: str) -> int:
    """An id in the query string. Raises BadRequest naming ``name``."""
    if raw.isdigit() and int(raw) <= INT32_MAX:
        return int(raw)
    raise BadRequest(f"invalid request: {name}: expected an id", [(name, "an id")])


_DET_LAUNCH_FIELDS = frozenset(
    {"config", "files", "templateName", "template_name", "workspaceId", "preview", "data"}
    | {"experimentIds", "trialIds"}
)
"""The fields of Determined's ``Launch{Command,Notebook,Shell,Tensorboard}Request``."""


async def read_launch(
    request: Request, task_type: str
) -> tuple[dict[str, Any], dict[str, Any] | None, bytes | None]:
    """Determined's JSON launch body as the fields, config and context the multipart
    form gives (:func:`dauntless.master.routes_tasks._read_form`): list and id fields as the JSON text the form
    carries, the ``files`` packed into a gzipped tar.

    Raises:
        BadRequest: an unknown field, ``preview`` (not served: the config is checked at
            launch), ``data`` (Determined's client data of a shell: not used here), a
            config that is not a mapping, or a malformed file (each naming the field).
        TooLarge: the body is over :data:`dauntless.master.det_create.MAX_BODY_BYTES`.
    """
    body = await det_create.read_json_body(request, _DET_LAUNCH_FIELDS)
    for name in ("preview", "data"):
        if body.get(name):
            raise BadRequest(
                f"invalid request: {name}: not supported by this master",
                [(name, "not supported")],
            )
    config = body.get("config")
    if config is not None and not isinstance(config, dict):
        raise BadRequest("invalid task config: expected a mapping", [("config", "a mapping")])
    config = dict(config) if config else None
    fields: dict[str, Any] = {
        "template_name": body.get("templateName") or body.get("template_name"),
        "workspace_id": None if not body.get("workspaceId") else str(body["workspaceId"]),
    }
    if task_type == "COMMAND" and config is not None and "entrypoint" in config:
        fields["entrypoint"] = json.dumps(config.pop("entrypoint"))
    for key, name in (("experimentIds", "experiment_ids"), ("trialIds", "trial_ids")):
        if body.get(key) is not None:
            fields[name] = json.dumps(body[key])
    files = body.get("files")
    context = None
    if files:
        context = await run_in_threadpool(det_create.pack_files, files, "files")
        await run_in_threadpool(check_context_archive, context)  # 400 unsafe, 413 too large
    return fields, config, context


def launched(family: str, answer: dict[str, Any]) -> Any:
    """Determined's ``Launch...Response`` of a created (or reused) task: the task under
    its family's name, its config and ``warnings`` (Determined's launch-warning enum
    cannot carry Dauntless's warnings: the master logs each, naming the task)."""
    view = answer["task"]
    for text in answer.get("warnings") or []:
        log.warning("task %s: %s", view["id"], text)
    item = det_shapes_tasks.ntsc(view, f"{TASK_PREFIX}{view['id']}")
    return JSONResponse({family.removesuffix("s"): item, "config": view["config"], "warnings": []})


LOG_POLL_SECONDS = 0.5
"""How often a followed task log stream looks for new lines."""

_LOG_PAGE = 1000


def task_logs(request: Request, task_id: str) -> StreamingResponse:
    """Determined's ``GET /tasks/{id}/logs``: one ``{"result": TaskLogsResponse}`` JSON
    object per line (grpc-gateway's server-streaming framing).

    Query: ``limit`` (at most this many lines; with ``orderBy=ORDER_BY_DESC`` the last
    ones, newest first), ``follow`` (stream until the task has ended and no line is
    left).

    Raises:
        NotFound: no such task (before the stream starts).
        BadRequest: ``limit`` not a count.
    """
    _read(request, task_models.read_task, task_id)  # 404 before streaming
    q = request.query_params
    limit = query_int(q["limit"], "limit") if q.get("limit") else 0
    desc = q.get("orderBy") == "ORDER_BY_DESC"
    follow = (q.get("follow") or "").lower() == "true"

    async def lines() -> Any:
        after, sent = 0, 0
        kept: deque[dict[str, Any]] = deque(maxlen=limit or None)
        while True:
            page = await run_in_threadpool(
                _read, request, task_models.read_task_logs, task_id, after, _LOG_PAGE
            )
            for line in page["logs"]:
                after = line["id"]
                if desc:
                    kept.append(line)
                    continue
                if limit and sent >= limit:
                    return
                sent += 1
                yield json.dumps({"result": det_shapes_tasks.task_log(line)}) + "\n"
            if len(page["logs"]) == _LOG_PAGE:
                continue
            if desc:
                for line in reversed(kept):
                    yield json.dumps({"result": det_shapes_tasks.task_log(line)}) + "\n"
                return
            ended = TaskState(page["task_state"]) in TASK_TERMINAL
            if not follow or ended or await request.is_disconnected():
                return
            await asyncio.sleep(LOG_POLL_SECONDS)

    return StreamingResponse(lines(), media_type="application/json")
