"""What submitting an experiment shares between ``det experiment create``, ``continue`` and
``fork``: config files and ``--config KEY=VALUE`` overrides, the master's warnings, test
mode, ``-i/--include`` contexts, and following the first trial."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dauntless.client import (
    Session,
    build_context_tarball,
    experiment_done_checker,
    follow_trial_logs,
    wait_for_first_trial,
)

from . import _util
from ._render import (
    format_log_line,
)
from ._util import (
    exit_with_error,
    note,
    write_line,
)


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``--config key.sub=value`` overrides to a parsed config, in order.

    Values are parsed as YAML (``0.1`` is a float, ``true`` a bool, ``[1, 2]`` a list);
    missing intermediate keys become mappings.

    Args:
        raw: the parsed config mapping (changed in place and returned).
        overrides: ``"dotted.key=value"`` strings.

    Returns:
        ``raw``.

    Raises:
        ValueError: for an override without ``=`` or an empty key part, a value that is
            not YAML, or a path that runs through a non-mapping.
    """
    from dauntless.config import LimitError, load_yaml  # not at import: `det e list` stays cheap

    for item in overrides:
        key, sep, text = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(p.strip() for p in parts):
            raise ValueError(
                f"--config {item!r}: expected KEY=VALUE, e.g. searcher.max_length.batches=100"
            )
        try:
            value = load_yaml(text, key.strip()) if text.strip() else ""
        except LimitError as exc:
            raise ValueError(f"--config {item!r}: {exc}") from None
        node: Any = raw
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ValueError(f"--config {item!r}: {where} is not a mapping in the config")
            node = child
        node[parts[-1]] = value
    return raw


def load_config(path: str, overrides: list[str]) -> tuple[str, Any]:
    """Read the config file; returns (text to upload, value to validate)."""
    from dauntless.config import LimitError, load_yaml  # not at import: `det e list` stays cheap

    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        exit_with_error(
            f"cannot read the config file {path}: {getattr(exc, 'strerror', None) or exc}"
        )
    if not overrides:
        return text, text
    try:
        raw = load_yaml(text)
    except LimitError as exc:
        exit_with_error(f"the config file {path}: {exc}")
    if not isinstance(raw, dict):
        exit_with_error(f"the config file {path} must hold a mapping, got {type(raw).__name__}")
    try:
        apply_overrides(raw, overrides)
    except ValueError as exc:
        exit_with_error(str(exc))
    return yaml.safe_dump(raw, sort_keys=False), raw


def follow_experiment(session: Session, experiment_id: int) -> int:
    """Stream the first trial's logs until the experiment ends; print its final state.

    Returns:
        0 when the experiment COMPLETED, 130 when interrupted (Ctrl-C), else 1.
    """
    try:
        return _follow(session, experiment_id)
    except KeyboardInterrupt:
        note(
            f"Stopped following; experiment {experiment_id} keeps running "
            f"(see `det experiment describe {experiment_id}`)."
        )
        return 130


def _follow(session: Session, experiment_id: int) -> int:
    def lost(exc: Exception) -> None:
        note(f"Lost the connection to the master ({exc}); retrying...")

    trial, state = wait_for_first_trial(
        session, experiment_id, poll_interval=_util.POLL_INTERVAL, on_connection_lost=lost
    )
    if trial is not None:
        note(f"Following the logs of trial {trial['id']} of experiment {experiment_id}")
        done, last_state = experiment_done_checker(session, experiment_id, on_connection_lost=lost)
        for line in follow_trial_logs(
            session,
            int(trial["id"]),
            done=done,
            poll_interval=_util.POLL_INTERVAL,
            on_connection_lost=lost,
        ):
            write_line(format_log_line(line))
        state = last_state() or state
    write_line(f"Experiment {experiment_id} finished: {state}")
    return 0 if state == "COMPLETED" else 1


def print_warnings(warnings: list[str]) -> None:
    """Print the master's config warnings (deprecated or ignored fields) to stderr."""
    for warning in warnings:
        note(f"Warning: {warning}")


def test_mode_overrides() -> list[str]:
    """``--config`` overrides of ``det experiment create -t/--test-mode`` (Determined's
    deprecated test mode): with the searcher replaced by ``single`` of one batch (same
    metric), the experiment trains one batch, validates and checkpoints once, with one
    trial and no restarts."""
    return [
        "min_validation_period={batches: 1}",
        "min_checkpoint_period={batches: 1}",
        "scheduling_unit=1",
        "max_restarts=0",
    ]


def build_context_with_includes(context: str, includes: list[str]) -> bytes:
    """The context tarball of ``context`` plus each ``-i/--include`` path, put under its
    base name (as Determined does); a file or directory whose name is already taken in
    the context is refused.

    Raises:
        SystemExit: (via :func:`exit_with_error`) a missing path or a name clash.
    """
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dauntless-context-") as tmp:
        staged = Path(tmp) / "context"
        shutil.copytree(context, staged, symlinks=True)
        for inc in includes:
            src = Path(inc).expanduser()
            if not src.exists():
                exit_with_error(f"-i/--include {inc}: no such file or directory")
            dest = staged / src.resolve().name
            if dest.exists():
                exit_with_error(
                    f"-i/--include {inc}: {dest.name} already exists in the context directory"
                )
            if src.is_dir():
                shutil.copytree(src, dest, symlinks=True)
            else:
                shutil.copy2(src, dest)
        return build_context_tarball(staged)


__all__ = [
    "apply_overrides",
    "build_context_with_includes",
    "load_config",
    "follow_experiment",
    "print_warnings",
    "test_mode_overrides",
]
