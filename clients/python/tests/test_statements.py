"""The statements the client sends are those of test/vectors/statements.json, the one list every
client sends, word for word; every text of the list runs on the server (PREPARE, with the
parameter types it lists); and the results of the listed texts, which read jsonb columns as
text, load as psycopg's jsonb loader loaded them."""
import ast
import decimal
import functools
import json
import pathlib
import re
import uuid

import psycopg
import psycopg.types.json
import pytest

import pg_idempotency as pi
from conftest import REASON_OUTBOX, REASON_RESERVE_BEGIN, ROOT
from pg_idempotency import statements

LIST = json.loads((ROOT / "test" / "vectors" / "statements.json").read_text(encoding="utf-8"))
LISTED = LIST["statements"]
PACKAGE = pathlib.Path(pi.__file__).parent


def folded(text):
    return re.sub(r"\s+", " ", text).strip()


def as_listed(text):
    """psycopg's %s placeholders written as $1, $2, ... in order, white space folded."""
    n = iter(range(1, 1000))
    return folded(re.sub(r"%s", lambda m: f"${next(n)}", text))


@pytest.mark.parametrize("name", sorted(statements.LISTED))
def test_client_text_is_the_listed_one(name):
    assert name in LISTED, f"statements.LISTED names {name!r}, which the list does not hold"
    assert as_listed(statements.LISTED[name]) == folded(LISTED[name]["sql"])
    assert statements.LISTED[name].count("%s") == len(LISTED[name]["params"])


# A string that starts like a statement (in statements.py, the texts not of the extension).
_STATEMENT = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|"
                        r"RELEASE|SET|SHOW)\b")


def _calls_of_the_extension(path):
    """The string constants of a module that call a function of the extension, or start like
    a statement."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef,
                                       ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings
            and (re.search(r"\bSELECT\b.*\bidempotency\.\w+\(", node.value, re.S)
                 or _STATEMENT.match(node.value))]


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_no_other_module_holds_a_statement_of_the_extension(path):
    found = _calls_of_the_extension(path)
    if path.name == "spec_statements.py":  # generated from the list
        calls = [t for t in found if re.search(r"\bidempotency\.\w+\(", t)]
        assert calls and set(calls) <= set(statements.LISTED.values()), \
            "spec_statements.py holds a call of the extension that LISTED does not name"
    elif path.name == "statements.py":  # the texts that are not the extension's
        assert not [t for t in found if re.search(r"\bidempotency\.\w+\(", t)], \
            "statements.py holds a call of the extension: it belongs in test/vectors/statements.json"
    else:
        assert found == [], f"{path.name} holds statement texts; they belong in statements.py"


# The listed statements of what only the extension has (docs/managed.md's feature table).
_EXTENSION_ONLY = {"emit": REASON_OUTBOX, "reserve_begin": REASON_RESERVE_BEGIN}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.extension_only(_EXTENSION_ONLY[n]))
    if n in _EXTENSION_ONLY else n for n in sorted(LISTED)])
def test_listed_statement_prepares(conn, name):
    """Against the installed extension: a text of the list that does not run, or whose
    parameters the server types otherwise than the list says, fails here."""
    conn.execute(f"PREPARE idem_listed_{name} AS {LISTED[name]['sql']}")
    types = conn.execute("SELECT parameter_types::text[] FROM pg_prepared_statements "
                         "WHERE name = %s", (f"idem_listed_{name}",)).fetchone()[0]
    assert types == [t for _, t in LISTED[name]["params"]]
    conn.rollback()
    conn.execute(f"DEALLOCATE idem_listed_{name}")


# ---- results of the listed texts: jsonb read as text ----

RESPONSE = {"big": 123456789012345678901234567890, "small": -7, "float": 0.1, "exp": 1e300,
            "text": "ä\u00a5\"\\'", "nested": [None, True, {"a": []}], "empty": {}}


def _jsonb_as_psycopg_loads(conn, value):
    """value through a jsonb column as psycopg's jsonb loader of conn reads it."""
    out = conn.execute("SELECT %s::jsonb", (psycopg.types.json.Jsonb(value),)).fetchone()[0]
    conn.rollback()
    return out


@pytest.mark.parametrize("response", [RESPONSE, None, "a string", 42, [1.5, "x"]])
def test_stored_response_reads_as_the_jsonb_loader_reads_it(conn, response):
    key = str(uuid.uuid4())
    assert pi.run_once(conn, "stmt", key, lambda: (201, response)).response == response
    replay = pi.run_once(conn, "stmt", key, lambda: pytest.fail("a replay runs no work"))
    expected = _jsonb_as_psycopg_loads(conn, response)
    assert replay.replayed and replay.response == expected
    assert type(replay.response) is type(expected)
    record = pi.lookup(conn, "stmt", key)
    conn.rollback()
    assert record["response"] == expected and record["state"] == "completed"
    assert record["last_error"] is None


def test_a_null_response_column_stays_none(conn):
    key = str(uuid.uuid4())
    r = pi.reserve(conn, "stmt", key)
    assert r.outcome == "new" and r.response is None
    conn.rollback()
    assert pi.lookup(conn, "stmt", key) is None


def test_json_loads_of_the_connection_is_kept(conn):
    """A connection whose jsonb loader keeps exact decimals (set_json_loads) reads stored
    responses and errors with it too."""
    psycopg.types.json.set_json_loads(
        functools.partial(json.loads, parse_float=decimal.Decimal), conn)
    key = str(uuid.uuid4())
    pi.run_once(conn, "stmt", key, lambda: (200, {"amount": 0.1}))
    replay = pi.run_once(conn, "stmt", key, lambda: pytest.fail("a replay runs no work"))
    assert replay.response == {"amount": decimal.Decimal("0.1")}
    assert replay.response == _jsonb_as_psycopg_loads(conn, {"amount": 0.1})

    failed = str(uuid.uuid4())
    r = pi.reserve(conn, "stmt", failed)
    pi.fail(conn, "stmt", failed, {"cost": 2.5}, r.attempt)
    conn.commit()
    assert pi.lookup(conn, "stmt", failed)["last_error"] == {"cost": decimal.Decimal("2.5")}
    conn.rollback()


def test_next_key_and_watermark_read_as_integers(conn):
    name = f"stmt_{uuid.uuid4().hex[:8]}"
    conn.execute("SELECT idempotency.create_stream(%s)", (name,))
    conn.commit()
    assert [pi.next_key(conn, name), pi.next_key(conn, name)] == [1, 2]
    big = 2**63 - 1
    assert pi.accept(conn, "stmt", name, big) is True
    mark = pi.watermark(conn, "stmt", name)
    assert mark == big and type(mark) is int
    conn.rollback()
