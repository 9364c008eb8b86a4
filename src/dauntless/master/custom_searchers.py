"""Custom search methods that run in the master (issue 35 scope 4).

``searcher.method: module:Class`` names a :class:`~dauntless.searcher.custom.SearchMethod`
subclass in one file of the experiment's context directory (``module.py``, or
``pkg/module.py`` for ``pkg.module``). The master reads that file out of the stored
context (nothing is extracted to disk), executes it as a fresh module of its own, and
builds the class with no arguments for every restore of the searcher.

Why a master setting gates it: the method runs in the master's process, with the
master's privileges: its database, its secrets (the cluster secret), the files of every
user. ``custom_searchers.in_master`` (master config) is ``off`` by default, so a
multi-user cluster runs nobody's code in the master; ``admins`` accepts such experiments
from administrators, ``all`` from everyone (a single-user cluster). Any user can run
their method remotely instead (:mod:`dauntless.search_runner`), in a process of their
own, with their own token. An exception of the method fails its experiment with the
traceback (the searcher catches it); code that kills or hangs the process is beyond
what a shared process can defend against, which is the other reason for the gate.
"""

from __future__ import annotations

import io
import tarfile
import threading
import types
from collections.abc import Callable
from typing import Any

from dauntless.config import CustomSearcher, ExperimentConfig
from dauntless.searcher.custom import SearchMethod

MAX_METHOD_BYTES = 1 << 20
"""The largest search method source file read from a context (1 MiB)."""

_LOCK = threading.Lock()
_CLASSES: dict[tuple[int, str], type[SearchMethod]] = {}


class MethodLoadError(ValueError):
    """The search method named in the config cannot be loaded (the message says why)."""


def runs_in_master(config: ExperimentConfig) -> bool:
    """Whether the config's searcher is a custom method run in the master."""
    return isinstance(config.searcher, CustomSearcher) and config.searcher.method is not None


def load_method_class(context: bytes | None, method: str) -> type[SearchMethod]:
    """The SearchMethod subclass ``module:Class`` from a context archive.

    Args:
        context: the context directory as a gzipped tar (bytes), or None.
        method: ``module:Class`` (``searcher.method``).

    Returns:
        The class.

    Raises:
        MethodLoadError: no context, no such file (or over 1 MiB), code that fails to
            run (its traceback's last line), no such class, or not a SearchMethod.
    """
    module_name, _, class_name = method.partition(":")
    path = module_name.replace(".", "/") + ".py"
    if context is None:
        raise MethodLoadError(f"{method}: the experiment has no context directory holding {path}")
    try:
        with tarfile.open(fileobj=io.BytesIO(context), mode="r:*") as tar:
            member = next(
                (m for m in tar.getmembers() if m.name.lstrip("./") == path and m.isfile()),
                None,
            )
            if member is None:
                raise MethodLoadError(f"{method}: no file {path} in the context directory")
            if member.size > MAX_METHOD_BYTES:
                raise MethodLoadError(f"{method}: {path} is over {MAX_METHOD_BYTES} bytes")
            handle = tar.extractfile(member)
            source = handle.read() if handle is not None else b""
    except tarfile.TarError as exc:
        raise MethodLoadError(f"{method}: the context is not a readable archive: {exc}") from None
    module = types.ModuleType(f"dauntless_custom_searcher_{module_name.replace('.', '_')}")
    module.__file__ = f"<context>/{path}"
    try:
        exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102
    except BaseException as exc:  # the user's code: a failure names it, the master goes on
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise MethodLoadError(
            f"{method}: running {path} raised {type(exc).__name__}: {exc}"
        ) from None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type) or not issubclass(cls, SearchMethod):
        raise MethodLoadError(
            f"{method}: {class_name} in {path} is not a subclass of "
            "dauntless.searcher.custom.SearchMethod"
        )
    return cls


def method_factory(
    exp_id: int, config: ExperimentConfig, read_context: Callable[[], bytes | None]
) -> Callable[[], Any] | None:
    """A builder of fresh search method instances for an experiment whose custom method
    runs in the master (the class is loaded once per experiment); None for any other
    searcher.

    Raises:
        MethodLoadError: the method cannot be loaded.
    """
    if not runs_in_master(config):
        return None
    method = str(config.searcher.method)  # type: ignore[union-attr]
    key = (exp_id, method)
    with _LOCK:
        cls = _CLASSES.get(key)
    if cls is None:
        cls = load_method_class(read_context(), method)
        with _LOCK:
            _CLASSES[key] = cls
    return cls


def forget(exp_id: int) -> None:
    """Drop an experiment's loaded method class (the experiment was deleted)."""
    with _LOCK:
        for key in [k for k in _CLASSES if k[0] == exp_id]:
            del _CLASSES[key]
