"""Bounded YAML and JSON parsing (dauntless.config._limits, issue 29 scope 5): alias
bombs, deep nesting, self-containing aliases and huge integers are refused quickly,
naming the field; ordinary configs with anchors and merge keys still load."""

from __future__ import annotations

import json
import time

import pytest

from dauntless.config import (
    MAX_DEPTH,
    MAX_NODES,
    ConfigError,
    LimitError,
    check_tree,
    load_json,
    load_yaml,
    parse_experiment_config,
)


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The classic "billion laughs" in YAML, inside a valid field: ``width**levels``
    nodes once expanded, a few hundred bytes of text."""
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    body = "\n".join("      " + line for line in lines)
    return f"hyperparameters:\n  x:\n    type: const\n    val:\n{body}\n"


def deep_nesting(depth: int = 1000) -> str:
    return f"hyperparameters:\n  x:\n    type: const\n    val: {'[' * depth}{']' * depth}\n"


def test_alias_bomb_is_refused_at_once_naming_the_field() -> None:
    text = alias_bomb()
    assert len(text) < 1000
    start = time.perf_counter()
    with pytest.raises(LimitError) as info:
        load_yaml(text)
    assert time.perf_counter() - start < 0.5
    assert info.value.field.startswith("hyperparameters.x.val")
    assert f"more than {MAX_NODES} YAML nodes once its aliases are expanded" in info.value.detail


def test_deep_nesting_is_refused_naming_the_field() -> None:
    for text in (deep_nesting(1000), deep_nesting(MAX_DEPTH + 1)):
        with pytest.raises(LimitError) as info:
            load_yaml(text)
        assert info.value.field.startswith("hyperparameters.x.val")
        assert info.value.detail == f"nested deeper than {MAX_DEPTH} levels"
    block = "a:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(100)) + "  " * 101 + "v\n"
    with pytest.raises(LimitError, match="nested deeper") as info:
        load_yaml(block)
    assert info.value.field.startswith("a.k0.k1.k2")
    # Just within the limit loads.
    assert load_yaml("[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)) is not None


def test_aliases_that_expand_deep_or_large_or_into_themselves() -> None:
    chain = "\n".join(["a0: &a0 [1]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 80)])
    with pytest.raises(LimitError, match="deeper than 64 levels once its aliases") as info:
        load_yaml(chain)
    assert info.value.field.startswith("a6")
    big = "a: &a " + "x" * 1_000_000 + "\nb: [" + ", ".join(["*a"] * 10) + "]\n"
    with pytest.raises(LimitError, match="bytes of text once its aliases") as info:
        load_yaml(big)
    assert info.value.field == "b"
    with pytest.raises(LimitError, match="contains itself") as info:
        load_yaml("a: &a [1, *a]")
    assert info.value.field == "a.1"


def test_integers_beyond_64_bits_and_bad_text() -> None:
    with pytest.raises(LimitError) as info:
        load_yaml("searcher:\n  max_trials: 1000000000000000000000000000000\n")
    assert info.value.field == "searcher.max_trials" and "out of range" in info.value.detail
    assert load_yaml("a: 9223372036854775807")["a"] == 2**63 - 1
    with pytest.raises(LimitError) as info:
        load_yaml("a: [1, 2\nb: 3")
    assert info.value.field == "" and info.value.detail.startswith("not valid YAML")
    with pytest.raises(LimitError, match="bytes"):
        load_yaml("a: " + "x" * (5 * 1024 * 1024))
    with pytest.raises(LimitError, match="not UTF-8"):
        load_yaml(b"a: \xff\xfe")


def test_ordinary_yaml_with_anchors_and_merge_keys_loads() -> None:
    text = (
        "defaults: &d {lr: 0.1, layers: [1, 2, 3]}\n"
        "hyperparameters:\n  <<: *d\n  lr: 0.2\n"
        "more: [*d, *d]\n"
    )
    data = load_yaml(text)
    assert data["hyperparameters"] == {"lr": 0.2, "layers": [1, 2, 3]}
    assert data["more"] == [data["defaults"], data["defaults"]]
    assert load_yaml("") is None and load_yaml("# just a comment\n") is None


def test_json_limits() -> None:
    with pytest.raises(LimitError) as info:
        load_json("[" * 5000 + "]" * 5000, "entrypoint")
    assert info.value.field == "entrypoint" and "nested deeper" in info.value.detail
    with pytest.raises(LimitError) as info:
        load_json(json.dumps({"a": [{"b": 10**30}]}), "body")
    assert info.value.field == "body.a.0.b"
    with pytest.raises(LimitError, match="at most 10"):
        load_json("[1, 2, 3, 4, 5]", "x", max_bytes=10)
    with pytest.raises(LimitError, match="not valid JSON"):
        load_json("{", "x")
    assert load_json('{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    check_tree({"a": [1, 2.5, "x", True, None, -(2**63)]})


def test_experiment_configs_name_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(alias_bomb())
    assert info.value.errors[0][0].startswith("hyperparameters.x.val")
    with pytest.raises(ConfigError) as info:
        parse_experiment_config({"hyperparameters": {"x": {"type": "const", "val": 10**30}}})
    assert info.value.errors[0][0] == "hyperparameters.x.val"
