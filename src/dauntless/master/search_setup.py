"""Checks of an experiment config's searcher at create that need the master's view
(issue 35): whether a custom search method may run in the master, and PBT's checkpoint
period. Leaves of the master: no model function, no session."""

from __future__ import annotations

from typing import Any

from dauntless.config import ExperimentConfig, PBTSearcher

from .custom_searchers import MethodLoadError, load_method_class, runs_in_master
from .errors import BadRequest


def custom_method_class(
    policy: str, admin: bool, cfg: ExperimentConfig, context: bytes | None
) -> Any:
    """The class of a custom search method to run in the master, if the config names
    one and the master allows it for its owner (``policy``: the master config's
    ``custom_searchers.in_master``; ``admin``: the owner is an administrator; see
    :mod:`.custom_searchers` for why); None for any other searcher.

    Raises:
        BadRequest: the master does not allow it for this owner, or it cannot be loaded.
    """
    if not runs_in_master(cfg):
        return None
    if policy == "off" or (policy == "admins" and not admin):
        who = "no one" if policy == "off" else "administrators only"
        raise BadRequest(
            "invalid experiment config",
            [
                (
                    "searcher.method",
                    f"this master runs custom search methods in its own process for {who} "
                    "(master config custom_searchers.in_master); leave searcher.method out "
                    "and run the method with dauntless.search_runner.RemoteSearchRunner",
                )
            ],
        )
    try:
        return load_method_class(context, str(cfg.searcher.method))  # type: ignore[union-attr]
    except MethodLoadError as exc:
        raise BadRequest("invalid experiment config", [("searcher.method", str(exc))]) from None


def pbt_checkpoints(cfg: ExperimentConfig, raw: dict[str, Any]) -> None:
    """PBT clones start from their parents' checkpoints at the end of a round: unless
    ``min_checkpoint_period`` already checkpoints there, it is set to
    ``length_per_round``.

    Raises:
        BadRequest: a ``min_checkpoint_period`` that misses the end of a round.
    """
    if not isinstance(cfg.searcher, PBTSearcher):
        return
    round_length = cfg.searcher.length_per_round
    period = cfg.min_checkpoint_period
    if period.value == 0:
        raw["min_checkpoint_period"] = round_length.model_dump(exclude_none=True)
        return
    if period.unit != round_length.unit or round_length.value % period.value:
        raise BadRequest(
            "invalid experiment config",
            [
                (
                    "min_checkpoint_period",
                    "PBT clones start from their parents' checkpoints at the end of each "
                    f"round: give a period that divides length_per_round ({round_length.value} "
                    f"{round_length.unit.value}), in the same unit, or leave it out",
                )
            ],
        )
