"""Errors raised by the searchers."""

from __future__ import annotations


class SearcherConfigError(ValueError):
    """The experiment config cannot be searched as written.

    Raised by :func:`dauntless.searcher.make_searcher` (so at experiment creation, never
    in the middle of a search); the message names the config field and the fix.

    Attributes:
        field: the dotted config path at fault, for example ``hyperparameters.lr`` or
            ``searcher.time_metric``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.detail = message
