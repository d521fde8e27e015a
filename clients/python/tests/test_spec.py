"""What test/vectors/client.json says every client does the same way: durations sent as whole
microseconds (nothing rounded), a server error of each listed SQLSTATE raised as its class."""
import datetime as dt
import json

import pytest

import pg_idempotency as pi
from conftest import ROOT
from pg_idempotency import errors
from pg_idempotency.keys import interval

SPEC = json.loads((ROOT / "test" / "vectors" / "client.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("vector", SPEC["duration"]["vectors"], ids=lambda v: v["text"])
def test_duration_as_the_spec_encodes_it(vector):
    micros = vector["microseconds"]
    assert interval(dt.timedelta(microseconds=micros)) == vector["text"]
    if micros % 1_000_000 == 0:
        assert interval(micros // 1_000_000) == vector["text"]     # an int: seconds


def test_sub_millisecond_durations_round_trip(conn):
    """A lease of 1.5 ms (a timedelta, a float of seconds) reaches the server as 1500 µs."""
    for value in (dt.timedelta(microseconds=1500), 0.0015):
        got = conn.execute("SELECT %s::interval", (interval(value),)).fetchone()[0]
        assert got == dt.timedelta(microseconds=1500), value


@pytest.mark.parametrize("entry", [e for e in SPEC["sqlstates"] if e.get("translated")],
                         ids=lambda e: e["sqlstate"])
def test_server_sqlstate_raised_as_its_class(conn, entry):
    code = entry["sqlstate"]
    conn.execute("CREATE FUNCTION pg_temp.raise_sqlstate(code text) RETURNS void LANGUAGE plpgsql"
                 " AS $$ BEGIN RAISE EXCEPTION 'listed' USING ERRCODE = code; END $$")
    with pytest.raises(errors.IdempotencyError) as raised:
        pi.execute(conn, "SELECT pg_temp.raise_sqlstate(%s)", (code,))
    err = raised.value
    assert err.sqlstate == code
    expected = {"in_progress": "KeyInProgress", "too_old": "KeyTooOld"}.get(
        entry.get("outcome"), entry["name"])
    assert type(err).__name__ == expected
    assert getattr(pi, expected) is type(err)
    conn.rollback()


@pytest.mark.parametrize("alias", sorted(SPEC["aliases"]))
def test_server_alias_raised_as_the_class_of_its_sqlstate(conn, alias):
    conn.execute("CREATE FUNCTION pg_temp.raise_sqlstate(code text) RETURNS void LANGUAGE plpgsql"
                 " AS $$ BEGIN RAISE EXCEPTION 'listed' USING ERRCODE = code; END $$")
    with pytest.raises(errors.BY_SQLSTATE[SPEC["aliases"][alias]]) as raised:
        pi.execute(conn, "SELECT pg_temp.raise_sqlstate(%s)", (alias,))
    assert raised.value.sqlstate == alias
    conn.rollback()
