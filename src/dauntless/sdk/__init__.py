"""Determined's Python SDK names (``determined.experimental.client`` and
``determined.experimental.Determined``, reference ``determined-surface-platform.md``
§5) over :class:`dauntless.client.Session`, so that scripts, notebooks and trial code
written for Determined's SDK run unchanged; the ``determined`` compatibility package
(:mod:`dauntless.compat`) exposes them under Determined's import paths.

Inside a task the session signs in with the task's own credentials (``DET_MASTER``,
``DET_USER``, ``DET_USER_TOKEN``), as Determined's SDK does.

Module functions use one :class:`Determined` made on first use; :func:`login` makes it
explicitly and may be called once, before any other function.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from dauntless.client import Session, build_context_tarball

from ._objects import (
    Checkpoint,
    CheckpointSortBy,
    CheckpointState,
    CheckpointTrainingMetadata,
    DownloadMode,
    Experiment,
    ExperimentState,
    OrderBy,
    Trial,
    TrialMetrics,
    TrialState,
    iter_trials_metrics,
)

__all__ = [
    "Checkpoint",
    "CheckpointSortBy",
    "CheckpointState",
    "CheckpointTrainingMetadata",
    "Determined",
    "DownloadMode",
    "Experiment",
    "ExperimentState",
    "OrderBy",
    "Trial",
    "TrialMetrics",
    "TrialState",
    "User",
    "create_experiment",
    "get_checkpoint",
    "get_experiment",
    "get_trial",
    "get_user_by_name",
    "iter_trials_metrics",
    "list_experiments",
    "list_users",
    "login",
    "logout",
    "whoami",
]


class User:
    """A user: ``user_id``, ``username``, ``admin``, ``active``, ``display_name``."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.user_id = raw["id"]
        self.username = raw["username"]
        self.admin = bool(raw.get("admin"))
        self.active = bool(raw.get("active", True))
        self.display_name = raw.get("display_name")

    def __repr__(self) -> str:
        return f"User(username={self.username!r})"


class Determined:
    """A client of one master (Determined's ``Determined``).

    Args:
        master: the master's URL; default ``DET_MASTER``, else ``DET_MASTER_ADDR``, else
            ``localhost:8080``.
        user: the user; default ``DET_USER``, else the active user of the token cache,
            else ``determined``.
        password: signs in with this password (otherwise a cached or task token, then
            ``DET_PASS``, then the empty password; see :class:`dauntless.client.Session`).
        cert_path: a CA bundle of the master's TLS certificate.
        cert_name: not supported (the certificate's host name must match the URL): a
            ValueError names it.
        noverify: do not verify the master's TLS certificate.

    Raises:
        ValueError: ``cert_name`` given.
    """

    def __init__(
        self,
        master: str | None = None,
        user: str | None = None,
        password: str | None = None,
        cert_path: str | None = None,
        cert_name: str | None = None,
        noverify: bool = False,
    ) -> None:
        if cert_name:
            raise ValueError(
                "cert_name is not supported: use a URL whose host the certificate names"
            )
        master = master or os.environ.get("DET_MASTER") or os.environ.get("DET_MASTER_ADDR")
        self._session = Session(master, user=user, cert_file="noverify" if noverify else cert_path)
        if user is not None and password is not None:
            self._session.login(user, password)

    # -- experiments
    def create_experiment(
        self,
        config: str | Path | dict[str, Any],
        model_dir: str | Path | None = None,
        includes: Iterable[str | Path] | None = None,
        project_id: int | None = None,
        template: str | None = None,
    ) -> Experiment:
        """Submit an experiment (always activated): ``config`` a path of a YAML file or
        a mapping; ``model_dir`` the context directory (None: no code).

        Raises:
            ValueError: ``includes`` or ``template`` given (not supported here).
        """
        if includes:
            raise ValueError("includes is not supported: put the files in model_dir")
        if template:
            raise ValueError("template is not supported: this master has no config templates")
        if isinstance(config, dict):
            text = yaml.safe_dump(config)
        else:
            text = Path(config).read_text(encoding="utf-8")
        context = build_context_tarball(str(model_dir)) if model_dir is not None else None
        created = self._session.create_experiment(text, context, project_id=project_id)
        return Experiment._from(self._session, dict(created))

    def get_experiment(self, experiment_id: int) -> Experiment:
        e = Experiment(experiment_id, self._session)
        e.reload()
        return e

    def list_experiments(
        self,
        sort_by: Any = None,
        order_by: Any = None,
        experiment_ids: Iterable[int] | None = None,
        labels: Iterable[str] | None = None,
        users: Iterable[str] | None = None,
        states: Iterable[ExperimentState] | None = None,
        name: str | None = None,
        project_id: int | None = None,
    ) -> list[Experiment]:
        """Experiments the caller may view, filtered as asked, newest first."""
        ids = set(experiment_ids) if experiment_ids is not None else None
        wanted_labels = set(labels or [])
        wanted_users = set(users) if users is not None else None
        wanted_states = {s.value for s in states} if states is not None else None
        out = []
        for raw in self._session.iter_experiments(archived=None):
            e = Experiment._from(self._session, dict(raw))
            if ids is not None and e.id not in ids:
                continue
            if wanted_labels and not wanted_labels <= e.labels:
                continue
            if wanted_users is not None and raw.get("username") not in wanted_users:
                continue
            if (
                wanted_states is not None
                and e.state is not None
                and e.state.value not in wanted_states
            ):
                continue
            if name is not None and e.name != name:
                continue
            if project_id is not None and e.project_id != project_id:
                continue
            out.append(e)
        return out

    def get_trial(self, trial_id: int) -> Trial:
        t = Trial(trial_id, self._session)
        t.reload()
        return t

    def get_checkpoint(self, uuid: str) -> Checkpoint:
        c = Checkpoint(self._session, uuid)
        c.reload()
        return c

    def iter_trials_metrics(self, trial_ids: Iterable[int], group: str) -> Iterator[TrialMetrics]:
        return iter_trials_metrics(self._session, trial_ids, group)

    # -- users
    def whoami(self) -> User:
        return User(dict(self._session.whoami()))

    def get_session_username(self) -> str:
        return self.whoami().username

    def list_users(self, active: bool | None = None) -> list[User]:
        users = [User(dict(u)) for u in self._session.list_users()]
        return [u for u in users if active is None or u.active == active]

    def get_user_by_name(self, user_name: str) -> User:
        return User(dict(self._session.get_user_by_name(user_name)))

    def logout(self) -> None:
        self._session.logout()


_client: Determined | None = None


def login(
    master: str | None = None,
    user: str | None = None,
    password: str | None = None,
    cert_path: str | None = None,
    cert_name: str | None = None,
    noverify: bool = False,
) -> None:
    """Make the client the module functions use (once, before any of them).

    Raises:
        ValueError: called twice, or after a module function made the client.
    """
    global _client
    if _client is not None:
        raise ValueError("login() must be called at most once, and before any other function")
    _client = Determined(master, user, password, cert_path, cert_name, noverify)


def _the() -> Determined:
    global _client
    if _client is None:
        _client = Determined()
    return _client


def create_experiment(
    config: Any,
    model_dir: Any = None,
    includes: Any = None,
    project_id: int | None = None,
    template: str | None = None,
) -> Experiment:
    return _the().create_experiment(config, model_dir, includes, project_id, template)


def get_experiment(experiment_id: int) -> Experiment:
    return _the().get_experiment(experiment_id)


def list_experiments(**filters: Any) -> list[Experiment]:
    return _the().list_experiments(**filters)


def get_trial(trial_id: int) -> Trial:
    return _the().get_trial(trial_id)


def get_checkpoint(uuid: str) -> Checkpoint:
    return _the().get_checkpoint(uuid)


def whoami() -> User:
    return _the().whoami()


def list_users(active: bool | None = None) -> list[User]:
    return _the().list_users(active)


def get_user_by_name(user_name: str) -> User:
    return _the().get_user_by_name(user_name)


def logout() -> None:
    _the().logout()
