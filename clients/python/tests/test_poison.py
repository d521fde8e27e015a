"""Poison messages: consume_once / apply_once with max_attempts count the failures of a
message's work on its key and, at the last allowed attempt, record it dead and raise
PoisonMessage (the consumer dead-letters it) instead of failing for ever."""
import uuid

import psycopg
import pytest

import pg_idempotency as pi


def new_key():
    return str(uuid.uuid4())


@pytest.fixture
def ledger(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE IF NOT EXISTS poison_ledger (key text NOT NULL, n int NOT NULL)")
    return dsn


@pytest.fixture
def ac(dsn):
    c = psycopg.connect(dsn, autocommit=True)
    yield c
    c.close()


def applied(dsn, key):
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute("SELECT count(*) FROM poison_ledger WHERE key = %s", (key,)).fetchone()[0]


def failed_key(dsn, scope, key):
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute("SELECT attempt, dead, error FROM idempotency.failed_keys "
                         "WHERE scope = %s AND key = %s", (scope, key)).fetchone()


def poison(key):
    def work(c):
        c.execute("INSERT INTO poison_ledger VALUES (%s, 1)", (key,))  # rolled back
        raise ValueError(f"body of {key} is not JSON")
    return work


def good(key):
    def work(c):
        c.execute("INSERT INTO poison_ledger VALUES (%s, 1)", (key,))
    return work


@pytest.mark.parametrize("mode", ["autocommit", "transactional", "savepoint"])
def test_consume_once_dead_letters_a_poison_message_after_max_attempts(dsn, ledger, mode):
    conn = psycopg.connect(dsn, autocommit=(mode == "autocommit"))
    key = new_key()
    try:
        def call(work):
            if mode != "savepoint":
                return pi.consume_once(conn, "q", key, work, max_attempts=3)
            # Inside the caller's transaction the helper's is a savepoint and the failure's
            # record is part of the caller's transaction: it counts once that commits.
            with conn.transaction():
                try:
                    return pi.consume_once(conn, "q", key, work, max_attempts=3)
                except Exception as e:
                    error = e
            raise error

        for attempt in (1, 2):
            with pytest.raises(ValueError, match="is not JSON"):
                call(poison(key))
            assert failed_key(dsn, "q", key)[:2] == (attempt, False)
        with pytest.raises(pi.PoisonMessage) as caught:
            call(poison(key))
        e = caught.value
        assert isinstance(e.__cause__, ValueError)
        assert (e.scope, e.key, e.attempt, e.partition) == ("q", key, 3, None)
        assert e.error["dead"] is True and e.error["type"] == "ValueError"
        attempt, dead, error = failed_key(dsn, "q", key)
        assert (attempt, dead) == (3, True)
        assert error["error"] == f"body of {key} is not JSON" and error["attempt"] == 3
        assert "failed_at" in error
        assert applied(dsn, key) == 0                       # nothing of the work was kept
        if mode == "transactional":
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        # After a fix, the dead-lettered message is replayed: applied once, then a duplicate.
        assert call(good(key)) is True
        assert call(good(key)) is False
        assert applied(dsn, key) == 1
        assert failed_key(dsn, "q", key) is None
        assert pi.lookup(conn, "q", key)["state"] == "completed"
    finally:
        conn.close()


def test_a_replay_that_fails_again_is_dead_at_once_and_forget_resets_the_count(dsn, ac, ledger):
    key = new_key()
    with pytest.raises(ValueError):
        pi.consume_once(ac, "q", key, poison(key), max_attempts=2)
    with pytest.raises(pi.PoisonMessage):
        pi.consume_once(ac, "q", key, poison(key), max_attempts=2)
    with pytest.raises(pi.PoisonMessage) as caught:   # replayed before the fix
        pi.consume_once(ac, "q", key, poison(key), max_attempts=2)
    assert caught.value.attempt == 3
    assert pi.execute(ac, "SELECT idempotency.forget('q', %s)", (key,)).fetchone()[0] is True
    with pytest.raises(ValueError):                     # a fresh count
        pi.consume_once(ac, "q", key, poison(key), max_attempts=2)
    assert failed_key(dsn, "q", key)[:2] == (1, False)


def test_a_good_message_costs_nothing_more_and_max_attempts_one(ac, ledger):
    key = new_key()
    assert pi.consume_once(ac, "q", key, good(key), max_attempts=1) is True
    assert pi.lookup(ac, "q", key)["attempt"] == 1
    key2 = new_key()
    with pytest.raises(pi.PoisonMessage):
        pi.consume_once(ac, "q", key2, poison(key2), max_attempts=1)
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="max_attempts"):
            pi.consume_once(ac, "q", new_key(), good(key), max_attempts=bad)


def test_failures_that_are_not_the_messages_are_not_counted(dsn, ac, ledger):
    key = new_key()

    def transient(c):
        c.execute("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$")

    with pytest.raises(psycopg.errors.SerializationFailure):
        pi.consume_once(ac, "q", key, transient, max_attempts=1)
    assert pi.lookup(ac, "q", key) is None

    # The connection dies inside the work: ConnectionLost, nothing recorded.
    victim = psycopg.connect(dsn, autocommit=True)

    def dies(c):
        with psycopg.connect(dsn, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (c.info.backend_pid,))
        c.execute("SELECT 1")

    with pytest.raises(pi.ConnectionLost):
        pi.consume_once(victim, "q", key, dies, max_attempts=1)
    victim.close()
    assert pi.lookup(ac, "q", key) is None

    # The key is held by another consumer's open transaction: refused before the work runs.
    with psycopg.connect(dsn) as holder:
        assert pi.claim_once(holder, "q", key) is True
        with pytest.raises(pi.KeyInProgress):
            pi.consume_once(ac, "q", key, poison(key), max_attempts=1)
        holder.rollback()
    assert pi.lookup(ac, "q", key) is None


def test_the_stored_error_is_bounded_and_holds_any_text(dsn, ac, ledger):
    key = new_key()

    def ugly(c):
        raise RuntimeError("nul\0 quote' backslash\\ " + "x" * 5000)

    with pytest.raises(pi.PoisonMessage) as caught:
        pi.consume_once(ac, "q", key, ugly, max_attempts=1)
    error = failed_key(dsn, "q", key)[2]
    assert error == {**caught.value.error, "failed_at": error["failed_at"]}
    assert error["error"].startswith("nul\ufffd quote' backslash\\ x")
    assert error["error"].endswith("...") and len(error["error"]) == 2003


def test_apply_once_moves_the_watermark_past_a_poison_position(dsn, ac, ledger):
    group, part = "stream-" + new_key(), "events"
    assert pi.apply_once(ac, group, part, 6, good("s6"), max_attempts=2) is True
    with pytest.raises(ValueError):
        pi.apply_once(ac, group, part, 7, poison("s7"), max_attempts=2)
    assert pi.watermark(ac, group, part) == 6                # not moved: 7 comes again
    assert failed_key(dsn, group, "events@7")[:2] == (1, False)
    with pytest.raises(pi.PoisonMessage) as caught:
        pi.apply_once(ac, group, part, 7, poison("s7"), max_attempts=2)
    e = caught.value
    assert (e.scope, e.key, e.partition, e.position, e.attempt) == (group, "events@7", part, 7, 2)
    assert pi.watermark(ac, group, part) == 7                # moved past it, with the record
    attempt, dead, error = failed_key(dsn, group, "events@7")
    assert (attempt, dead, error["position"], error["partition"]) == (2, True, "7", "events")
    assert pi.apply_once(ac, group, part, 7, good("s7"), max_attempts=2) is False  # redelivery
    assert pi.apply_once(ac, group, part, 8, good("s8"), max_attempts=2) is True
    assert applied(dsn, "s7") == 0 and applied(dsn, "s8") == 1
    # strict still refuses a position below the watermark, uncounted.
    with pytest.raises(pi.PositionBelowWatermark):
        pi.apply_once(ac, group, part, 5, good("s5"), strict=True, max_attempts=2)
    assert failed_key(dsn, group, "events@5") is None


def test_position_key_stays_a_valid_key():
    assert pi.position_key("events", 7) == "events@7"
    long = pi.position_key("p" * 300, 7)
    assert len(long) <= 255 and long.endswith("@7")
