"""kubectl label selectors (pure, no Redis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedcache.errors import ValidationError
from schedcache.model.selectors import (
    Requirement,
    Selector,
    label_key_error,
    label_value_error,
    parse_selector,
)

WEB = {"app": "web", "tier": "frontend", "env": "prod"}
DB = {"app": "db", "tier": "backend"}
NONE: dict[str, str] = {}


@pytest.mark.parametrize("text", [None, "", "   ", {}])
def test_empty_selects_everything(text):
    sel = parse_selector(text)
    assert sel.empty
    assert str(sel) == ""
    assert all(sel.matches(labels) for labels in (WEB, DB, NONE))


@pytest.mark.parametrize(
    ("text", "web", "db", "none"),
    [
        ("app=web", True, False, False),
        ("app==web", True, False, False),
        ("app!=web", False, True, True),  # absent key matches !=
        ("app in (web,db)", True, True, False),
        ("app in (web)", True, False, False),
        ("app notin (web)", False, True, True),  # absent key matches notin
        ("env", True, False, False),
        ("!env", False, True, True),
        ("app=web,env=prod", True, False, False),
        ("app=web,env=staging", False, False, False),
        ("tier,!env", False, True, False),
        ("app=", False, False, False),
        ("app!=", True, True, True),
    ],
)
def test_matching(text, web, db, none):
    sel = parse_selector(text)
    assert (sel.matches(WEB), sel.matches(DB), sel.matches(NONE)) == (web, db, none)


def test_empty_value_matches_empty_label():
    assert parse_selector("app=").matches({"app": ""})
    assert parse_selector("app in (,x)").matches({"app": ""})


def test_whitespace_tolerant():
    a = parse_selector("  app = web ,  env in ( prod , staging ) ,! canary, tier  ")
    b = parse_selector("app=web,env in (prod,staging),!canary,tier")
    assert a == b
    assert a.matches(WEB)
    assert not a.matches({**WEB, "canary": "1"})


def test_notin_without_space_before_paren():
    assert parse_selector("app notin(db)").matches(WEB)
    assert parse_selector("app in(db)").matches(DB)


def test_str_is_canonical_and_reparses():
    sel = parse_selector("tier notin (b, a), app==web, !x, env, k!=v, z in (q)")
    assert str(sel) == "app==web,env,k!=v,tier notin (a,b),!x,z in (q)"
    assert parse_selector(str(sel)) == sel


def test_requirement_structure():
    sel = parse_selector("env in (prod,dev,prod)")
    assert sel.requirements == (Requirement("env", "in", ("dev", "prod")),)
    assert isinstance(sel, Selector)


def test_prefixed_keys():
    sel = parse_selector("app.kubernetes.io/name=web,!node-role.kubernetes.io/control-plane")
    assert sel.matches({"app.kubernetes.io/name": "web"})
    assert not sel.matches(
        {"app.kubernetes.io/name": "web", "node-role.kubernetes.io/control-plane": ""}
    )


def test_mapping_means_equality_on_every_key():
    sel = parse_selector({"tier": "frontend", "app": "web"})
    assert str(sel) == "app=web,tier=frontend"
    assert sel.matches(WEB)
    assert not sel.matches(DB)
    assert not sel.matches({"app": "web"})


@pytest.mark.parametrize(
    ("text", "field", "reason_part"),
    [
        ("a=b=c", "a=b=c", "expected"),
        ("a b", "a b", "expected"),
        ("k in ()", "k in ()", "must not be empty"),
        ("k notin (  )", "k notin (  )", "must not be empty"),
        ("k in (a", "k in (a", "expected"),
        ("k in a,b", "k in a", "expected"),
        ("a,,b", "a,,b", "empty requirement"),
        ("a,", "a,", "empty requirement"),
        (",a", ",a", "empty requirement"),
        ("-a=b", "-a=b", "invalid label key"),
        ("a-=b", "a-=b", "invalid label key"),
        ("/a=b", "/a=b", "prefix part must be non-empty"),
        ("Example.com/a=b", "Example.com/a=b", "prefix"),
        ("a/=b", "a/=b", "name part must be non-empty"),
        ("a/b/c=d", "a/b/c=d", "prefix"),
        (f"{'k' * 64}=v", f"{'k' * 64}=v", "63"),
        (f"k={'v' * 64}", f"k={'v' * 64}", "63"),
        ("k=-v", "k=-v", "invalid label value"),
        ("k in (a,-b)", "k in (a,-b)", "invalid label value"),
        ("k=v w", "k=v w", "expected"),
        ("!", "!", "expected"),
        ("k>1", "k>1", "invalid label key"),
    ],
)
def test_errors(text, field, reason_part):
    with pytest.raises(ValidationError) as info:
        parse_selector(text)
    err = info.value
    assert err.obj == "selector"
    assert err.field == field
    assert reason_part in err.reason
    assert str(err) == f"selector: {field}: {err.reason}"


def test_mapping_errors():
    with pytest.raises(ValidationError, match=r"^selector: k=-v: invalid label value"):
        parse_selector({"k": "-v"})
    with pytest.raises(ValidationError, match="must be strings"):
        parse_selector({"k": 1})  # type: ignore[dict-item]


def test_non_string_selector_rejected():
    with pytest.raises(ValidationError, match="must be a string or a mapping"):
        parse_selector(42)  # type: ignore[arg-type]


def test_key_and_value_validation_helpers():
    assert label_key_error("app") is None
    assert label_key_error("a.b-c_d") is None
    assert label_key_error("example.com/foo") is None
    assert label_key_error(f"{'a' * 63}") is None
    assert label_key_error(f"{'a' * 64}") is not None
    assert label_key_error(f"{'a' * 254}/x") is not None
    assert label_key_error("_a") is not None
    assert label_value_error("") is None
    assert label_value_error("v1.2_3-x") is None
    assert label_value_error("a" * 64) is not None
    assert label_value_error("a b") is not None


label_text = st.from_regex(r"[a-z0-9]([a-z0-9._-]{0,10}[a-z0-9])?", fullmatch=True)


@given(st.dictionaries(label_text, label_text, max_size=5))
def test_mapping_selector_matches_its_own_labels(labels):
    assert parse_selector(labels).matches(labels)
    assert parse_selector(",".join(f"{k}={v}" for k, v in labels.items())).matches(labels)


@given(label_text, label_text, st.dictionaries(label_text, label_text, max_size=4))
def test_negations_are_complements(key, value, labels):
    assert parse_selector(f"{key}!={value}").matches(labels) != parse_selector(
        f"{key}={value}"
    ).matches(labels)
    assert parse_selector(f"!{key}").matches(labels) != parse_selector(key).matches(labels)
    assert parse_selector(f"{key} notin ({value})").matches(labels) != parse_selector(
        f"{key} in ({value})"
    ).matches(labels)
