"""The remote search runner: a custom search method run in a process of your own,
answering an experiment's searcher events over the master's REST API (Determined
≤0.37's ``RemoteSearchRunner`` / ``LocalSearchRunner``; docs/protocol.md, "Custom
searchers")::

    from dauntless.search_runner import RemoteSearchRunner
    from my_search import MySearch

    runner = RemoteSearchRunner(MySearch(), searcher_dir="searcher_state")
    exp_id = runner.run("config.yaml", model_dir=".")

The experiment's config has ``searcher: {name: custom, metric: ..., unit: ...}`` without
``method``. The runner signs in as you (a :class:`dauntless.client.Session`), so the
method runs with your permissions, never the master's. After each event it posts the
operations the event triggered and then saves the method's state and its
:class:`~dauntless.searcher.custom.SearcherState` under ``searcher_dir`` (atomically):
started again after a crash (of the runner or of the master), it resumes the same
experiment, and an event answered twice is applied once (the master ignores operations
for an event it has acknowledged).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dauntless.client import APIError, MasterUnreachableError, Session, build_context_tarball
from dauntless.searcher import MethodDriver
from dauntless.searcher.custom import SearcherState, SearchMethod, operation_to_wire

TERMINAL_STATES = frozenset({"COMPLETED", "CANCELED", "ERROR", "DELETED"})


class RemoteSearchRunner:
    """Runs a :class:`~dauntless.searcher.custom.SearchMethod` against a master.

    Args:
        search_method: the method; its ``experiment_seed`` is set to the experiment's
            seed before the first event (when the runner starts the experiment).
        searcher_dir: where the runner keeps its state (``experiment_id.txt`` and
            ``exp_<id>/state.json``); the working directory when None.
        session: the client session (None: a new one for ``DET_MASTER``, signed in as
            the CLI would).
        poll_interval: seconds between polls of the master's events.
        max_unreachable: seconds the runner waits for an unreachable master (a master
            restart) before it gives up.
        sleep: the function used to wait (seconds).

    Raises:
        TypeError: ``search_method`` is not a SearchMethod.
    """

    def __init__(
        self,
        search_method: SearchMethod,
        searcher_dir: str | os.PathLike[str] | None = None,
        *,
        session: Session | None = None,
        poll_interval: float = 1.0,
        max_unreachable: float = 300.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not isinstance(search_method, SearchMethod):
            raise TypeError(
                f"search_method must be a SearchMethod, got {type(search_method).__name__}"
            )
        if poll_interval < 0 or max_unreachable < 0:
            raise ValueError("poll_interval and max_unreachable must be >= 0 seconds")
        self.method = search_method
        self.dir = Path(searcher_dir) if searcher_dir is not None else Path.cwd()
        self.session = session if session is not None else Session()
        self.poll_interval = float(poll_interval)
        self.max_unreachable = float(max_unreachable)
        self._sleep = sleep

    # ------------------------------------------------------------------ state

    def _state_file(self, exp_id: int) -> Path:
        return self.dir / f"exp_{exp_id}" / "state.json"

    def _save(self, exp_id: int, driver: MethodDriver) -> None:
        path = self._state_file(exp_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "experiment_id": exp_id,
            "searcher_state": driver.state.to_dict(),
            "method_state": self.method.save_method_state(),
            "experiment_seed": self.method.experiment_seed,
        }
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".state-")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)

    def _load(self, exp_id: int) -> MethodDriver:
        path = self._state_file(exp_id)
        if not path.exists():
            return MethodDriver(self.method)
        data = json.loads(path.read_text())
        self.method.experiment_seed = int(data.get("experiment_seed", 0))
        self.method.load_method_state(data["method_state"])
        return MethodDriver(self.method, SearcherState.from_dict(data["searcher_state"]))

    # ------------------------------------------------------------------ run

    def run(
        self,
        exp_config: str | os.PathLike[str] | dict[str, Any],
        model_dir: str | os.PathLike[str] | None = None,
        *,
        experiment_id: int | None = None,
    ) -> int:
        """Create the experiment (or resume the one ``searcher_dir`` names, or
        ``experiment_id``) and answer its events until it ends.

        Args:
            exp_config: the config: a path to YAML, YAML text, or a mapping.
            model_dir: the context directory to upload (None: none).
            experiment_id: drive this existing experiment instead.

        Returns:
            The experiment id.

        Raises:
            APIError: the master refused the config or an operation (the message
                names the problem).
            MasterUnreachableError: the master stayed unreachable for
                ``max_unreachable`` seconds.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        id_file = self.dir / "experiment_id.txt"
        if experiment_id is None and id_file.exists():
            experiment_id = int(id_file.read_text().strip())
        if experiment_id is None:
            config = exp_config
            if not isinstance(config, dict):
                text = str(config)
                if os.path.exists(text):
                    text = Path(text).read_text()
                config = text
            context = build_context_tarball(model_dir) if model_dir is not None else None
            created = self.session.create_experiment(config, context)
            experiment_id = int(created["id"])
            id_file.write_text(str(experiment_id))
        driver = self._load(experiment_id)
        if driver.state.last_event_id == 0:
            exp = self._call(lambda: self.session.get_json(f"/experiments/{experiment_id}"))
            self.method.experiment_seed = int(exp["experiment"].get("seed") or 0)
        self._loop(experiment_id, driver)
        return experiment_id

    def _call(self, fn: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + self.max_unreachable
        while True:
            try:
                return fn()
            except MasterUnreachableError:
                if time.monotonic() >= deadline:
                    raise
                self._sleep(max(self.poll_interval, 0.5))

    def _loop(self, exp_id: int, driver: MethodDriver) -> None:
        while True:
            answer = self._call(
                lambda: self.session.get_json(f"/experiments/{exp_id}/searcher_events")
            )
            if answer["experimentState"] in TERMINAL_STATES:
                return
            for event in answer["searcherEvents"]:
                if int(event["id"]) <= driver.state.last_event_id:
                    continue
                ops = driver.handle(event)
                body = {
                    "searcherOperations": [operation_to_wire(op) for op in ops],
                    "triggeredByEvent": {"id": int(event["id"])},
                }
                path = f"/experiments/{exp_id}/searcher_operations"

                def post(path: str = path, body: dict[str, Any] = body) -> Any:
                    return self.session.post_json(path, body)

                try:
                    self._call(post)
                except APIError as exc:
                    if exc.status == 409:  # the experiment ended meanwhile
                        return
                    raise
                self._save(exp_id, driver)
            self._sleep(self.poll_interval)


__all__ = ["RemoteSearchRunner", "TERMINAL_STATES"]
