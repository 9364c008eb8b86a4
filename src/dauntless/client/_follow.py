"""Following a trial's logs and an experiment's progress by polling the master."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from ._errors import MasterUnreachableError
from ._session import Session
from ._types import TERMINAL_EXPERIMENT_STATES, TERMINAL_TRIAL_STATES, LogLine, Trial

#: Lines asked for per logs request.
LOG_PAGE_SIZE = 1000


class _Reconnect:
    """Tolerates an unreachable master for up to ``timeout`` seconds in a row."""

    def __init__(
        self, timeout: float, on_lost: Callable[[MasterUnreachableError], None] | None
    ) -> None:
        self.timeout = timeout
        self.on_lost = on_lost
        self.since: float | None = None

    def failed(self, exc: MasterUnreachableError) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = now
            if self.on_lost is not None:
                self.on_lost(exc)
        if now - self.since >= self.timeout:
            raise exc

    def ok(self) -> None:
        self.since = None


def follow_trial_logs(
    session: Session,
    trial_id: int,
    *,
    after_id: int = 0,
    follow: bool = True,
    done: Callable[[str], bool] | None = None,
    poll_interval: float = 0.5,
    reconnect_timeout: float = 60.0,
    on_connection_lost: Callable[[MasterUnreachableError], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[LogLine]:
    """Yield a trial's log lines in order, polling ``GET /trials/{id}/logs?after_id=``.

    Args:
        session: the master to ask.
        trial_id: the trial whose lines to read.
        after_id: start after this line id (0: from the first line).
        follow: False to stop once the lines stored now are read; True to keep polling
            until ``done`` says so.
        done: called with the ``trial_state`` of each answer that brought no full page;
            following stops (after one last read for lines that raced the state change)
            when it returns True. Default: the trial is COMPLETED, CANCELED or ERROR.
        poll_interval: seconds between polls when no new lines came.
        reconnect_timeout: seconds an unreachable master is waited for while following,
            before :class:`MasterUnreachableError` is raised.
        on_connection_lost: called once each time the master becomes unreachable.
        sleep: the waiting function (tests pass a fake).

    Yields:
        Log lines, each exactly once, in increasing ``id``.

    Raises:
        APIError: for an error answer (404 for an unknown trial).
        MasterUnreachableError: when the master stays unreachable (at once when not
            following).
    """
    if poll_interval < 0:
        raise ValueError(f"poll_interval must be >= 0 seconds, got {poll_interval}")
    stop = done if done is not None else (lambda state: state in TERMINAL_TRIAL_STATES)
    reconnect = _Reconnect(reconnect_timeout, on_connection_lost)
    last_id = after_id
    finishing = False
    while True:
        try:
            page = session.get_trial_logs(trial_id, after_id=last_id, limit=LOG_PAGE_SIZE)
            reconnect.ok()
        except MasterUnreachableError as exc:
            if not follow:
                raise
            reconnect.failed(exc)
            sleep(poll_interval)
            continue
        lines = page.get("logs", [])
        for line in lines:
            if int(line["id"]) > last_id:
                last_id = int(line["id"])
                yield line
        if len(lines) >= LOG_PAGE_SIZE:
            continue
        if not follow or finishing:
            return
        if stop(str(page.get("trial_state", ""))):
            finishing = True  # one more read: lines stored just before the state changed
            continue
        sleep(poll_interval)


def wait_for_first_trial(
    session: Session,
    experiment_id: int,
    *,
    poll_interval: float = 0.5,
    reconnect_timeout: float = 60.0,
    on_connection_lost: Callable[[MasterUnreachableError], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[Trial | None, str]:
    """Wait until an experiment has a trial, or has ended without one.

    Args:
        session: the master to ask.
        experiment_id: the experiment.
        poll_interval: seconds between polls.
        reconnect_timeout: seconds an unreachable master is waited for.
        on_connection_lost: called once each time the master becomes unreachable.
        sleep: the waiting function.

    Returns:
        ``(trial, state)``: the trial with the smallest id (None when the experiment
        reached a terminal state with no trial) and the experiment's state then.

    Raises:
        APIError: for an error answer (404 for an unknown experiment).
        MasterUnreachableError: when the master stays unreachable.
    """
    reconnect = _Reconnect(reconnect_timeout, on_connection_lost)
    while True:
        try:
            detail = session.get_experiment(experiment_id)
            reconnect.ok()
        except MasterUnreachableError as exc:
            reconnect.failed(exc)
            sleep(poll_interval)
            continue
        state = str(detail["experiment"]["state"])
        trials = sorted(detail.get("trials") or [], key=lambda t: int(t["id"]))
        if trials:
            return trials[0], state
        if state in TERMINAL_EXPERIMENT_STATES:
            return None, state
        sleep(poll_interval)


def experiment_done_checker(
    session: Session,
    experiment_id: int,
    *,
    reconnect_timeout: float = 60.0,
    on_connection_lost: Callable[[MasterUnreachableError], None] | None = None,
) -> tuple[Callable[[str], bool], Callable[[], str | None]]:
    """Build a ``done`` callback for :func:`follow_trial_logs` that waits for the experiment.

    Args:
        session: the master to ask.
        experiment_id: the experiment whose end stops the follow.
        reconnect_timeout: seconds an unreachable master is tolerated.
        on_connection_lost: called once each time the master becomes unreachable.

    Returns:
        ``(done, last_state)``: ``done(trial_state)`` asks the master for the experiment's
        state and is True once it is terminal; ``last_state()`` gives the state last seen.
    """
    seen: dict[str, str] = {}
    reconnect = _Reconnect(reconnect_timeout, on_connection_lost)

    def done(_trial_state: str) -> bool:
        try:
            state = str(session.get_experiment(experiment_id)["experiment"]["state"])
            reconnect.ok()
        except MasterUnreachableError as exc:
            reconnect.failed(exc)
            return False
        seen["state"] = state
        return state in TERMINAL_EXPERIMENT_STATES

    return done, lambda: seen.get("state")
