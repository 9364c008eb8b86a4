"""Bounded parsing of YAML and JSON that comes from users (configs, request bodies,
``--config KEY=VALUE``), so that hostile input is refused quickly and cheaply instead of
costing the master seconds of CPU and gigabytes of memory.

A YAML *alias bomb* (``a: &a [x, x, ...]``, ``b: &b [*a, *a, ...]``, nine levels of
nine aliases: under 1 KB of text) expands to hundreds of millions of nodes the moment
anything walks it (``json.dumps`` of the stored config, pydantic validation); a
document nested a thousand levels deep makes every recursive walker (PyYAML's composer,
``json.loads``, ``json.dumps``) raise :class:`RecursionError`. The loaders here refuse
both before either can happen:

* :func:`load_yaml`: the text is at most :data:`MAX_TEXT_BYTES`; PyYAML's event stream
  (its parser is a state machine, not recursive) is scanned first, so nesting deeper
  than :data:`MAX_DEPTH` is refused before the (recursive) composer runs; the composed
  node graph, where an alias is a second reference to the anchored node, is then
  measured as if every alias were written out (memoized per node, so the bomb costs
  its size in nodes, not its expansion): at most :data:`MAX_NODES` nodes, scalar text
  of at most :data:`MAX_TEXT_BYTES` and :data:`MAX_DEPTH` levels, no alias that
  contains itself. YAML anchors and merge keys (``<<: *defaults``) stay usable: a
  document that obeys the limits written out in full obeys them with aliases too.
* :func:`load_json` / :func:`check_tree`: JSON has no aliases; its size bounds its node
  count, and the parsed tree is checked for depth.

Both keep every integer within a signed 64-bit range (:data:`INT_MIN`..:data:`INT_MAX`):
a ``10**30`` cannot reach a database column or a searcher. Fields with narrower ranges
check them in their own models.

What is hand-written and why: PyYAML offers no limits of its own (it documents none,
and ``SafeLoader`` expands aliases by sharing objects, which is exactly what makes the
expansion cheap to build and costly to walk), so the event scan and the memoized
measure are ours; parsing itself stays PyYAML's and the standard library's.

Every refusal is a :class:`LimitError` naming the field (a dotted path such as
``hyperparameters.x.val``) and what limit it broke.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import yaml

MAX_TEXT_BYTES = 4 * 1024 * 1024
"""Largest YAML text accepted (bytes of UTF-8), and the most scalar text (bytes) a YAML
document may hold once its aliases are expanded."""

MAX_DEPTH = 64
"""Deepest nesting of mappings and sequences accepted, in YAML (aliases expanded) and
JSON."""

MAX_NODES = 100_000
"""Most YAML nodes (scalars, mappings, sequences) a document may hold once its aliases
are expanded."""

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
"""The range of integers accepted anywhere in a config or body (a signed 64-bit
integer)."""

_SHOWN_PATH_PARTS = 8
"""Path components an error names before it shortens the path with ``...``."""


class LimitError(ValueError):
    """Input broke a parsing limit, or is not valid YAML/JSON.

    Attributes:
        field: the dotted path of the offending node (``""`` for the document itself,
            e.g. text too long or not parseable).
        detail: what is wrong, e.g. ``nested deeper than 64 levels``.
        errors: ``[(field, detail)]``, the shape of :class:`~dauntless.config.ConfigError`.
    """

    def __init__(self, field: str, detail: str) -> None:
        self.field = field
        self.detail = detail
        self.errors = [(field, detail)]
        super().__init__(f"{field}: {detail}" if field else detail)


def _dotted(parts: list[str | None]) -> str:
    shown = [p for p in parts if p]
    if len(shown) > _SHOWN_PATH_PARTS:
        shown = shown[:_SHOWN_PATH_PARTS] + ["..."]
    return ".".join(shown)


# ---------------------------------------------------------------------- YAML


def _scan_events(text: str, prefix: str) -> None:
    """Check nesting depth and node count on PyYAML's event stream.

    Raises:
        LimitError: deeper than :data:`MAX_DEPTH`, more than :data:`MAX_NODES` nodes.
        yaml.YAMLError: the text is not YAML.
    """
    # frame: [kind, counter or want_key, current key, this collection's path component]
    frames: list[list[Any]] = []
    nodes = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            nodes = _scan_event(event, frames, nodes, prefix)
    except yaml.YAMLError as exc:
        # libyaml refuses flow nesting past its own limit while it scans ahead, before
        # the events that would reach MAX_DEPTH here.
        if "nesting depth" in str(exc):
            raise LimitError(
                _dotted([prefix, *[f[3] for f in frames]]), f"nested deeper than {MAX_DEPTH} levels"
            ) from None
        raise


_NODE_EVENTS = (yaml.ScalarEvent, yaml.AliasEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)


def _scan_event(event: yaml.Event, frames: list[list[Any]], nodes: int, prefix: str) -> int:
    """One event of :func:`_scan_events` (``frames`` updated in place); returns the node
    count so far."""
    if isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
        frames.pop()
        return nodes
    if not isinstance(event, _NODE_EVENTS):
        return nodes
    nodes += 1
    part: str | None = None
    if frames:
        frame = frames[-1]
        if frame[0] == "seq":
            part = str(frame[1])
            frame[1] += 1
        elif frame[1]:  # a mapping's key
            frame[1] = False
            frame[2] = str(event.value) if isinstance(event, yaml.ScalarEvent) else "?"
            part = frame[2]
        else:  # the value of the key before it
            frame[1] = True
            part = frame[2]
    if nodes > MAX_NODES:
        raise LimitError(
            _dotted([prefix, *[f[3] for f in frames], part]), f"more than {MAX_NODES} YAML nodes"
        )
    if isinstance(event, yaml.SequenceStartEvent):
        frames.append(["seq", 0, None, part])
    elif isinstance(event, yaml.MappingStartEvent):
        frames.append(["map", True, None, part])
    if len(frames) > MAX_DEPTH:
        raise LimitError(
            _dotted([prefix, *[f[3] for f in frames]]), f"nested deeper than {MAX_DEPTH} levels"
        )
    return nodes


def _children(node: yaml.Node) -> list[tuple[str, yaml.Node]]:
    if isinstance(node, yaml.MappingNode):
        out = []
        for key, value in node.value:
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
            out.append((name, key))
            out.append((name, value))
        return out
    if isinstance(node, yaml.SequenceNode):
        return [(str(i), child) for i, child in enumerate(node.value)]
    return []


_Measure = tuple[int, int, int]  # nodes, scalar bytes, depth (each capped at limit + 1)


def _measure(root: yaml.Node, prefix: str) -> None:
    """Measure the node graph as if every alias were written out (memoized per node,
    iterative), and refuse it when over a limit or when an alias contains itself.

    Raises:
        LimitError: naming the path down the largest branch to where the limit broke.
    """
    memo: dict[int, _Measure] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, closing = stack.pop()
        key = id(node)
        if closing:
            nodes, size, depth = 1, 0, 1
            if isinstance(node, yaml.ScalarNode):
                size = len(str(node.value).encode("utf-8", "surrogatepass"))
            for _name, child in _children(node):
                c_nodes, c_size, c_depth = memo[id(child)]
                nodes = min(nodes + c_nodes, MAX_NODES + 1)
                size = min(size + c_size, MAX_TEXT_BYTES + 1)
                depth = max(depth, min(c_depth + 1, MAX_DEPTH + 1))
            memo[key] = (nodes, size, depth)
            open_nodes.discard(key)
            continue
        if key in memo:
            continue
        open_nodes.add(key)
        stack.append((node, True))
        for name, child in _children(node):
            if id(child) in open_nodes:
                raise LimitError(
                    _dotted([prefix, *_path_to(root, node, memo), name]),
                    "a YAML alias that contains itself",
                )
            if id(child) not in memo:
                stack.append((child, False))
    nodes, size, depth = memo[id(root)]
    for index, (value, limit, what) in enumerate(
        (
            (nodes, MAX_NODES, f"more than {MAX_NODES} YAML nodes once its aliases are expanded"),
            (
                size,
                MAX_TEXT_BYTES,
                f"more than {MAX_TEXT_BYTES} bytes of text once its aliases are expanded",
            ),
            (
                depth,
                MAX_DEPTH,
                f"nested deeper than {MAX_DEPTH} levels once its aliases are expanded",
            ),
        )
    ):
        if value > limit:
            path = _largest_path(root, memo, index, limit)
            raise LimitError(_dotted([prefix, *path]), what)


def _largest_path(root: yaml.Node, memo: dict[int, _Measure], index: int, limit: int) -> list[str]:
    """The path from ``root`` down the branch that is largest by measure ``index``
    (nodes, bytes: as long as one child alone still breaks ``limit``; depth: the
    deepest branch), for the error to name the field that holds the excess."""
    path: list[str] = []
    node = root
    while len(path) <= _SHOWN_PATH_PARTS:
        best: tuple[str, yaml.Node] | None = None
        for name, child in _children(node):
            value = memo[id(child)][index]
            if index != 2 and value <= limit:
                continue
            if best is None or value > memo[id(best[1])][index]:
                best = (name, child)
        if best is None or (index == 2 and not _children(best[1])):
            break
        path.append(best[0])
        node = best[1]
    return path


def _path_to(root: yaml.Node, target: yaml.Node, memo: dict[int, _Measure]) -> list[str]:
    """A path from ``root`` to ``target`` (for the error of a self-containing alias)."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, list[str]]] = [(root, [])]
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        if id(node) in seen or len(path) > MAX_DEPTH:
            continue
        seen.add(id(node))
        stack.extend((child, [*path, name]) for name, child in _children(node))
    return []


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML's safe loader (its C version when built with libyaml)."""


def load_yaml(text: str | bytes, what: str = "") -> Any:
    """Parse one YAML document within the limits of this module.

    Args:
        text: the YAML text (bytes are decoded as UTF-8).
        what: the field the text is (``"config"``), prefixed to error paths; ``""``
            for a whole config, whose errors then name its own fields.

    Returns:
        What the document holds (None for an empty one), as ``yaml.safe_load`` builds it.

    Raises:
        LimitError: text over :data:`MAX_TEXT_BYTES`, not UTF-8, not YAML, several
            documents, nesting over :data:`MAX_DEPTH`, over :data:`MAX_NODES` nodes or
            :data:`MAX_TEXT_BYTES` of text once aliases are expanded, an alias that
            contains itself, or an integer outside :data:`INT_MIN`..:data:`INT_MAX`.
    """
    if isinstance(text, bytes):
        if len(text) > MAX_TEXT_BYTES:
            raise LimitError(what, f"the text is {len(text)} bytes; at most {MAX_TEXT_BYTES}")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LimitError(what, f"not UTF-8 text: {exc}") from None
    if len(text) > MAX_TEXT_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise LimitError(what, f"the text is over {MAX_TEXT_BYTES} bytes")
    try:
        _scan_events(text, what)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _measure(node, what)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise LimitError(what, f"not valid YAML: {_one_line(exc)}") from None
    check_tree(data, what)
    return data


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


# ---------------------------------------------------------------------- JSON


def _walk(data: Any) -> Iterator[tuple[list[str], Any, int]]:
    """Every node of a tree of dicts and lists, with its path and depth, iteratively."""
    stack: list[tuple[list[str], Any, int]] = [([], data, 0)]
    while stack:
        path, node, depth = stack.pop()
        yield path, node, depth
        if isinstance(node, dict):
            stack.extend(([*path, str(k)], v, depth + 1) for k, v in node.items())
        elif isinstance(node, (list, tuple)):
            stack.extend(([*path, str(i)], v, depth + 1) for i, v in enumerate(node))


def within_limits(data: Any, max_float: float | None = None) -> bool:
    """Whether ``data`` (a tree of dicts, lists or tuples and scalars) obeys
    :func:`check_tree`'s rules (nesting of at most :data:`MAX_DEPTH`, integers within
    :data:`INT_MIN`..:data:`INT_MAX`) and, given ``max_float``, holds no float of
    magnitude ``max_float`` or more: the fast pass, which keeps no paths (one visit per
    container and per value, no allocation per scalar). False says only that a slower
    check must decide (:func:`check_tree` names the offending node).

    ``max_float`` serves the master's JSON bodies (:mod:`dauntless.master.body_limits`):
    orjson reads an integer literal past 64 bits as such a float, where ``json.loads``
    reads an int, so one walk checks both there."""
    kind = type(data)
    if kind is int:
        return INT_MIN <= data <= INT_MAX
    if kind is float:
        return max_float is None or -max_float < data < max_float
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        if type(node) is dict:
            values: Any = node.values()
        elif type(node) in (list, tuple):
            values = node
        else:
            continue
        if depth >= MAX_DEPTH:
            return False
        for value in values:
            kind = type(value)
            if kind is int:
                if not INT_MIN <= value <= INT_MAX:
                    return False
            elif kind is float:
                if max_float is not None and not -max_float < value < max_float:
                    return False
            elif kind is dict or kind is list or kind is tuple:
                stack.append((value, depth + 1))
    return True


def check_tree(data: Any, what: str = "") -> None:
    """Check parsed YAML/JSON: nesting of at most :data:`MAX_DEPTH` levels and every
    integer in :data:`INT_MIN`..:data:`INT_MAX`.

    Iterative, so any depth is checked without recursion; one visit per node (mapping
    keys are not nodes), and the paths are built only to name an offending node.

    Args:
        data: dicts, lists, tuples and scalars.
        what: prefixed to the paths in errors.

    Raises:
        LimitError: naming the path of the first offending node.
    """
    if within_limits(data):
        return
    for path, node, depth in _walk(data):
        if depth >= MAX_DEPTH and isinstance(node, (dict, list, tuple)):
            raise LimitError(_dotted([what, *path]), f"nested deeper than {MAX_DEPTH} levels")
        if type(node) is int and not INT_MIN <= node <= INT_MAX:
            digits = len(str(abs(node))) if abs(node) < 10**4000 else 4000
            shown = str(node) if digits <= 40 else f"an integer of {digits} digits"
            raise LimitError(
                _dotted([what, *path]),
                f"{shown} is out of range: integers must lie in {INT_MIN}..{INT_MAX}",
            )


def load_json(text: str | bytes, what: str = "", max_bytes: int = MAX_TEXT_BYTES) -> Any:
    """Parse JSON within limits: at most ``max_bytes``, then :func:`check_tree`.

    Args:
        text: the JSON text.
        what: the field the text is, named in errors.
        max_bytes: the largest text accepted (bytes).

    Returns:
        The parsed value.

    Raises:
        LimitError: too long, not JSON, nested too deep (also where ``json.loads``
            itself would run out of stack) or an integer out of range.
    """
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise LimitError(what, f"the text is {size} bytes; at most {max_bytes}")
    try:
        data = json.loads(text)
    except RecursionError:
        raise LimitError(what, f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of over 4300 digits
        raise LimitError(what, f"not valid JSON: {_one_line(exc)}") from None
    check_tree(data, what)
    return data


__all__ = [
    "INT_MAX",
    "INT_MIN",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_TEXT_BYTES",
    "LimitError",
    "check_tree",
    "load_json",
    "load_yaml",
]


def load_yaml_file(path: str, what: str) -> dict[str, Any]:
    """A config file that holds one YAML mapping (``what`` says whose config it is, for
    the messages), parsed with :func:`load_yaml`'s limits; an empty file is ``{}``.

    Raises:
        LimitError: the file cannot be read, breaks a limit, or holds no mapping (the
            message names the file).
    """
    try:
        with open(path, "rb") as f:
            raw = load_yaml(f.read(), "") or {}
    except OSError as exc:
        raise LimitError("", f"cannot read {path}: {exc.strerror or exc}") from None
    except LimitError as exc:
        raise LimitError("", f"{path}: {exc}") from None
    if not isinstance(raw, dict):
        raise LimitError("", f"{path}: the {what} config must be a mapping")
    return raw
