"""The model registry and metadata over the REST API (issue 31 scope 2): models,
their versions, model/version/checkpoint metadata, and a trial's metadata.

One implementation for every client: the ``det model`` commands and the tests use
:class:`Registry`, and Determined's SDK names (``Model``, ``ModelVersion``,
``Checkpoint.add_metadata``) can wrap it. Answers are the master's JSON (plain dicts:
``{"id", "name", "description", "metadata", "labels", "notes", "workspace_id",
"num_versions", "archived", ...}`` for a model; ``{"model_version", "checkpoint",
"name", "comment", "metadata", "labels", "notes", ...}`` for a version).

    with Session("127.0.0.1:8080") as s:
        reg = Registry(s)
        reg.create_model("mnist", labels=["prod"])
        v = reg.register_version("mnist", checkpoint_uuid)
        reg.add_version_metadata("mnist", v["model_version"], {"accuracy": 0.97})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from ._session import Session


def _name(ident: str | int) -> str:
    """A model's name or id as a path segment (``/`` and the like escaped)."""
    return quote(str(ident), safe="")


class Registry:
    """Models, versions and metadata through one :class:`Session`.

    Args:
        session: the signed-in session to send requests with.

    Every method raises :class:`~dauntless.client.APIError` when the master refuses
    (404: no such model, version or checkpoint; 409: a name taken, an archived model,
    a checkpoint not COMPLETED; 403: no right to), and
    :class:`~dauntless.client.MasterUnreachableError` when it cannot be reached.
    """

    def __init__(self, session: Session) -> None:
        self.session = session

    def _send(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        json = None if method in ("GET", "DELETE") else (body if body is not None else {})
        return self.session.request(method, path, params=params or None, json=json).json()

    # -- models -------------------------------------------------------------------------

    def create_model(
        self,
        name: str,
        description: str = "",
        metadata: Mapping[str, Any] | None = None,
        labels: Iterable[str] | None = None,
        notes: str = "",
        workspace_name: str | None = None,
        workspace_id: int | None = None,
    ) -> dict[str, Any]:
        """Create a model (in workspace 1 unless one is named); the new model."""
        body: dict[str, Any] = {
            "name": name,
            "description": description,
            "metadata": dict(metadata or {}),
            "labels": list(labels or []),
            "notes": notes,
        }
        if workspace_name is not None:
            body["workspace_name"] = workspace_name
        if workspace_id is not None:
            body["workspace_id"] = workspace_id
        return dict(self._send("POST", "/models", body)["model"])

    def get_model(self, ident: str | int) -> dict[str, Any]:
        """A model by name, or by id (an int or an all-digits string)."""
        return dict(self._send("GET", f"/models/{_name(ident)}")["model"])

    def list_models(
        self,
        sort_by: str = "name",
        order_by: str = "asc",
        name: str | None = None,
        description: str | None = None,
        labels: Iterable[str] | None = None,
        archived: bool | None = None,
        workspace_names: Iterable[str] | None = None,
        workspace_ids: Iterable[int] | None = None,
        model_id: int | None = None,
    ) -> list[dict[str, Any]]:
        """The models the caller may view; ``sort_by`` ``name``, ``description``,
        ``creation_time``, ``last_updated_time``, ``num_versions`` or ``workspace``;
        ``name``/``description`` match substrings; ``labels`` must all be present."""
        answer = self._send(
            "GET",
            "/models",
            sort_by=f"SORT_BY_{sort_by.upper()}",
            order_by=f"ORDER_BY_{order_by.upper()}",
            name=name,
            description=description,
            labels=list(labels) if labels else None,
            archived=None if archived is None else str(archived).lower(),
            workspace_names=list(workspace_names) if workspace_names else None,
            workspace_ids=list(workspace_ids) if workspace_ids else None,
            id=model_id,
        )
        return [dict(m) for m in answer["models"]]

    def patch_model(self, ident: str | int, **fields: Any) -> dict[str, Any]:
        """Change ``name``, ``description``, ``metadata`` (replaced whole), ``labels``,
        ``notes``, or ``workspace_name``/``workspace_id`` (a move); the model after."""
        return dict(self._send("PATCH", f"/models/{_name(ident)}", {"model": fields})["model"])

    def add_model_metadata(self, ident: str | int, metadata: Mapping[str, Any]) -> dict:
        """Merge ``metadata`` into the model's (top-level keys replaced); the metadata."""
        merged = {**self.get_model(ident)["metadata"], **metadata}
        return dict(self.patch_model(ident, metadata=merged)["metadata"])

    def remove_model_metadata(self, ident: str | int, keys: Iterable[str]) -> dict:
        """Remove top-level ``keys`` from the model's metadata; the metadata after."""
        gone = set(keys)
        kept = {k: v for k, v in self.get_model(ident)["metadata"].items() if k not in gone}
        return dict(self.patch_model(ident, metadata=kept)["metadata"])

    def archive_model(self, ident: str | int, archived: bool = True) -> None:
        """Archive (read-only) or unarchive a model."""
        self._send("POST", f"/models/{_name(ident)}/{'archive' if archived else 'unarchive'}")

    def move_model(self, ident: str | int, workspace_id: int) -> None:
        """Move a model to workspace ``workspace_id``."""
        model = self.get_model(ident)
        body = {"destination_workspace_id": workspace_id, "model_name": model["name"]}
        self._send("POST", f"/models/{_name(model['id'])}/move", body)

    def delete_model(self, ident: str | int) -> None:
        """Delete a model and its versions."""
        self._send("DELETE", f"/models/{_name(ident)}")

    def model_labels(self, workspace_id: int | None = None) -> list[str]:
        """Every label in use on models, the most used first."""
        return list(self._send("GET", "/model/labels", workspace_id=workspace_id)["labels"])

    # -- versions -----------------------------------------------------------------------

    def register_version(
        self,
        ident: str | int,
        checkpoint_uuid: str,
        name: str = "",
        comment: str = "",
        metadata: Mapping[str, Any] | None = None,
        labels: Iterable[str] | None = None,
        notes: str = "",
    ) -> dict[str, Any]:
        """Register a COMPLETED checkpoint as the model's next version; the version."""
        body = {
            "checkpoint_uuid": checkpoint_uuid,
            "name": name,
            "comment": comment,
            "metadata": dict(metadata or {}),
            "labels": list(labels or []),
            "notes": notes,
        }
        return dict(self._send("POST", f"/models/{_name(ident)}/versions", body)["model_version"])

    def list_versions(self, ident: str | int, order_by: str = "desc") -> list[dict[str, Any]]:
        """A model's versions by number (``desc``: the newest first, Determined's
        default)."""
        answer = self._send(
            "GET", f"/models/{_name(ident)}/versions", order_by=f"ORDER_BY_{order_by.upper()}"
        )
        return [dict(v) for v in answer["model_versions"]]

    def get_version(self, ident: str | int, version: int = -1) -> dict[str, Any] | None:
        """Version ``version`` of a model; ``-1``: the highest, or None when the model
        has none (an explicit missing number raises, 404)."""
        if version == -1 and not self.list_versions(ident):
            return None
        path = f"/models/{_name(ident)}/versions/{int(version)}"
        return dict(self._send("GET", path)["model_version"])

    def patch_version(self, ident: str | int, version: int, **fields: Any) -> dict[str, Any]:
        """Change a version's ``name``, ``comment``, ``notes``, ``metadata`` (replaced
        whole) or ``labels``; the version after."""
        path = f"/models/{_name(ident)}/versions/{int(version)}"
        return dict(self._send("PATCH", path, {"model_version": fields})["model_version"])

    def add_version_metadata(
        self, ident: str | int, version: int, metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Merge ``metadata`` into the version's (top-level keys); the metadata after."""
        current = self.get_version(ident, version) or {"metadata": {}}
        merged = {**current["metadata"], **metadata}
        return dict(self.patch_version(ident, version, metadata=merged)["metadata"])

    def remove_version_metadata(
        self, ident: str | int, version: int, keys: Iterable[str]
    ) -> dict[str, Any]:
        """Remove top-level ``keys`` from the version's metadata; the metadata after."""
        gone = set(keys)
        current = (self.get_version(ident, version) or {"metadata": {}})["metadata"]
        kept = {k: v for k, v in current.items() if k not in gone}
        return dict(self.patch_version(ident, version, metadata=kept)["metadata"])

    def delete_version(self, ident: str | int, version: int) -> None:
        """Delete a version (its checkpoint is released)."""
        self._send("DELETE", f"/models/{_name(ident)}/versions/{int(version)}")

    # -- checkpoint and trial metadata ---------------------------------------------------

    def set_checkpoint_metadata(self, uuid: str, metadata: Mapping[str, Any]) -> dict:
        """Replace a stored checkpoint's metadata (409 for a registered one); the
        metadata after."""
        body = {"checkpoint": {"uuid": uuid, "metadata": dict(metadata)}}
        answer = self._send("POST", f"/checkpoints/{_name(uuid)}/metadata", body)
        return dict(answer["checkpoint"]["metadata"])

    def add_checkpoint_metadata(self, uuid: str, metadata: Mapping[str, Any]) -> dict:
        """Merge ``metadata`` into a checkpoint's (top-level keys); the metadata after."""
        current = self._send("GET", f"/checkpoints/{_name(uuid)}")["checkpoint"]["metadata"]
        return self.set_checkpoint_metadata(uuid, {**current, **metadata})

    def remove_checkpoint_metadata(self, uuid: str, keys: Iterable[str]) -> dict:
        """Remove top-level ``keys`` from a checkpoint's metadata; the metadata after."""
        gone = set(keys)
        current = self._send("GET", f"/checkpoints/{_name(uuid)}")["checkpoint"]["metadata"]
        return self.set_checkpoint_metadata(
            uuid, {k: v for k, v in current.items() if k not in gone}
        )

    def get_trial_metadata(self, trial_id: int) -> dict[str, Any]:
        """The metadata a trial's code set (``core.train.set_metadata``)."""
        return dict(self._send("GET", f"/runs/{int(trial_id)}/metadata")["metadata"])
