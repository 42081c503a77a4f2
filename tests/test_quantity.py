"""resource.Quantity parsing and the scheduler's round-up conversions (pure, no Redis)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedcache.errors import ValidationError
from schedcache.model.quantity import MAX_QUANTITY, int_value, milli_value, parse_quantity


def q(value):
    return parse_quantity(value, obj="pod default/p", field="spec.x")


def milli(value):
    return milli_value(value, obj="o", field="f")


def whole(value):
    return int_value(value, obj="o", field="f")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1n", Fraction(1, 10**9)),
        ("1u", Fraction(1, 10**6)),
        ("1m", Fraction(1, 1000)),
        ("1", Fraction(1)),
        ("1k", Fraction(10**3)),
        ("1M", Fraction(10**6)),
        ("1G", Fraction(10**9)),
        ("1T", Fraction(10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),
        ("1Ki", Fraction(2**10)),
        ("1Mi", Fraction(2**20)),
        ("1Gi", Fraction(2**30)),
        ("1Ti", Fraction(2**40)),
        ("1Pi", Fraction(2**50)),
        ("1Ei", Fraction(2**60)),
    ],
)
def test_every_suffix(text, expected):
    assert q(text) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("100m", Fraction(1, 10)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("1.", Fraction(1)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("1e+3", Fraction(1000)),
        ("1e-3", Fraction(1, 1000)),
        ("+1", Fraction(1)),
        ("-1", Fraction(-1)),
        ("-100m", Fraction(-1, 10)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("0.5Ki", Fraction(512)),
        ("007", Fraction(7)),
        ("0", Fraction(0)),
        (0, Fraction(0)),
        (3, Fraction(3)),
        (-2, Fraction(-2)),
        (0.5, Fraction(1, 2)),
        (0.1, Fraction(1, 10)),  # the JSON text, not the binary float
        (1e3, Fraction(1000)),
        (2.0, Fraction(2)),
    ],
)
def test_forms(value, expected):
    assert q(value) == expected


def test_sub_nano_rounds_up_to_one_nano_like_parse_quantity():
    assert q("1e-12") == Fraction(1, 10**9)
    assert q("0.0000000001") == Fraction(1, 10**9)
    assert q("-1e-12") == Fraction(-1, 10**9)
    assert q("1.0000000001") == Fraction(1) + Fraction(1, 10**9)


def test_huge_values_are_capped_at_int64():
    assert q("9e99") == MAX_QUANTITY
    assert q("1e1000000000") == MAX_QUANTITY  # no 10**10**9 computed
    assert q("-9e99") == -MAX_QUANTITY
    assert q("0e1000000000") == 0
    assert q(2**80) == MAX_QUANTITY


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("100m", 100),
        ("0.1m", 1),  # MilliValue rounds up
        ("1n", 1),
        ("1.5m", 2),
        ("1", 1000),
        ("2", 2000),
        ("0.25", 250),
        ("1500u", 2),
        ("0", 0),
        (1, 1000),
        (0.5, 500),
        ("-1.5m", -2),  # away from zero, as Go's RoundUp
    ],
)
def test_milli_value_rounds_up(value, expected):
    assert milli(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("100m", 1),  # memory "100m" is one byte
        ("1n", 1),
        ("1", 1),
        ("1.2", 2),
        ("1Gi", 2**30),
        ("1G", 10**9),
        ("128974848", 128974848),
        ("129e6", 129000000),
        ("123Mi", 123 * 2**20),
        ("0", 0),
        ("-0.5", -1),
    ],
)
def test_int_value_rounds_up(value, expected):
    assert whole(value) == expected


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("lots", '"lots"'),
        ("", '""'),
        (" ", '" "'),
        ("1.5.3", '"1.5.3"'),
        ("1KiB", '"1KiB"'),
        ("1 Ki", '"1 Ki"'),
        (" 1", '" 1"'),
        ("1 ", '"1 "'),
        ("1K", '"1K"'),
        ("1ki", '"1ki"'),
        ("1i", '"1i"'),
        ("1e", '"1e"'),
        ("1e3.5", '"1e3.5"'),
        ("1m3", '"1m3"'),
        ("1Gi1", '"1Gi1"'),
        ("1mm", '"1mm"'),
        ("e3", '"e3"'),
        (".", '"."'),
        ("+", '"+"'),
        ("-", '"-"'),
        ("--1", '"--1"'),
        ("0x10", '"0x10"'),
        ("1_000", '"1_000"'),
        ("NaN", '"NaN"'),
        ("Infinity", '"Infinity"'),
        ("١", '"١"'),  # a non-ASCII digit
        (True, "true"),
        (False, "false"),
        (None, "null"),
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
        (float("-inf"), "-Infinity"),
        ([1], "[1]"),
        ({"a": 1}, '{"a": 1}'),
    ],
)
def test_rejects_non_quantities(value, shown):
    with pytest.raises(ValidationError) as info:
        q(value)
    assert str(info.value) == f"pod default/p: spec.x: {shown} is not a quantity"
    assert info.value.obj == "pod default/p"
    assert info.value.field == "spec.x"


def test_error_names_the_object_and_field():
    with pytest.raises(ValidationError, match=r'^node n1: status.allocatable.cpu: "x" is not'):
        milli_value("x", obj="node n1", field="status.allocatable.cpu")


@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=0, max_value=9))
def test_decimal_text_matches_fraction(whole_part, frac_digit):
    text = f"{whole_part}.{frac_digit}"
    assert q(text) == Fraction(whole_part) + Fraction(frac_digit, 10)
    assert whole(text) == whole_part + (1 if frac_digit else 0)


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(["m", "", "k", "Ki", "Mi"]))
def test_integer_with_suffix_scales_exactly(n, suffix):
    scale = {"m": Fraction(1, 1000), "": 1, "k": 1000, "Ki": 1024, "Mi": 2**20}[suffix]
    assert q(f"{n}{suffix}") == n * scale
    assert q(f"-{n}{suffix}") == -n * scale
