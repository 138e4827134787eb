"""The config validator (`config_schema`) and its rules (`config_rules`) on small hand-made schemas."""

from __future__ import annotations

import math

import pytest

from radixflow.models.config_rules import (
    AtMost,
    Divides,
    Equals,
    HasLayer,
    LayerCount,
    OneOf,
    Positive,
    RequiredWhen,
    When,
)
from radixflow.models.config_schema import ConfigField, Schema, Table, validate_config
from radixflow.models.config_types import AnyOf, Bool, Float, Int, ListOf, Str
from radixflow.problems import Problem


def one(schema: Schema, data: dict) -> str:
    """The single problem's text (``param: message``)."""
    problems = validate_config(schema, data)
    assert len(problems) == 1, problems
    return str(problems[0])


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (4.5, "n: must be an integer, got 4.5"),
        (32.0, "n: must be an integer, got 32.0"),
        ("32", 'n: must be an integer, got "32"'),
        (True, "n: must be an integer, got true"),
        (0, "n: must be a positive integer, got 0"),
        ([1], "n: must be an integer, got [1]"),
    ],
)
def test_an_integer_field_takes_integers_only(value, says) -> None:
    assert one(Schema((ConfigField("n", Int(1)),)), {"n": value}) == says


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("1e-6", 'eps: must be a positive finite number, got "1e-6"'),
        (0, "eps: must be a positive finite number, got 0"),
        (-1e-6, "eps: must be a positive finite number, got -1e-06"),
        (math.nan, "eps: must be a positive finite number, got NaN"),
        (math.inf, "eps: must be a positive finite number, got Infinity"),
        ({"__float__": "Infinity"}, 'eps: must be a positive finite number, got {"__float__": "Infinity"}'),
        (False, "eps: must be a positive finite number, got false"),
    ],
)
def test_a_float_field_takes_finite_numbers_in_range(value, says) -> None:
    assert one(Schema((ConfigField("eps", Float(above=0.0)),)), {"eps": value}) == says


@pytest.mark.parametrize("finite", [True, False])
def test_an_integer_beyond_a_floats_range_is_a_problem_not_an_overflow(finite: bool) -> None:
    schema = Schema((ConfigField("theta", Float(above=0.0, finite=finite)),))
    says = one(schema, {"theta": 10**400})  # JSON reads a 401-digit literal as an int
    assert says.startswith("theta: must be a positive ") and says.endswith("(beyond a float's range)")


def test_a_float_field_takes_integers_and_the_tagged_infinity_where_allowed() -> None:
    schema = Schema((ConfigField("limit", ListOf(Float(low=0.0, finite=False), length=2)),))
    assert validate_config(schema, {"limit": [0, {"__float__": "Infinity"}]}) == []
    assert validate_config(schema, {"limit": [0.0, math.inf]}) == []
    assert "entry 1: must be a number >= 0, got NaN" in one(schema, {"limit": [0, math.nan]})
    assert "must have 2 entries" in one(schema, {"limit": [0.0]})


def test_bool_str_list_anyof_and_table() -> None:
    schema = Schema(
        (
            ConfigField("tie", Bool()),
            ConfigField("sliding", Bool(only=False, why="not supported")),
            ConfigField("act", Str(("silu", "gelu"))),
            ConfigField("pattern", Str(alphabet="M*", min_length=1)),
            ConfigField("eos", AnyOf((Int(0), ListOf(Int(0))))),
            ConfigField("rope", Table(Schema((ConfigField("theta", Float(above=0.0), required=True),)))),
        )
    )
    assert validate_config(schema, {"tie": True, "act": "silu", "pattern": "M*M", "eos": [1, 2]}) == []
    assert one(schema, {"tie": 1}) == "tie: must be true or false, got 1"
    assert one(schema, {"sliding": True}) == "sliding: must be false (not supported), got true"
    assert one(schema, {"act": "tanh"}) == 'act: must be one of "silu", "gelu", got "tanh"'
    assert one(schema, {"pattern": "M-"}) == "pattern: character '-' is not one of M*"
    assert one(schema, {"pattern": ""}).startswith("pattern: must have at least 1 character")
    assert one(schema, {"eos": [1, -2]}).startswith("eos: must be an integer >= 0 or a list of")
    assert (
        one(schema, {"rope": {"theta": "1e4"}}) == 'rope.theta: must be a positive finite number, got "1e4"'
    )
    assert one(schema, {"rope": {}}) == "rope.theta: missing (must be a positive finite number)"
    assert one(schema, {"rope": 3}) == "rope: must be an object, got 3"


def test_null_is_unset_required_fields_must_be_given_and_undeclared_keys_are_ignored() -> None:
    schema = Schema((ConfigField("n", Int(1), required=True), ConfigField("m", Int(1))))
    assert validate_config(schema, {"n": 1, "m": None, "anything": "else"}) == []
    assert validate_config(schema, {"n": None}) == [Problem("n", "missing (must be a positive integer)")]


def test_an_alias_is_read_when_the_name_is_unset_and_is_named_in_the_problem() -> None:
    schema = Schema((ConfigField("n_groups", Int(1), aliases=("mamba_n_groups",)),))
    assert one(schema, {"mamba_n_groups": 2.5}) == "mamba_n_groups: must be an integer, got 2.5"
    assert one(schema, {"n_groups": 0, "mamba_n_groups": 2}).startswith("n_groups:")


def test_every_type_problem_is_reported_and_rules_wait_for_the_types() -> None:
    schema = Schema(
        (ConfigField("a", Int(1)), ConfigField("b", Int(1))),
        rules=(Divides("a", "b"),),
    )
    assert [p.param for p in validate_config(schema, {"a": "x", "b": 2.5})] == ["a", "b"]
    assert one(schema, {"a": 3, "b": 4}) == "a: must divide b (4), got 3"
    assert validate_config(schema, {"a": 2, "b": 4}) == []


def test_layer_count_divides_at_most_and_one_of() -> None:
    schema = Schema(
        (
            ConfigField("layers", Int(1)),
            ConfigField("types", ListOf(Str(("x", "y")))),
            ConfigField("pattern", Str(alphabet="xy")),
            ConfigField("heads", Int(1)),
            ConfigField("hidden", Int(1)),
            ConfigField("head_dim", Int(1)),
            ConfigField("only", ListOf(Int(0))),
        ),
        rules=(
            OneOf(("types", "pattern")),
            LayerCount(("types", "pattern"), count="layers"),
            Divides("heads", "hidden", unless="head_dim"),
            AtMost("only", "layers", strict=True),
        ),
    )
    base = {"layers": 2, "types": ["x", "y"], "heads": 4, "hidden": 64}
    assert validate_config(schema, base) == []
    assert one(schema, {**base, "types": ["x"]}) == "types: has 1 entries, but layers is 2"
    assert (
        one(schema, {**base, "types": None, "pattern": "xyx"}) == "pattern: has 3 characters, but layers is 2"
    )
    assert one(schema, {"layers": 2}).startswith("types: missing (the layer pattern: give types or pattern)")
    assert (
        one(schema, {**base, "hidden": 66})
        == "heads: must divide hidden (66) when head_dim is not given, got 4"
    )
    assert validate_config(schema, {**base, "hidden": 66, "head_dim": 16}) == []
    assert one(schema, {**base, "only": [0, 2]}) == "only: entry 2 must be below layers (2)"


def test_conditions_apply_rules_only_where_they_hold() -> None:
    schema = Schema(
        (
            ConfigField("experts", Int(0)),
            ConfigField("top_k", Int(1)),
            ConfigField("kind", Str(("a", "b"))),
            ConfigField("factor", Float(above=0.0)),
            ConfigField("types", ListOf(Str(("dense", "moe")))),
            ConfigField("moe_size", Int(1)),
        ),
        rules=(
            When(Positive("experts"), AtMost("top_k", "experts")),
            RequiredWhen(("factor",), Equals("kind", ("b",))),
            RequiredWhen(("moe_size",), HasLayer("moe")),
        ),
        layer_kinds=lambda data: list(data.get("types") or []),
    )
    assert validate_config(schema, {"experts": 0, "top_k": 8}) == []
    assert one(schema, {"experts": 4, "top_k": 8}) == "top_k: must be at most experts (4), got 8"
    assert validate_config(schema, {"kind": "a"}) == []
    assert one(schema, {"kind": "b"}) == 'factor: missing (needed for kind "b")'
    assert validate_config(schema, {"types": ["dense"]}) == []
    assert one(schema, {"types": ["dense", "moe"]}) == "moe_size: missing (needed for the 'moe' layers)"


def test_merged_schemas_replace_fields_by_name_and_keep_every_rule() -> None:
    a = Schema((ConfigField("n", Int(1), required=True),), rules=(Divides("n", "m"),))
    b = Schema((ConfigField("n", Int(1)), ConfigField("m", Int(1))))
    merged = a.merged(b)
    assert [f.name for f in merged.fields] == ["n", "m"]
    assert validate_config(merged, {}) == []  # b's optional n replaced a's required one
    assert one(merged, {"n": 3, "m": 4}) == "n: must divide m (4), got 3"


def test_long_values_are_cut_in_the_message() -> None:
    text = one(Schema((ConfigField("n", Int(1)),)), {"n": list(range(100))})
    assert text.endswith("...") and len(text) < 120


def test_a_spelling_read_first_decides_over_the_field_and_is_named() -> None:
    """``read_first``: a spelling transformers sets the field from over its own (attribute_map)."""
    experts = ConfigField("experts", Int(1), required=True, read_first=("local_experts",))
    schema = Schema((experts, ConfigField("k", Int(1))), rules=(AtMost("k", "experts"),))
    assert validate_config(schema, {"experts": 8, "local_experts": 2, "k": 2}) == []
    assert one(schema, {"experts": 8, "local_experts": 2, "k": 4}) == "k: must be at most experts (2), got 4"
    zero = {"experts": 8, "local_experts": 0}
    assert one(schema, zero) == "local_experts: must be a positive integer, got 0"
    assert one(schema, {}) == "experts: missing (must be a positive integer)"


INF = {"__float__": "Infinity"}  # transformers' tagged infinity


@pytest.mark.parametrize(
    ("data", "defaults", "says"),
    [
        ({"k": 5, "n": 4}, None, "k: must be below n (4), got 5"),
        # filled in by the family's defaults, or the rule's own where the code reads one
        ({"k": 5}, {"n": 4}, "k: must be below n (4 (its default)), got 5"),
        ({"k": 5}, None, "k: must be below n (3 (its default)), got 5"),
        ({}, {"k": 5, "n": 4}, "k: must be below n (4 (its default)), got 5 (its default)"),
        # the tagged infinity, said as the number it is
        ({"k": INF, "n": INF}, None, 'k: must be below n (inf), got {"__float__": "Infinity"}'),
        ({"k": [1, 4]}, {"n": 4}, "k: entry 4 must be below n (4 (its default))"),
    ],
)
def test_at_most_says_the_bound_and_where_it_comes_from(data, defaults, says) -> None:
    number = AnyOf((Int(0), Float(low=0.0, finite=False)))
    fields = (ConfigField("k", AnyOf((number, ListOf(number)))), ConfigField("n", number))
    schema = Schema(fields, rules=(AtMost("k", "n", strict=True, bound_default=3),))
    assert [str(p) for p in validate_config(schema, data, defaults)] == [says]
