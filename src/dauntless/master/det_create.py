"""Determined's ``POST /api/v1/experiments`` body (``CreateExperimentRequest`` as JSON)
read into what Dauntless's create takes (issue 33).

Determined's client sends the experiment config as YAML text and the context directory
as a list of ``File`` objects (``path``, ``type`` = the tar type flag as a number,
``content`` = base64, ``mode``, ``mtime``, ``uid``, ``gid``), with no
``Content-Type``. Dauntless's create takes the context as a gzipped tar, so the files
are packed into one here (in memory, bounded) and checked by the same archive checks as
an upload (:func:`dauntless.master.context_archive.check_context_archive`, in create).
"""

from __future__ import annotations

import base64
import binascii
import io
import tarfile
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from dauntless.config import LimitError, load_json

from .context_archive import MAX_CONTEXT_BYTES
from .errors import BadRequest, TooLarge

MAX_BODY_BYTES = MAX_CONTEXT_BYTES * 4 // 3 + 8 * 1024 * 1024
"""The largest JSON create body read (bytes): a context of :data:`MAX_CONTEXT_BYTES` in
base64 (4/3 as large) plus the config and the files' fields."""

_KNOWN = frozenset(
    {
        "config",
        "modelDefinition",
        "parentId",
        "validateOnly",
        "activate",
        "projectId",
        "template",
        "unmanaged",
        "gitRemote",
        "gitCommit",
        "gitCommitter",
        "gitCommitDate",
    }
)
_REGULAR, _DIRECTORY = ord("0"), ord("5")


@dataclass(frozen=True)
class CreateRequest:
    """What a create asks for: ``config`` (YAML text), ``context`` (tar.gz or None),
    ``activate``, ``validate_only``, ``parent_id`` and ``project_id``."""

    config: str
    context: bytes | None
    activate: bool
    validate_only: bool
    parent_id: int | None
    project_id: int | None


async def read_json_body(request: Request, known: frozenset[str]) -> dict[str, Any]:
    """Read a JSON object body of at most :data:`MAX_BODY_BYTES` (a context directory's
    files in base64 fit), with only the ``known`` fields.

    Raises:
        TooLarge: the body is over :data:`MAX_BODY_BYTES` (413).
        BadRequest: not a JSON object within the parsing limits, or an unknown field
            (naming it).
    """
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > MAX_BODY_BYTES:
            raise TooLarge(
                f"the request body is over {MAX_BODY_BYTES} bytes; keep data sets out of "
                "the context directory (.detignore)",
                [("modelDefinition", f"at most {MAX_CONTEXT_BYTES} bytes of files")],
            )
        chunks.append(chunk)
    try:
        body = load_json(b"".join(chunks), max_bytes=MAX_BODY_BYTES)
    except LimitError as exc:
        raise BadRequest("invalid request body", exc.errors) from None
    if not isinstance(body, dict):
        raise BadRequest("invalid request body", [("body", "a JSON object")])
    unknown = sorted(set(body) - known)
    if unknown:
        raise BadRequest(
            f"invalid request: unknown field {unknown[0]}", [(k, "unknown field") for k in unknown]
        )
    return body


async def read_create(request: Request) -> CreateRequest:
    """Read and check Determined's create body.

    Raises:
        TooLarge: the body is over :data:`MAX_BODY_BYTES` (413).
        BadRequest: not JSON within the parsing limits, a field of the wrong type, an
            unknown field, a ``template`` (not supported: templates are not served), or
            a file whose content is not base64 (each naming the field).
    """
    body = await read_json_body(request, _KNOWN)
    if body.get("template"):
        raise BadRequest(
            "invalid request: template: config templates are not supported by this master",
            [("template", "not supported")],
        )
    config = body.get("config")
    if not isinstance(config, str):
        raise BadRequest("invalid request: config: YAML text required", [("config", "required")])
    files = body.get("modelDefinition")
    context = None if not files else pack_files(files)
    return CreateRequest(
        config=config,
        context=context,
        activate=_bool(body, "activate", False),
        validate_only=_bool(body, "validateOnly", False),
        parent_id=_id(body, "parentId"),
        project_id=_id(body, "projectId"),
    )


def _bool(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise BadRequest(f"invalid request: {name}: expected a boolean", [(name, "a boolean")])
    return value


def _id(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None or value == 0:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**31:
        raise BadRequest(f"invalid request: {name}: expected an id", [(name, "an id")])
    return value


def pack_files(files: Any, field: str = "modelDefinition") -> bytes:
    """Determined's ``File`` list (the request's ``field``) as a gzipped tar (regular
    files and directories only).

    Raises:
        BadRequest: not a list of files and directories with base64 content (naming
            the entry).
    """
    if not isinstance(files, list):
        raise BadRequest(f"invalid request: {field}: a list", [(field, "a list")])
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", compresslevel=1) as tar:
        for i, f in enumerate(files):
            where = f"{field}[{i}]"
            if not isinstance(f, dict) or not isinstance(f.get("path"), str):
                raise BadRequest(f"invalid request: {where}: a File", [(where, "a File")])
            info = tarfile.TarInfo(f["path"])
            info.mode = int(f.get("mode") or 0o644) & 0o7777
            info.mtime = int(f.get("mtime") or 0)
            kind = f.get("type", _REGULAR)
            if kind == _DIRECTORY:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                continue
            if kind != _REGULAR:
                raise BadRequest(
                    f"invalid request: {where}.type: only files and directories",
                    [(f"{where}.type", "48 (file) or 53 (directory)")],
                )
            try:
                content = base64.b64decode(f.get("content") or "", validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest(
                    f"invalid request: {where}.content: not base64",
                    [(f"{where}.content", "base64")],
                ) from None
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return out.getvalue()
