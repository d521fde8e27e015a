import hashlib
import io
import json
import math
import pathlib
import random
import runpy
from decimal import Decimal

import pytest

import pg_idempotency as pi
from conftest import ROOT

VECTORS = [json.loads(line) for line in
           (ROOT / "test/vectors/fingerprint.jsonl").read_text(encoding="utf-8").splitlines()]


def test_vector_file_is_what_the_generator_writes():
    out = io.StringIO()
    runpy.run_path(str(ROOT / "test/vectors/make_vectors.py"))["main"](out)
    assert out.getvalue() == (ROOT / "test/vectors/fingerprint.jsonl").read_text(encoding="utf-8")
    assert len(VECTORS) >= 120


@pytest.mark.parametrize("v", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector_text(v):
    if "error" in v:
        with pytest.raises(pi.IdempotencyError) as e:
            pi.fingerprint(v["json"], v["exclude"])
        assert e.value.sqlstate == v["error"]
    else:
        assert pi.canonical_json(v["json"], v["exclude"]) == v["canonical"].encode("utf-8")
        assert pi.fingerprint(v["json"], v["exclude"]).hex() == v["sha256"]
        assert pi.fingerprint(v["json"].encode("utf-8"), tuple(v["exclude"])).hex() == v["sha256"]


# A str argument is always a JSON text, so vectors whose value is a string are left out.
@pytest.mark.parametrize("v", [v for v in VECTORS if "sha256" in v and "nesting" not in v["name"]
                               and not v["canonical"].startswith('"')], ids=lambda v: v["name"])
def test_vector_as_python_value(v):
    value = json.loads(v["json"], parse_float=Decimal, parse_int=int)
    assert pi.fingerprint(value, v["exclude"]).hex() == v["sha256"]


def test_sql_agrees_on_random_documents(conn):
    rnd = random.Random(15)
    alphabet = ["a", "b", "aa", "é", "\uffff", "\U0001F600", "\ue000", ".", "\\", '"', "\n",
                "\u001f", "/", "Z", "\u2028"]

    def number():
        sign = rnd.choice(["", "-"])
        intp = rnd.choice(["0", str(rnd.randint(1, 10**rnd.randint(1, 30)))])
        frac = rnd.choice(["", "." + str(rnd.randint(0, 10**rnd.randint(1, 25))).zfill(rnd.randint(1, 30))])
        exp = rnd.choice(["", f"e{rnd.randint(-300, 300)}", f"E+{rnd.randint(0, 40)}", "e-0"])
        return sign + intp + frac + exp

    def value(depth):
        k = rnd.randint(0, 6 if depth < 4 else 3)
        if k == 0:
            return number()
        if k == 1:
            return json.dumps("".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 5))),
                              ensure_ascii=rnd.random() < 0.5)
        if k == 2:
            return rnd.choice(["true", "false", "null"])
        if k in (3, 4):
            return "[" + ", ".join(value(depth + 1) for _ in range(rnd.randint(0, 4))) + "]"
        names = [json.dumps("".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 3))))
                 for _ in range(rnd.randint(0, 5))]
        return "{" + ",".join(f"{n}: {value(depth + 1)}" for n in names) + "}"

    docs = [value(0) for _ in range(400)]
    excludes = [rnd.sample(["a", "b", "aa", "a.b", "é", "a.aa.b"], rnd.randint(0, 3)) for _ in docs]
    rows = conn.execute(
        "SELECT idempotency.fingerprint((p ->> 0)::jsonb, "
        "ARRAY(SELECT jsonb_array_elements_text(p -> 1))) "
        "FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(p, n) ORDER BY n",
        (json.dumps(list(zip(docs, excludes))),)).fetchall()
    assert len(rows) == len(docs)
    for doc, exclude, (sql,) in zip(docs, excludes, rows):
        assert pi.fingerprint(doc, exclude) == bytes(sql), doc


def test_python_values():
    assert pi.fingerprint({"a": 1.0}) == pi.fingerprint('{"a": 1}')
    assert pi.fingerprint(0.1) == pi.fingerprint("0.1")      # repr, not the binary expansion
    assert pi.fingerprint(Decimal("1.10")) == pi.fingerprint("1.1")
    assert pi.fingerprint(Decimal("-0")) == pi.fingerprint("0")
    assert pi.fingerprint(Decimal("1E+2")) == pi.fingerprint("100")
    assert pi.fingerprint(10**50) == pi.fingerprint("1e50")
    assert pi.fingerprint(("x", None, True)) == pi.fingerprint('["x",null,true]')
    assert pi.fingerprint({"b": [1], "a": {"c": False}}) == pi.fingerprint('{"a":{"c":false},"b":[1]}')
    # a str is a JSON text: a string value is passed as its JSON text
    assert pi.fingerprint(json.dumps("a string value")) == hashlib.sha256(b'"a string value"').digest()
    assert len(pi.fingerprint({})) == 32


def test_huge_decimal_keeps_every_digit():
    a = "123456789012345678901234567890.12345678901234567891"
    assert pi.canonical_json(a) == a.encode()
    assert pi.canonical_json(Decimal(a)) == a.encode()
    assert pi.fingerprint("1.10") == pi.fingerprint("1.1") != pi.fingerprint("1.100000000000000000001")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -math.inf, Decimal("NaN"),
                                 Decimal("Infinity"), {"a": "\ud800"}, ["\udc00"], {"\ud800": 1}])
def test_bad_values_are_invalid_json(bad):
    with pytest.raises(pi.InvalidJson) as e:
        pi.fingerprint(bad)
    assert e.value.sqlstate == "22P02"
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "{", "not json", '"\\ud800"', b"\xff",
                                 b'"\xc3"', b'"\xed\xa0\x80"', "\ufeff{}", ""])
def test_bad_texts_are_invalid_json(bad):
    with pytest.raises(pi.InvalidJson) as e:
        pi.fingerprint(bad)
    assert e.value.sqlstate == "22P02"


def test_nul_is_22P05():
    for bad in ['"\\u0000"', {"a": "x\x00"}]:
        with pytest.raises(pi.InvalidJson) as e:
            pi.fingerprint(bad)
        assert e.value.sqlstate == "22P05"


@pytest.mark.parametrize("text", ['"\\ud800"', "NaN", "Infinity", "{", '{"a": 1,}'])
def test_sql_raises_the_same_class(conn, text):
    with pytest.raises(pi.InvalidJson):
        pi.execute(conn, "SELECT idempotency.fingerprint(%s::jsonb)", (text,))
    conn.rollback()
    with pytest.raises(pi.InvalidJson):
        pi.fingerprint(text)


def test_limits_are_54000_like_sql(conn):
    for text in ["1e1000", "[" * 1001 + "]" * 1001]:
        with pytest.raises(pi.ProgramLimitExceeded):
            pi.fingerprint(text)
        with pytest.raises(pi.ProgramLimitExceeded):
            pi.execute(conn, "SELECT idempotency.fingerprint(%s::jsonb)", (text,))
        conn.rollback()
    deep = [[]]
    for _ in range(1100):
        deep = [deep]
    with pytest.raises(pi.ProgramLimitExceeded):
        pi.fingerprint(deep)
    with pytest.raises(pi.ProgramLimitExceeded):
        pi.fingerprint("[" * 100000 + "]" * 100000)
    # a syntax error wins over a limit, as in SQL, where the cast fails first
    bad = "[" * 1500 + "1,}" + "]" * 1500
    with pytest.raises(pi.InvalidJson):
        pi.fingerprint(bad)
    with pytest.raises(pi.InvalidJson):
        pi.execute(conn, "SELECT idempotency.fingerprint(%s::jsonb)", (bad,))
    conn.rollback()


@pytest.mark.parametrize("bad", ["sent_at", b"x", None, 5, [1], ["a", None], [""], ["a..b"], {"a": 1}])
def test_exclude_must_be_a_list_of_strings(bad):
    with pytest.raises(pi.InvalidParameterValue) as e:
        pi.fingerprint('{"a": 1}', bad)
    assert e.value.sqlstate == "22023"


def test_unsupported_python_types():
    for bad in [{1: "a"}, {"a": {1, 2}}, object()]:
        with pytest.raises(TypeError):
            pi.fingerprint(bad)
