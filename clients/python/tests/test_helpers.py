import datetime as dt
import re
import threading
import time
import uuid

import psycopg
import pytest

import pg_idempotency as pi
from conftest import REASON_OUTBOX, ROOT


def new_key():
    return str(uuid.uuid4())


@pytest.fixture
def orders(conn):
    conn.execute("CREATE TABLE IF NOT EXISTS orders (id serial, key text, body jsonb)")
    conn.commit()


def count_orders(conn, key):
    n = conn.execute("SELECT count(*) FROM orders WHERE key = %s", (key,)).fetchone()[0]
    conn.rollback()
    return n


def test_run_once_new_then_replay(conn, orders):
    key, runs = new_key(), []

    def work():
        runs.append(1)
        conn.execute("INSERT INTO orders (key, body) VALUES (%s, '{}')", (key,))
        return 201, {"order_id": len(runs)}

    first = pi.run_once(conn, "acct", key, work, request={"item": "widget"})
    assert first == pi.Result(201, {"order_id": 1}, False, 1)
    second = pi.run_once(conn, "acct", key, work, request={"item": "widget"})
    assert second.replayed and second.status_code == 201 and second.response == {"order_id": 1}
    assert runs == [1] and count_orders(conn, key) == 1


def test_claim_context_manager_and_caller_transaction(conn, orders):
    key = new_key()
    with conn.transaction():                      # the caller's own transaction
        conn.execute("INSERT INTO orders (key, body) VALUES (%s, '{\"before\": 1}')", (key,))
        with pi.claim(conn, "acct", key, '{"a": 1}') as c:
            assert not c.replayed and c.attempt == 1
            c.complete(201, {"ok": True})
        assert c.result == pi.Result(201, {"ok": True}, False, 1)
    with pi.claim(conn, "acct", key, {"a": 1.0}) as c:
        assert c.replayed and c.response == {"ok": True}


def test_exception_in_work_rolls_the_claim_back(conn, orders):
    key = new_key()

    def work():
        conn.execute("INSERT INTO orders (key, body) VALUES (%s, '{}')", (key,))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        pi.run_once(conn, "acct", key, work)
    assert pi.lookup(conn, "acct", key) is None and count_orders(conn, key) == 0
    assert pi.run_once(conn, "acct", key, lambda: (201, {})).attempt == 1
    conn.rollback()


def test_block_without_complete_is_an_error(conn):
    key = new_key()
    with pytest.raises(RuntimeError, match="without complete"):
        with pi.claim(conn, "acct", key):
            pass
    assert pi.lookup(conn, "acct", key) is None
    conn.rollback()


def test_decorator(conn, orders):
    calls = []

    @pi.idempotent(scope=lambda acct, key, body: acct, key=lambda acct, key, body: key,
                   request=lambda acct, key, body: body, exclude=["sent_at"])
    def create_order(c, acct, key, body):
        calls.append(key)
        c.execute("INSERT INTO orders (key, body) VALUES (%s, %s)", (key, psycopg.types.json.Jsonb(body)))
        return 201, {"n": len(calls)}

    key = new_key()
    assert create_order(conn, "acct", key, {"item": 1, "sent_at": "a"}).replayed is False
    again = create_order(conn, "acct", key, {"item": 1, "sent_at": "b"})
    assert again.replayed and again.response == {"n": 1} and calls == [key]
    with pytest.raises(pi.KeyMismatch) as e:
        create_order(conn, "acct", key, {"item": 2})
    assert e.value.http_status == 422 and e.value.outcome == "mismatch"


def test_in_progress_carries_409_and_retry_after(conn, conn2):
    key = new_key()
    # a holder inside its open transaction: Retry-After 1
    with conn.transaction():
        pi.reserve(conn, "acct", key)
        with pytest.raises(pi.KeyInProgress) as e:
            pi.run_once(conn2, "acct", key, lambda: (201, {}))
        assert e.value.http_status == 409 and e.value.retry_after == 1
    conn.rollback()
    # a committed claim with a 30 s lease: Retry-After is the time left on it
    key = new_key()
    with conn.transaction():
        pi.reserve(conn, "acct", key, lock_ttl="30 seconds")
    with pytest.raises(pi.KeyInProgress) as e:
        pi.run_once(conn2, "acct", key, lambda: (201, {}))
    assert 20 <= e.value.retry_after <= 30


def test_too_old(conn):
    old = uuid.UUID("01800000-0000-7000-8000-000000000000")  # a UUIDv7 from 2022
    with pytest.raises(pi.KeyTooOld) as e:
        pi.run_once(conn, "acct", str(old), lambda: (201, {}))
    assert e.value.http_status == 422


def test_run_external_commits_the_claim_first(conn, conn2, orders):
    key = new_key()
    seen = {}

    def work(attempt):
        seen["status"] = conn.info.transaction_status
        seen["state"] = pi.lookup(conn2, "acct", key)["state"]   # committed: visible elsewhere
        conn2.rollback()
        seen["attempt"], seen["recovery_point"] = attempt.attempt, attempt.recovery_point
        return 201, {"charged": True}

    def finish(c, status, response):
        c.execute("INSERT INTO orders (key, body) VALUES (%s, '{}')", (key,))

    r = pi.run_external(conn, "acct", key, work, {"amount": 5}, finish=finish)
    assert r == pi.Result(201, {"charged": True}, False, 1)
    assert seen == {"status": psycopg.pq.TransactionStatus.IDLE, "state": "processing",
                    "attempt": 1, "recovery_point": None}
    assert pi.run_external(conn, "acct", key, work, {"amount": 5}).replayed
    assert count_orders(conn, key) == 1


def test_forget_deletes_the_record_and_the_key_is_new_again(conn):
    key = new_key()
    assert pi.reserve(conn, "acct", key).outcome == "new"
    pi.complete(conn, "acct", key, 201, {"id": 1})
    conn.commit()
    assert pi.forget(conn, "acct", key) is True
    conn.commit()
    assert pi.lookup(conn, "acct", key) is None
    assert pi.forget(conn, "acct", key) is False
    assert pi.reserve(conn, "acct", key).outcome == "new"
    conn.rollback()


def test_run_external_fail_and_recovery_point(conn):
    key = new_key()

    def failing(attempt):
        attempt.checkpoint("charged")
        raise ConnectionError("supplier down")

    with pytest.raises(ConnectionError):
        pi.run_external(conn, "acct", key, failing)
    rec = pi.lookup(conn, "acct", key)
    conn.rollback()
    assert rec["state"] == "failed" and rec["last_error"]["error"] == "ConnectionError"
    got = {}

    def second(attempt):
        got.update(attempt=attempt.attempt, rp=attempt.recovery_point)
        return 200, {}

    pi.run_external(conn, "acct", key, second)
    assert got["attempt"] == 2


def test_takeover_passes_recovery_point_and_fences_the_stale_holder(conn, conn2, orders):
    key = new_key()
    # holder 1 commits a claim with a 1 s lease, checkpoints, and "crashes"
    with conn2.transaction():
        r = pi.reserve(conn2, "acct", key, lock_ttl="1 second")
        pi.checkpoint(conn2, "acct", key, "step-2", r.attempt)
    time.sleep(1.3)
    got = {}

    def work(attempt):
        got.update(attempt=attempt.attempt, rp=attempt.recovery_point)
        # meanwhile the stale holder wakes up: fenced off
        with pytest.raises(pi.StaleAttempt) as e:
            with conn2.transaction():
                pi.complete(conn2, "acct", key, 201, {}, attempt=1)
        got["stale"] = e.value
        return 201, {"by": 2}

    assert pi.run_external(conn, "acct", key, work).response == {"by": 2}
    assert got["attempt"] == 2 and got["rp"] == "step-2"
    assert got["stale"].sqlstate == "IK001" and got["stale"].message


def test_run_external_refused_after_its_lease_was_taken_over(conn, conn2, orders):
    key = new_key()

    def slow(attempt):
        time.sleep(1.3)
        with conn2.transaction():   # a retry takes the lapsed claim over
            assert pi.reserve(conn2, "acct", key).outcome == "new"
        return 201, {}

    def finish(c, status, response):
        c.execute("INSERT INTO orders (key, body) VALUES (%s, '{}')", (key,))

    with pytest.raises(pi.StaleAttempt):
        pi.run_external(conn, "acct", key, slow, lock_ttl="1 second", finish=finish)
    assert count_orders(conn, key) == 0      # finish's writes rolled back with the refusal


def test_run_external_needs_no_open_transaction(conn):
    conn.execute("SELECT 1")
    with pytest.raises(pi.TransactionOpen):
        pi.run_external(conn, "acct", new_key(), lambda a: (200, {}))
    conn.rollback()


def test_failed_transaction_is_a_clear_error(conn):
    with pytest.raises(psycopg.errors.DivisionByZero):
        conn.execute("SELECT 1/0")
    for call in (lambda: pi.run_once(conn, "acct", new_key(), lambda: (200, {})),
                 lambda: pi.run_external(conn, "acct", new_key(), lambda a: (200, {})),
                 lambda: pi.apply_once(conn, "c", "p", 1, lambda c: None),
                 lambda: pi.reserve(conn, "acct", new_key())):
        with pytest.raises(pi.TransactionAborted, match="failed transaction"):
            call()
    conn.rollback()


def test_key_or_scope_over_255_bytes_is_a_400_before_any_query(conn):
    """The server's 54000 (and 22023 for an empty one), raised before the query as KeyTooLong
    / KeyEmpty, which answer_for turns into a 400, not a 500."""
    cases = [("acct", "k" * 256, pi.KeyTooLong, "54000", "idempotency_key_malformed"),
             ("acct", "\u00e9" * 128, pi.KeyTooLong, "54000", "idempotency_key_malformed"),
             ("s" * 256, "k", pi.KeyTooLong, "54000", "idempotency_scope_malformed"),
             ("acct", "", pi.KeyEmpty, "22023", "idempotency_key_malformed"),
             ("", "k", pi.KeyEmpty, "22023", "idempotency_scope_malformed")]
    for scope, key, cls, sqlstate, code in cases:
        for call in (lambda: pi.run_once(conn, scope, key, lambda: (200, {})),
                     lambda: pi.run_external(conn, scope, key, lambda a: (200, {})),
                     lambda: pi.reserve(conn, scope, key)):
            with pytest.raises(cls) as e:
                call()
            assert e.value.sqlstate == sqlstate and e.value.pgerror is None
            answer = pi.answer_for(e.value)
            assert (answer.status, answer.body["error"]) == (400, code)
        conn.rollback()
    assert isinstance(pi.KeyTooLong("c", "m"), pi.ProgramLimitExceeded)
    # A body the client-side fingerprint refuses is the client's 400; the server's own 54000
    # (a response over 10 MB) has no HTTP answer of the helpers.
    with pytest.raises(pi.InvalidJson) as bad_body:
        pi.run_once(conn, "acct", new_key(), lambda: (200, {}), request='{"n": NaN}')
    assert pi.answer_for(bad_body.value).status == 400
    with pytest.raises(pi.ProgramLimitExceeded) as too_big:
        pi.run_once(conn, "acct", new_key(), lambda: (200, "x" * (11 << 20)))
    assert too_big.value.pgerror is not None and pi.answer_for(too_big.value) is None
    conn.rollback()
    # 255 bytes exactly is a key the server takes
    assert pi.run_once(conn, "s" * 255, "\u00e9" * 127 + "k", lambda: (200, {})).status_code == 200


def readme_sqlstates():
    text = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    table = text.split("## Errors", 1)[1].split("\n## ", 1)[0]
    codes = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            codes.update(re.findall(r"`([0-9A-Z]{5})`", line.split("|")[1]))
    return codes


def test_every_readme_sqlstate_has_a_typed_exception():
    codes = readme_sqlstates()
    assert len(codes) >= 15
    for code in codes:
        assert code in pi.BY_SQLSTATE, code
        assert issubclass(pi.BY_SQLSTATE[code], pi.IdempotencyError)


@pytest.mark.parametrize("sql, params, cls", [
    ("SELECT idempotency.reserve(NULL, 'k')", (), pi.NullValueNotAllowed),
    ("SELECT idempotency.reserve('', 'k')", (), pi.InvalidParameterValue),
    ("SELECT idempotency.fingerprint('{}'::jsonb, '{{a}}'::text[])", (), pi.ArraySubscriptError),
    ("SELECT idempotency.complete('acct', 'never-reserved', 200, '{}')", (), pi.ObjectNotInPrerequisiteState),
    ("SELECT idempotency.next_key('no_such_stream')", (), pi.UndefinedObject),
    ("SET TRANSACTION READ ONLY; SELECT idempotency.reserve('acct', 'ro')", (), pi.ReadOnlySqlTransaction),
    ("SET LOCAL statement_timeout = '1ms'; SELECT pg_sleep(0.2)", (), pi.QueryCanceled),
    ("SELECT idempotency.execute_once('acct', 'k-syntax', NULL, 'INSRT')", (),
     pi.StatementSyntaxError),
    ("SELECT idempotency.execute_once('acct', 'k-commit', NULL, 'COMMIT')", (),
     pi.InvalidTransactionTermination),
    ("SELECT idempotency.execute_once('acct', 'k-rows', NULL, "
     "'SELECT generate_series(1, 2)')", (), pi.CardinalityViolation),
    ("SELECT idempotency.execute_once('acct', 'k-self', NULL, 'SELECT idempotency."
     "execute_once(''acct'', ''k-self'', NULL, ''SELECT 1'')')", (), pi.ObjectInUse),
])
def test_sqlstates_become_typed_exceptions(conn, sql, params, cls):
    with pytest.raises(cls) as e:
        pi.execute(conn, sql, params)
    assert e.value.sqlstate == cls.sqlstate and e.value.message
    conn.rollback()


def test_result_conflict_and_duplicate_stream_keep_detail_and_hint(conn):
    key = new_key()
    pi.run_once(conn, "acct", key, lambda: (201, {"a": 1}))
    with pytest.raises(pi.ResultConflict) as e:
        with conn.transaction():
            pi.complete(conn, "acct", key, 201, {"a": 2})
    assert e.value.sqlstate == "IK002" and e.value.message and (e.value.detail or e.value.hint)
    name = "s" + uuid.uuid4().hex[:8]
    pi.execute(conn, "SELECT idempotency.create_stream(%s)", (name,))
    conn.commit()
    with pytest.raises(pi.DuplicateObject):
        pi.execute(conn, "SELECT idempotency.create_stream(%s)", (name,))
    conn.rollback()
    assert pi.next_key(conn, name) == 1
    conn.commit()


def test_lock_timeout_is_typed(conn, conn2):
    key = new_key()
    with conn.transaction():
        pi.reserve(conn, "acct", key, lock_ttl="1 minute")
    with conn.transaction():
        pi.checkpoint(conn, "acct", key, "x")        # holds the key lock
        with pytest.raises(pi.LockNotAvailable):
            conn2.execute("SET lock_timeout = '50ms'")
            pi.execute(conn2, "SELECT idempotency.complete('acct', %s, 200, '{}')", (key,))
        conn2.rollback()


def test_register_types(conn):
    pi.register_types(conn)
    r = conn.execute("SELECT idempotency.reserve('acct', %s)", (new_key(),)).fetchone()[0]
    conn.rollback()
    assert isinstance(r, pi.Reservation) and r.outcome == "new" and r.attempt == 1
    assert isinstance(r.expires_at, dt.datetime)


def test_watermark_is_int_and_accept_takes_uuid(conn):
    part = new_key()
    assert pi.watermark(conn, "c", part) is None
    big = uuid.UUID("ffffffff-ffff-ffff-0000-000000000001")
    assert pi.accept(conn, "c", part, big) is True
    assert pi.accept(conn, "c", part, str(big)) is False
    assert pi.accept(conn, "c", part, 5) is False
    conn.commit()
    assert pi.watermark(conn, "c", part) == big.int and isinstance(pi.watermark(conn, "c", part), int)
    conn.rollback()


def test_apply_once(conn):
    part, seen = new_key(), []
    assert pi.apply_once(conn, "c", part, 7, lambda c: seen.append(7))
    assert not pi.apply_once(conn, "c", part, 7, lambda c: seen.append("again"))
    with pytest.raises(ZeroDivisionError):
        pi.apply_once(conn, "c", part, 8, lambda c: 1 / 0)
    assert pi.apply_once(conn, "c", part, 8, lambda c: seen.append(8))   # rolled back, so again
    assert seen == [7, 8] and pi.watermark(conn, "c", part) == 8
    conn.rollback()


def test_consume_once_applies_each_message_once(conn, orders):
    key, ran = new_key(), []

    def work(c):
        c.execute("INSERT INTO orders (key) VALUES (%s)", (key,))
        ran.append(key)

    assert pi.consume_once(conn, "queue", key, work) is True
    assert pi.consume_once(conn, "queue", key, work) is False   # a redelivery
    assert ran == [key] and count_orders(conn, key) == 1
    assert pi.lookup(conn, "queue", key)["state"] == "completed"
    conn.rollback()
    # an exception in the work rolls the claim back with it: the redelivery is applied
    key2 = new_key()
    with pytest.raises(ZeroDivisionError):
        pi.consume_once(conn, "queue", key2, lambda c: 1 / 0)
    assert pi.lookup(conn, "queue", key2) is None
    conn.rollback()
    assert pi.consume_once(conn, "queue", key2, work) is True
    # inside the caller's transaction: a savepoint, committed with it
    key3 = new_key()
    with conn.transaction():
        assert pi.consume_once(conn, "queue", key3, lambda c: None) is True
        assert pi.consume_once(conn, "queue", key3, lambda c: None) is False
    assert pi.claim_once(conn, "queue", key3) is False
    conn.rollback()
    with pytest.raises(pi.KeyMalformed):
        pi.consume_once(conn, "queue", "", work)


def test_consume_once_of_a_key_another_consumer_holds(conn, conn2):
    key = new_key()
    with conn.transaction():
        assert pi.claim_once(conn, "queue", key) is True
        with pytest.raises(pi.KeyInProgress) as e:
            pi.consume_once(conn2, "queue", key, lambda c: None)
        assert e.value.sqlstate == "IK003" and e.value.http_status == 409
        assert e.value.scope == "queue" and e.value.key == key and e.value.retry_after == 1
        assert e.value.reservation is None and e.value.hint
    assert pi.consume_once(conn2, "queue", key, lambda c: None) is False   # committed: done
    # wait is passed on: the second consumer waits that long for the holder, then gives up (the
    # isolation spec claim_once_wait shows what it gets when the holder ends meanwhile)
    key = new_key()
    with conn.transaction():
        assert pi.claim_once(conn, "queue", key) is True
        began = time.monotonic()
        with pytest.raises(pi.KeyInProgress):
            pi.consume_once(conn2, "queue", key, lambda c: None, wait=0.3)
        assert time.monotonic() - began >= 0.3
        raise psycopg.Rollback()   # the holder rolls back: the key is free again
    assert pi.consume_once(conn2, "queue", key, lambda c: None) is True


def test_consume_once_and_apply_once_on_an_autocommit_connection(dsn, conn2, orders):
    # BEGIN goes out with the first statement (one round trip); the rest as on other connections
    ac = psycopg.connect(dsn, autocommit=True)
    idle = psycopg.pq.TransactionStatus.IDLE
    key, ran = new_key(), []
    work = lambda c: (c.execute("INSERT INTO orders (key) VALUES (%s)", (key,)), ran.append(1))  # noqa: E731
    assert pi.consume_once(ac, "queue", key, work) is True
    assert pi.consume_once(ac, "queue", key, work) is False
    assert ran == [1] and count_orders(conn2, key) == 1 and ac.info.transaction_status == idle
    key2 = new_key()
    with pytest.raises(ZeroDivisionError):
        pi.consume_once(ac, "queue", key2, lambda c: 1 / 0)
    assert ac.info.transaction_status == idle and pi.lookup(ac, "queue", key2) is None
    # another holder: KeyInProgress, the connection usable afterwards
    with conn2.transaction():
        pi.claim_once(conn2, "queue", key2)
        with pytest.raises(pi.KeyInProgress) as e:
            pi.consume_once(ac, "queue", key2, work)
        assert e.value.key == key2 and ac.info.transaction_status == idle
    assert pi.consume_once(ac, "queue", key2, work) is False
    # inside the caller's transaction: a savepoint, as on other connections
    key3 = new_key()
    with ac.transaction():
        assert pi.consume_once(ac, "queue", key3, lambda c: None) is True
        raise psycopg.Rollback()
    assert pi.consume_once(ac, "queue", key3, lambda c: None) is True
    # apply_once takes the same path: strict refusal rolls back, the watermark stays
    part = new_key()
    assert pi.apply_once(ac, "c", part, 7, lambda c: None) is True
    with pytest.raises(pi.PositionBelowWatermark):
        pi.apply_once(ac, "c", part, 5, lambda c: None, strict=True)
    assert ac.info.transaction_status == idle and pi.watermark(ac, "c", part) == 7
    # values are bound in that round trip: quotes, backslashes, placeholders and non-ASCII
    # text arrive as they are; a text with a NUL is refused before anything is sent
    for odd in ["it's", "back\\slash\\", "%s %(x)s $1", "clé-ключ-鍵", "E'x'--"]:
        key = odd + new_key()
        assert pi.consume_once(ac, "queue", key, lambda c: None) is True
        assert pi.lookup(ac, "queue", key)["state"] == "completed"
        assert pi.consume_once(ac, "queue", key, lambda c: None) is False
    with pytest.raises(pi.KeyUntranslatable):
        pi.consume_once(ac, "queue", "nul\0" + new_key(), lambda c: None)
    assert ac.info.transaction_status == idle
    # a UUID position (128 bits), and server errors of the first statement typed
    part2, pos = new_key(), uuid.UUID("01800000-0000-7000-8000-000000000001")
    assert pi.apply_once(ac, "c", part2, pos, lambda c: None) is True
    assert pi.apply_once(ac, "c", part2, str(pos), lambda c: None) is False
    with pytest.raises(pi.KeyTooOld) as e:
        pi.consume_once(ac, "queue", "01800000-0000-7000-8000-000000000000", lambda c: None,
                        retention="1 hour")
    assert e.value.sqlstate == "IK004" and ac.info.transaction_status == idle
    ac.close()


@pytest.mark.parametrize("autocommit", [False, True])
def test_work_that_swallows_a_server_error_gets_transaction_aborted(dsn, orders, autocommit):
    # COMMIT of a failed transaction rolls back without an error: a consumer told True would
    # acknowledge a message that was never applied.
    c = psycopg.connect(dsn, autocommit=autocommit)

    def swallow(conn):
        conn.execute("INSERT INTO orders (key) VALUES ('never')")
        try:
            conn.execute("SELECT 1/0")
        except psycopg.DataError:
            pass

    key = new_key()
    with pytest.raises(pi.TransactionAborted) as e:
        pi.consume_once(c, "queue", key, swallow)
    assert e.value.sqlstate == "25P02" and e.value.hint
    assert c.info.transaction_status != psycopg.pq.TransactionStatus.INERROR
    assert pi.lookup(c, "queue", key) is None and count_orders(c, "never") == 0
    assert pi.consume_once(c, "queue", key, lambda conn: None) is True  # the redelivery
    with pytest.raises(pi.TransactionAborted):
        pi.apply_once(c, "c-swallow", new_key(), 1, swallow)
    c.rollback()
    # inside the caller's transaction: its savepoint rolled back, the transaction usable
    key2 = new_key()
    with c.transaction():
        with pytest.raises(pi.TransactionAborted):
            pi.consume_once(c, "queue", key2, swallow)
        assert pi.consume_once(c, "queue", key2, lambda conn: None) is True
    assert pi.claim_once(c, "queue", key2) is False
    c.close()


def test_claim_once_too_old_and_typed_errors(conn):
    old = "01800000-0000-7000-8000-000000000000"  # a UUIDv7 from 2022
    with pytest.raises(pi.KeyTooOld) as e:
        pi.consume_once(conn, "queue", old, lambda c: None, retention="1 hour")
    assert e.value.sqlstate == "IK004" and e.value.http_status == 422 and e.value.key == old
    conn.rollback()
    with pytest.raises(pi.KeyInProgress):   # IK003 from a plain execute: the claim is this
                                            # transaction's own reserve, not completed
        with conn.transaction():
            key = "own-" + new_key()
            pi.reserve(conn, "queue", key)
            pi.execute(conn, "SELECT idempotency.claim_once('queue', %s)", (key,))
    conn.rollback()


@pytest.mark.extension_only(REASON_OUTBOX)
def test_lsn_key_codec_matches_sql(conn):
    lsn = pi.emit(conn, "t", {"a": 1})
    conn.commit()
    assert isinstance(lsn, int) and str(lsn) == conn.execute("SELECT %s::pg_lsn::text", (str(lsn),)).fetchone()[0]
    key = pi.lsn_key(0x16B3748 + 10, 0x16B3748)
    sql = conn.execute("SELECT idempotency.lsn_key('0/16B3752', '0/16B3748')").fetchone()[0]
    assert key == sql
    commit_lsn, lsn2 = pi.lsn_key_parts(key)
    assert (str(commit_lsn), str(lsn2)) == ("0/16B3752", "0/16B3748")
    conn.rollback()


def test_ids_out_of_order_accept_skips_3_and_strict_apply_once_raises(conn):
    """ids 1,2,2,4,3,1,5,4,3,5: accept applies 1,2,4,5 and skips 3 without a word (a
    watermark); apply_once(strict=True) raises PositionBelowWatermark for each position below
    it, and rolls its transaction back."""
    ids = [1, 2, 2, 4, 3, 1, 5, 4, 3, 5]

    def run(consumer, **options):
        applied, refused = [], []
        for i in ids:
            try:
                pi.apply_once(conn, consumer, "p", i, lambda c, i=i: applied.append(i), **options)
            except pi.PositionBelowWatermark as e:
                assert e.position == i and e.watermark > i
                assert f"position {i} " in str(e) and f"below its watermark {e.watermark}" in str(e)
                refused.append(i)
        return applied, refused

    assert run(f"lenient-{uuid.uuid4()}") == ([1, 2, 4, 5], [])
    assert run(f"strict-{uuid.uuid4()}", strict=True) == ([1, 2, 4, 5], [3, 1, 4, 3])
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    # 128-bit positions compare as numbers too
    consumer = f"uuid-{uuid.uuid4()}"
    assert pi.apply_once(conn, consumer, "p", uuid.UUID(int=2**100), lambda c: None)
    with pytest.raises(pi.PositionBelowWatermark):
        pi.apply_once(conn, consumer, "p", str(uuid.UUID(int=2**99)), lambda c: None, strict=True)
