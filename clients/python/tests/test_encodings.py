"""Values never become SQL, whatever the session's encoding and settings. Databases created in
UTF8, EUC_JP and LATIN1 (psycopg then talks the database's encoding), and sessions in the
client-only encodings SJIS, BIG5, GBK and GB18030 over a server encoding that holds their
characters, each with backslash_quote and standard_conforming_strings on and off. Every call
that builds a statement takes keys, scopes, names and bodies made to hurt: every character
whose bytes in the session's encoding hold 0x5C (a backslash) or 0x27 (a quote), quotes,
backslashes, $1, %s, NUL, very long and invalid text, and a seeded random run. Each value ends
stored exactly as given (read back through the session) or refused with a clear error, and
never runs a second statement: each hostile value carries an INSERT into a canary table,
which must stay empty. IDEM_TEST_SEED picks the random run's seed (printed on a failure)."""
import asyncio
import contextlib
import functools
import json
import os
import random

import psycopg
import pytest

from pg_idempotency import (IdempotencyError, KeyMalformed, UntranslatableCharacter, accept,
                            apply_once, claim_once, consume_once, lookup, run_once, watermark)

# (database encoding, client_encoding of the session: None for the database's own)
SESSIONS = [("UTF8", None), ("EUC_JP", None), ("LATIN1", None), ("EUC_JP", "SJIS"),
            ("UTF8", "BIG5"), ("UTF8", "GBK"), ("UTF8", "GB18030")]
SETTINGS = [(bq, scs) for bq in ("on", "off") for scs in ("on", "off")]
DATABASES = {enc: f"pyenc_{enc.lower()}" for enc in ("UTF8", "EUC_JP", "LATIN1")}
SEED = int(os.environ.get("IDEM_TEST_SEED", "38"))
CANARY = "; INSERT INTO canary VALUES (1); --"
# the server's own refusals a value may meet (untranslatable, invalid bytes, over a limit,
# empty or malformed), besides the client's KeyMalformed / UntranslatableCharacter
REFUSALS = {"22P05", "22021", "54000", "22023", "22P02"}


@functools.lru_cache(maxsize=None)
def hurting_chars(codec):
    """Every character (below U+30000) whose bytes in codec hold 0x5C or 0x27, and which is
    not those bytes itself."""
    out = []
    for cp in range(0x80, 0x30000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        try:
            b = chr(cp).encode(codec)
        except UnicodeError:
            continue
        if b"\\" in b or b"'" in b:
            out.append(chr(cp))
    return out


def hostile_values(codec):
    """The fixed hostile values of a session in codec: each hurting character alone before a
    quote and the canary (those that round-trip grouped into keys of under 255 bytes; the
    others, which must be refused, one by one), then the classic ones."""
    values, group = [], ""
    for ch in hurting_chars(codec):
        try:
            faithful = ch.encode(codec).decode(codec) == ch
        except UnicodeError:
            faithful = False
        if not faithful:
            values.append(ch + "'" + CANARY)
            continue
        if len((group + ch + "'" + CANARY).encode()) > 250:
            values.append(group + CANARY)
            group = ""
        group += ch + "'"
    if group:
        values.append(group + CANARY)
    values += [
        "'", "\\", "\\'", "''", "'" + CANARY, "\\'" + CANARY, "\\\\'" + CANARY,
        "E'\\'" + CANARY, "$1", "$1$2", "%s", "%(x)s", "%", "{0}", "$$'" + CANARY + "$$",
        "¥'" + CANARY, "₩'" + CANARY, "‾'", "a\0b", "\0", "\ud800", "x" * 255, "x" * 256,
        "é" * 128, "", " ", "\n'" + CANARY, "表'" + CANARY, "ソ'" + CANARY, "許'" + CANARY,
        "\U0001F600'" + CANARY,
    ]
    return values


def random_values(codec, seed, n=15):
    rng = random.Random(seed)
    pieces = ["'", "\\", "$1", "%s", ";", "--", "E'", '"', " ", "\n", CANARY, "¥", "\0"]
    hurting = hurting_chars(codec)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            pick = rng.random()
            if pick < 0.35:
                parts.append(rng.choice(pieces))
            elif pick < 0.6 and hurting:
                parts.append(rng.choice(hurting))
            elif pick < 0.9:
                cp = rng.randint(0x20, 0xFFFF)
                parts.append(chr(cp) if not 0xD800 <= cp <= 0xDFFF else "?")
            else:
                parts.append(chr(rng.randint(0x10000, 0x2FFFF)))
        out.append("".join(parts))
    return out


@pytest.fixture(scope="session")
def encoding_databases():
    admin_db = os.environ.get("PGDATABASE", "postgres")
    with psycopg.connect(psycopg.conninfo.make_conninfo(dbname=admin_db),
                         autocommit=True) as admin:
        for enc, db in DATABASES.items():
            admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {db} TEMPLATE template0 ENCODING '{enc}' "
                          "LC_COLLATE 'C' LC_CTYPE 'C'")
    for db in DATABASES.values():
        with psycopg.connect(psycopg.conninfo.make_conninfo(dbname=db), autocommit=True) as c:
            c.execute("CREATE EXTENSION idempotency")
            c.execute("CREATE TABLE canary (x int)")
    return DATABASES


def connect(db, client_encoding, bq, scs, **kw):
    args = dict(dbname=db, options=f"-c backslash_quote={bq} -c standard_conforming_strings={scs}")
    if client_encoding:
        args["client_encoding"] = client_encoding
    return psycopg.connect(psycopg.conninfo.make_conninfo(**args), **kw)


def refused(err):
    """A clean refusal: the client's own (before anything is sent) or the server's, typed,
    with a message."""
    if isinstance(err, (KeyMalformed, UntranslatableCharacter)):
        return bool(str(err))
    return isinstance(err, IdempotencyError) and err.sqlstate in REFUSALS and bool(str(err))


def plain(v):
    """A value no session may refuse: printable ASCII, 1 to 255 bytes."""
    return 0 < len(v) <= 255 and all(0x20 <= ord(c) < 0x7F for c in v)


class Session:
    """One session of the matrix: runs every call with a value, checks what it stored."""

    def __init__(self, db, client_encoding, bq, scs, tag):
        self.conn = connect(db, client_encoding, bq, scs)  # a transaction per call
        self.auto = connect(db, client_encoding, bq, scs, autocommit=True)
        self.tag = tag
        self.codec = self.auto.info.encoding
        self.stored = self.refusals = 0

    def close(self):
        self.conn.close()
        self.auto.close()

    def clean(self):
        for c in (self.conn, self.auto):
            if c.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                c.rollback()

    def attempt(self, what, v, call):
        try:
            call()
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001: a refusal must be clean, checked below
            self.clean()
            assert refused(e), f"{what}({v!r}): not a clean refusal: {type(e).__name__}: {e}"
            assert not plain(v), f"{what}({v!r}) refused: {e}"
            self.refusals += 1
            return
        self.stored += 1

    def read_back(self, sql, params):
        row = self.auto.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def run_all(self, v):
        t = self.tag
        key_of = "SELECT key FROM idempotency.keys WHERE scope = %s AND key = %s"

        def as_key():
            r = run_once(self.conn, t, v, lambda: (201, {"v": v}), request={"v": v})
            assert not r.replayed and r.response == {"v": v}
            again = run_once(self.conn, t, v, lambda: pytest.fail("ran twice"), request={"v": v})
            assert again.replayed and again.response == {"v": v}
            assert self.read_back(key_of, (t, v)) == v

        def as_scope():
            run_once(self.conn, v, t, lambda: (200, None))
            assert self.read_back("SELECT scope FROM idempotency.keys WHERE scope = %s AND "
                                  "key = %s", (v, t)) == v

        def claim():
            with self.conn.transaction():
                assert claim_once(self.conn, "claim-" + t, v) is True
            assert self.read_back(key_of, ("claim-" + t, v)) == v

        def consume():
            assert consume_once(self.auto, "consume-" + t, v, lambda c: None) is True
            assert consume_once(self.auto, "consume-" + t, v, lambda c: None) is False

        def apply():
            assert apply_once(self.auto, v, "p-" + t, 7, lambda c: None) is True
            assert apply_once(self.auto, "c-" + t, v, 3, lambda c: None) is True
            assert apply_once(self.auto, v, "p-" + t, 7, lambda c: None) is False

        def accepted():
            with self.conn.transaction():
                assert accept(self.conn, "acc-" + t, v, 5) is True
            assert watermark(self.auto, "acc-" + t, v) == 5

        for what, call in (("run_once key", as_key), ("run_once scope", as_scope),
                           ("claim_once", claim), ("consume_once", consume),
                           ("apply_once", apply), ("accept", accepted)):
            self.attempt(what, v, call)

    def canary_empty(self):
        assert self.read_back("SELECT count(*) FROM canary", ()) == 0, "a value ran as SQL"


def tag_of(server, client, bq, scs):
    return f"{server}-{client or 'db'}-bq{bq}-scs{scs}"


@pytest.mark.parametrize("bq,scs", SETTINGS)
@pytest.mark.parametrize("server,client", SESSIONS)
def test_calls_store_hostile_values_exactly_or_refuse(encoding_databases, server, client, bq,
                                                      scs):
    tag = tag_of(server, client, bq, scs)
    s = Session(encoding_databases[server], client, bq, scs, tag)
    try:
        assert s.auto.execute("SHOW backslash_quote").fetchone()[0] == bq
        assert s.auto.execute("SHOW client_encoding").fetchone()[0] == (client or server)
        seed = SEED + SESSIONS.index((server, client))
        values = hostile_values(s.codec)
        # the random run once a session, under the settings that let a backslash end a literal
        randoms = [v for v in dict.fromkeys(random_values(s.codec, seed)) if v not in values] \
            if (bq, scs) == ("on", "off") else []
        for v in values:
            s.run_all(v)
        for v in randoms:
            try:
                s.run_all(v)
            except AssertionError as e:
                raise AssertionError(f"random run (IDEM_TEST_SEED={seed}): {e}") from e
        s.canary_empty()
        assert s.stored > len(values), f"too few values stored: {s.stored}"
    finally:
        s.close()


def test_a_codec_that_turns_a_character_into_a_backslash_is_refused(encoding_databases):
    """Python's EUC_JP codec sends U+00A5 as 0x5C: the key is refused before anything is sent
    (it would otherwise be stored as a backslash, another key)."""
    with connect(encoding_databases["EUC_JP"], None, "on", "off", autocommit=True) as c:
        assert "¥".encode(c.info.encoding) == b"\\"
        with pytest.raises(KeyMalformed) as e:
            consume_once(c, "s", "¥'" + CANARY, lambda c: None)
        assert e.value.sqlstate == "22P05" and "client_encoding (EUC_JP)" in str(e.value)
        with pytest.raises(UntranslatableCharacter):
            apply_once(c, "¥'" + CANARY, "p", 1, lambda c: None)
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert c.execute("SELECT count(*) FROM canary").fetchone()[0] == 0


def test_set_client_encoding_is_followed(encoding_databases):
    """A session that changes its client_encoding after connecting has its values encoded
    for the new one: libpq follows the server's ParameterStatus."""
    with connect(encoding_databases["UTF8"], None, "on", "off", autocommit=True) as c:
        c.execute("SET client_encoding TO SJIS")
        assert c.info.encoding == "shift_jis"
        for ch in [c for c in hurting_chars("shift_jis") if c != "¥"][:40]:
            k = ch + "'" + CANARY
            assert consume_once(c, "set-enc", k, lambda c: None) is True
            assert lookup(c, "set-enc", k)["state"] == "completed"
        assert c.execute("SELECT count(*) FROM canary").fetchone()[0] == 0


# ---- the middlewares: the key and scope come from the request ----

def wsgi_call(mw, body=b'{"a": 1}'):
    import io
    out = {}

    def start_response(status, headers, exc_info=None):
        out["status"], out["headers"] = int(status.split()[0]), dict(headers)

    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/orders", "CONTENT_TYPE":
               "application/json", "CONTENT_LENGTH": str(len(body)),
               "wsgi.input": io.BytesIO(body)}
    data = b"".join(mw(environ, start_response))
    return out["status"], out["headers"], json.loads(data) if data else None


async def asgi_call(mw, body=b'{"a": 1}'):
    out = {"body": b""}
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            await asyncio.Event().wait()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = {k.decode("latin-1").lower(): v.decode("latin-1")
                              for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    scope = {"type": "http", "method": "POST", "path": "/orders", "headers":
             [(b"content-type", b"application/json")]}
    await mw(scope, receive, send)
    return out["status"], out["headers"], json.loads(out["body"]) if out["body"] else None


def check_answers(first, again, v):
    if first[0] == 400:  # the client's refusal of the key or scope
        assert first[2]["error"] in ("idempotency_key_malformed", "idempotency_scope_malformed")
        assert not plain(v), f"{v!r} refused: {first}"
        return False
    assert first[0] == 201 and first[2] == {"v": v}, (v, first)
    assert again[0] == 201 and again[2] == {"v": v}, (v, again)
    assert again[1].get("Idempotent-Replayed", again[1].get("idempotent-replayed")) == "true"
    return True


@pytest.mark.parametrize("server,client", SESSIONS)
def test_middlewares_store_hostile_keys_exactly_or_answer_400(encoding_databases, server, client):
    """The WSGI middleware under every setting with the value as the key, and as the scope
    too under the settings that let a backslash end a literal, where the ASGI one runs as
    well. A key or scope stored reads back as given; one refused is a 400."""
    from pg_idempotency import asgi, wsgi
    db, current, stored = encoding_databases[server], {}, []
    options = dict(scope=lambda req: current["scope"], key=lambda req: current["key"])

    def roles(tag, v, both):
        return ((tag, v), (v, tag)) if both else ((tag, v),)

    def app(environ, start_response):
        start_response("201 Created", [("Content-Type", "application/json")])
        return [json.dumps({"v": current["v"]}).encode()]

    for bq, scs in SETTINGS:
        tag, both = tag_of(server, client, bq, scs), (bq, scs) == ("on", "off")
        conn = connect(db, client, bq, scs)
        # an empty scope or key is KeyEmpty, a 400 before any connection (tested elsewhere)
        values = [v for v in hostile_values(conn.info.encoding) if v.strip()]

        @contextlib.contextmanager
        def sync_connect():
            yield conn

        try:
            mw = wsgi.IdempotencyMiddleware(app, connect=sync_connect, **options)
            for v in values:
                for scope_, key_ in roles(f"wsgi-{tag}", v, both):
                    current.update(scope=scope_, key=key_, v=v)
                    if check_answers(wsgi_call(mw), wsgi_call(mw), v):
                        stored.append((scope_, key_))
        finally:
            conn.close()

    async def asgi_run():
        tag = tag_of(server, client, "on", "off")
        aconn = await psycopg.AsyncConnection.connect(psycopg.conninfo.make_conninfo(
            dbname=db, options="-c backslash_quote=on -c standard_conforming_strings=off",
            **({"client_encoding": client} if client else {})))

        @contextlib.asynccontextmanager
        async def async_connect():
            yield aconn

        async def aapp(scope, receive, send):
            await send({"type": "http.response.start", "status": 201,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body",
                        "body": json.dumps({"v": current["v"]}).encode()})
        try:
            mw = asgi.IdempotencyMiddleware(aapp, connect=async_connect, **options)
            for v in values:
                for scope_, key_ in roles(f"asgi-{tag}", v, True):
                    current.update(scope=scope_, key=key_, v=v)
                    if check_answers(await asgi_call(mw), await asgi_call(mw), v):
                        stored.append((scope_, key_))
        finally:
            await aconn.close()

    asyncio.run(asgi_run())
    assert len(stored) > len(values)
    with connect(db, client, "on", "off", autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM canary").fetchone()[0] == 0, "a value ran as SQL"
        for scope_, key_ in stored:
            assert c.execute("SELECT scope, key FROM idempotency.keys WHERE scope = %s AND "
                             "key = %s", (scope_, key_)).fetchone() == (scope_, key_)
