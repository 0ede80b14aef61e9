"""campaign.toml writing: round trips over unicode keys and every value type, refusal of what TOML
cannot hold, and `sweep init` with a non-ASCII runtime option producing a campaign every verb reads."""
from __future__ import annotations

import math
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sweep.tomlw import TomlValueError, dumps, dumps_checked, without_nulls
from tests.campaigns import payload_plan, status_json, sweep, tick_until_done, write_plan

keys = st.text(min_size=0, max_size=8)          # any unicode, empty, quotes, dots, control chars
scalars = (st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.lists(inner.filter(lambda v: v is not None), max_size=4)
                      | st.dictionaries(keys, inner, max_size=4), max_leaves=20)
documents = st.dictionaries(keys, values, max_size=6)


@settings(max_examples=300, deadline=None)
@given(documents)
def test_round_trip_every_value_type(doc):
    text = dumps(doc)
    assert tomllib.loads(text) == without_nulls(doc)
    assert dumps_checked(doc) == text


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(keys, st.lists(st.dictionaries(keys, scalars, min_size=1, max_size=3), min_size=1,
                                      max_size=3), min_size=1, max_size=3))
def test_round_trip_lists_of_tables(doc):
    assert tomllib.loads(dumps(doc)) == without_nulls(doc)


def test_non_ascii_keys_are_quoted():
    text = dumps({"runtime_options": {"author": {"modèle": "x", "a.b": 1, "": 2}}})
    assert tomllib.loads(text) == {"runtime_options": {"author": {"modèle": "x", "a.b": 1, "": 2}}}
    assert '"modèle"' in text


def test_null_inside_a_list_is_refused_with_its_path():
    with pytest.raises(TomlValueError) as info:
        dumps({"a": {"b": [1, None, 3]}})
    assert info.value.field == "a.b.1"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused(bad):
    with pytest.raises(TomlValueError) as info:
        dumps({"x": [{"y": bad}]})
    assert info.value.field == "x.0.y"


def test_init_with_a_non_ascii_runtime_option_gives_a_working_campaign(tmp_path):
    plan = payload_plan(2, extra={"defaults": {"runtime_options": {"author": {"modèle": "x", "é": [1, "ü"]}}}})
    cdir = tmp_path / "c"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(cdir))
    data = tomllib.loads((cdir / "campaign.toml").read_text())
    assert data["settings"]["defaults"]["runtime_options"]["author"] == {"modèle": "x", "é": [1, "ü"]}
    assert status_json(cdir)["runs"] == 2
    st = tick_until_done(cdir, timeout=90)
    assert st["outcomes"] == {"verified": 2}, st
    again = sweep("init", str(tmp_path / "plan.json"), "--campaign", str(cdir))   # idempotent re-init reads it
    assert again.returncode == 0


def test_init_refuses_a_null_in_a_list_and_writes_nothing(tmp_path):
    plan = payload_plan(1, extra={"defaults": {"runtime_options": {"author": {"argv": ["a", None]}}}})
    cdir = tmp_path / "c"
    r = sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(cdir), check=False)
    assert r.returncode == 2, r.stderr
    assert "defaults.runtime_options.author.argv.1" in r.stderr and "null" in r.stderr
    assert not cdir.exists()


def test_init_refuses_a_null_table_value_rather_than_dropping_it(tmp_path):
    plan = payload_plan(1, extra={"defaults": {"runtime_options": {"author": {"opt": None}}}})
    cdir = tmp_path / "c"
    r = sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(cdir), check=False)
    assert r.returncode == 2, r.stderr
    assert "round trip" in r.stderr
    assert not cdir.exists()
