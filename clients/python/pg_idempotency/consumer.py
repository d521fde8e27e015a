"""Consumers: a key per message (claim_once, consume_once), poison messages (max_attempts of
consume_once and apply_once), and the reference outbox consumer.

The outbox consumer reads an `idempotency` logical slot and confirms a transaction to the slot
only after every message of it has been applied and committed in the consumer's database.

How: psycopg 3 does not speak the replication protocol (psycopg2 did), so the consumer reads
with pg_logical_slot_peek_changes (which does not move the slot) over an ordinary
connection, applies each message in its own transaction of the target connection under
idempotency.accept (the watermark moves in the same transaction as the message's effects),
and only after the target's COMMIT has returned for the last message of a source transaction
moves the slot with pg_replication_slot_advance to that transaction's end (the `end_lsn` of
its framing COMMIT line). So, whatever moment the process dies at:
- before the target commit: nothing of the message is applied and the slot still holds it;
  it comes again and is applied;
- after the target commit, before the advance: the slot sends it again, and accept() is false
  for it (its key is at or below the watermark): skipped, not applied twice.
pg_recvlogical, by contrast, confirms what it has written to its output, before the
application downstream has applied anything: a crash there loses messages.

The source role needs the REPLICATION attribute (or superuser) for the slot functions.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import uuid
from typing import Any, Callable, Optional

import psycopg
from psycopg.types.json import Jsonb

from .spec import DEFAULT_RETENTION, DEFAULT_WAIT
from . import statements as sql
from . import streams
from .connection import check_encodable, execute, transaction, transaction_with
from .errors import (ConnectionLost, KeyInProgress, KeyTooOld, PoisonMessage, check_names,
                     lost_connection)
from .keys import interval, names, reserve
from .observe import observed_consumer
from .streams import Lsn, lsn_key_parts


@dataclasses.dataclass(frozen=True)
class Message:
    key: uuid.UUID        # strictly increasing in stream order, the same on every redelivery
    topic: str
    payload: Any
    commit_lsn: Lsn
    lsn: Lsn
    xid: int
    commit_time: str

    @property
    def position(self) -> tuple:
        """The (commit LSN, LSN) pair the key encodes."""
        return (self.commit_lsn, self.lsn)


class OutboxConsumer:
    """consumer = OutboxConsumer(source, target, slot="billing", consumer="billing")
    consumer.run(handle)         # handle(target_conn, message), forever
    consumer.poll(handle)        # one batch; returns the number of messages applied

    source: a connection (autocommit is set) to the database with the slot; target: the
    connection of the consumer's own database (may be another connection to the same
    database). partition names the source in the watermark table: use one per source database
    and start a new one after a failover or restore (docs/outbox.md)."""

    def __init__(self, source: psycopg.Connection, target: psycopg.Connection, slot: str,
                 consumer: str, partition: Optional[str] = None, topics=None,
                 batch: int = 100, on_phase: Callable[[str, Any], None] | None = None):
        self.source, self.target, self.slot, self.consumer = source, target, slot, consumer
        self.partition = partition or slot
        self.topics = ",".join(topics) if topics else None
        self.batch = batch
        self._on_phase = on_phase or (lambda phase, item: None)
        source.autocommit = True

    def create_slot(self, if_missing=True):
        cur = execute(self.source, sql.SLOT_EXISTS, (self.slot,))
        if cur.fetchone() is None or not if_missing:
            execute(self.source, sql.CREATE_SLOT, (self.slot,))

    def _peek(self):
        options = ["framing", "on"]
        if self.topics:
            options += ["topics", self.topics]
        cur = execute(self.source, sql.peek_changes(len(options)),
                      (self.slot, self.batch, *options))
        return [json.loads(row[0]) for row in cur.fetchall()]

    def poll(self, handle: Callable[[psycopg.Connection, Message], None]) -> int:
        applied = 0
        lines = self._peek()
        self._on_phase("peeked", lines)
        for line in lines:
            action = line.get("action")
            if action == "begin":
                continue
            if action == "commit":
                # Every message of this transaction is committed in the target: confirm it.
                end_lsn = line["end_lsn"]
                self._on_phase("before_advance", end_lsn)
                execute(self.source, sql.ADVANCE_SLOT, (self.slot, end_lsn))
                self._on_phase("advanced", end_lsn)
                continue
            key = uuid.UUID(line["key"])
            commit_lsn, lsn = lsn_key_parts(key)
            msg = Message(key, line["topic"], line["payload"], commit_lsn, lsn, line["xid"],
                          line["commit_time"])

            def work(conn, msg=msg):
                handle(conn, msg)
                self._on_phase("applied_uncommitted", msg)

            if apply_once(self.target, self.consumer, self.partition, key, work):
                applied += 1
            self._on_phase("committed", msg)
        return applied

    def run(self, handle, idle_sleep: float = 0.2, stop: Callable[[], bool] = lambda: False):
        while not stop():
            if self.poll(handle) == 0:
                time.sleep(idle_sleep)


# ---- a key per message: queue consumers ----

def _name_key(e, scope, key):
    """IK003 / IK004 come from the server without the key they are about: name it."""
    if e.key is None:
        e.scope, e.key = scope, key


@observed_consumer("claim_once")
def claim_once(conn, scope, key, *, retention=DEFAULT_RETENTION, wait=DEFAULT_WAIT) -> bool:
    """idempotency.claim_once in the caller's transaction: true the first time (the key is now
    completed in this transaction: apply the message in it), false for a redelivery.
    KeyInProgress (IK003) if another holder has the key after `wait`, KeyTooOld (IK004) for a
    UUIDv7 / ULID key older than `retention`; KeyMalformed before any query."""
    check_names(scope, key)
    check_encodable(conn, names(scope, key))
    try:
        cur = execute(conn, sql.CLAIM_ONCE, (scope, key, interval(retention), interval(wait)))
    except (KeyInProgress, KeyTooOld) as e:
        _name_key(e, scope, key)
        raise
    return cur.fetchone()[0]


def _consume(conn, scope, key, work: Callable, retention, wait) -> bool:
    """consume_once without max_attempts."""
    check_names(scope, key)
    check_encodable(conn, names(scope, key))

    def then(claimed):
        if claimed:
            work(conn)
        return claimed

    try:
        return transaction_with(conn, sql.CLAIM_ONCE,
                                (scope, key, interval(retention), interval(wait)), then)
    except (KeyInProgress, KeyTooOld) as e:
        _name_key(e, scope, key)
        raise


# ---- poison messages: a message whose work fails every time ----
#
# consume_once and apply_once with max_attempts count the failed attempts of a message's work
# on a key of its own (the message id, or "<partition>@<offset>" for a stream position). A
# failure of the work rolls its transaction back as before, and then, in a transaction of its
# own (a savepoint inside the caller's), the key is reserved and failed with the error: the
# record keeps the attempt number and the error, and nothing on the success path costs more.
# Below max_attempts the work's exception propagates (leave the message for a redelivery);
# at max_attempts the error is stored with "dead": true (idempotency.failed_keys), for a
# stream the watermark moves past the position in the same transaction, and PoisonMessage is
# raised: dead-letter the message. A broken connection, a competing holder of the key and a
# transient server error (serialization failure, deadlock, shutdown) are not the message's
# fault and are not counted.

_ERROR_TEXT_LIMIT = 2000
_TRANSIENT_SQLSTATE_CLASSES = ("08", "40", "53", "57")


def _counted(conn, exc) -> bool:
    """Whether a failure of the work is the message's: not a broken connection, a competing
    holder or a transient server error."""
    if isinstance(exc, (ConnectionLost, KeyInProgress)) or lost_connection(conn, exc):
        return False
    sqlstate = getattr(exc, "sqlstate", None) or ""
    return not sqlstate.startswith(_TRANSIENT_SQLSTATE_CLASSES)


def _error_document(exc, attempt, dead, where=None) -> dict:
    text = (str(exc) or type(exc).__name__).replace("\0", "\ufffd")
    if len(text) > _ERROR_TEXT_LIMIT:
        text = text[:_ERROR_TEXT_LIMIT] + "..."
    doc = {"error": text, "type": type(exc).__name__, "attempt": attempt, "dead": dead}
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate:
        doc["sqlstate"] = sqlstate
    if where:
        doc.update(where)
    return doc


def _record_failure(conn, scope, key, exc, max_attempts, retention, wait, where=None,
                    when_dead: Callable[[], None] = lambda: None):
    """Reserves the key and fails it with exc's error, in a transaction of its own (or a
    savepoint): returns (reservation outcome, attempt, error document or None). when_dead runs
    in the same transaction once the attempt reaches max_attempts."""
    try:
        with transaction(conn):
            r = reserve(conn, scope, key, lock_ttl="1 minute", retention=retention, wait=wait)
            if r.outcome != "new":
                return r.outcome, r.attempt, None
            doc = _error_document(exc, r.attempt, r.attempt >= max_attempts, where)
            execute(conn, sql.FAIL_STAMPED, (scope, key, Jsonb(doc), r.attempt))
            if doc["dead"]:
                when_dead()
            return r.outcome, r.attempt, doc
    except psycopg.Error as e:
        raise (lost_connection(conn, e) or e) from e


def _check_max_attempts(max_attempts):
    if max_attempts is not None and (isinstance(max_attempts, bool)
                                     or not isinstance(max_attempts, int) or max_attempts < 1):
        raise ValueError("max_attempts must be a positive integer (or None)")


@observed_consumer("consume_once")
def consume_once(conn, scope, key, work: Callable, *, retention=DEFAULT_RETENTION, wait=DEFAULT_WAIT,
                 max_attempts: Optional[int] = None) -> bool:
    """Runs work(conn) in one transaction with claim_once(scope, key): true if it ran, false for
    a redelivery (a key already completed: acknowledge the message without running work). The
    transaction is the caller's savepoint if one is open, else its own, committed before this
    returns: acknowledge the message after that. An exception in work rolls the claim back with
    it (the redelivery is applied), and so does a work that returns inside a failed transaction
    (TransactionAborted); KeyInProgress / KeyTooOld as claim_once; a connection that
    breaks comes out as ConnectionLost (nothing of the transaction was kept, unless it broke
    during COMMIT: the redelivery then answers false).

    With max_attempts a poison message does not come back for ever: each failure of work is
    recorded on the key, and the max_attempts-th raises PoisonMessage (reject the message
    without requeue, to a dead-letter exchange). A message redelivered after it was recorded
    dead (a replay after a fix) gets one more attempt; idempotency.forget(scope, key) first
    gives it max_attempts again."""
    _check_max_attempts(max_attempts)
    if max_attempts is None:
        return _consume(conn, scope, key, work, retention, wait)
    ran = []

    def counted_work(c):
        ran.append(True)
        work(c)

    try:
        return _consume(conn, scope, key, counted_work, retention, wait)
    except Exception as exc:
        if not ran or not _counted(conn, exc):
            raise
        outcome, attempt, doc = _record_failure(conn, scope, key, exc, max_attempts,
                                                retention, wait)
        if outcome == "replay":
            return False  # a competing consumer has applied it meanwhile: a redelivery
        if doc is not None and doc["dead"]:
            raise PoisonMessage(scope, key, attempt, doc) from exc
        raise


def position_key(partition, position) -> str:
    """The key apply_once(max_attempts=...) counts a stream position's failures on (scope: the
    consumer): "<partition>@<position>", or the partition's SHA-256 in hex in its place when
    that would pass the 255 bytes of a key."""
    key = f"{partition}@{position}"
    if len(key.encode("utf-8")) > 255:
        key = f"{hashlib.sha256(str(partition).encode('utf-8')).hexdigest()}@{position}"
    return key


def _position_key_of(args, kwargs):
    partition = args[0] if args else kwargs["partition"]
    position = args[1] if len(args) > 1 else kwargs["position"]
    return position_key(partition, position)


@observed_consumer("apply_once", _position_key_of)
def apply_once(conn, consumer, partition, position, fn: Callable, *, strict=False,
               max_attempts: Optional[int] = None, retention=DEFAULT_RETENTION) -> bool:
    """streams.apply_once (fn(conn) in one transaction with accept: true if it ran, false for a
    position at or below the watermark), and with max_attempts a position whose fn fails
    again and again does not stop the partition: each failure is recorded on the key
    (consumer, position_key(partition, position)), kept for `retention`; the
    max_attempts-th moves the watermark past the position in the same transaction and raises
    PoisonMessage (acknowledge the message and go on: the failure stays in
    idempotency.failed_keys)."""
    _check_max_attempts(max_attempts)
    if max_attempts is None:
        return streams.apply_once(conn, consumer, partition, position, fn, strict=strict)
    ran = []

    def counted_fn(c):
        ran.append(True)
        fn(c)

    try:
        return streams.apply_once(conn, consumer, partition, position, counted_fn,
                                  strict=strict)
    except Exception as exc:
        if not ran or not _counted(conn, exc):
            raise
        key = position_key(partition, position)
        check_names(consumer, key)
        outcome, attempt, doc = _record_failure(
            conn, consumer, key, exc, max_attempts, retention, "0",
            {"partition": str(partition), "position": str(position)},
            lambda: streams.accept(conn, consumer, partition, position))
        if doc is not None and doc["dead"]:
            raise PoisonMessage(consumer, key, attempt, doc, partition, position) from exc
        raise
