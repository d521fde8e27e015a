"""The reference outbox consumer: reads an `idempotency` logical slot and confirms a
transaction to the slot only after every message of it has been applied and committed in the
consumer's database.

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
import json
import time
import uuid
from typing import Any, Callable, Optional

import psycopg

from .client import Lsn, apply_once, execute, lsn_key_parts


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
        cur = execute(self.source, "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s",
                      (self.slot,))
        if cur.fetchone() is None or not if_missing:
            execute(self.source, "SELECT pg_create_logical_replication_slot(%s, 'idempotency')",
                    (self.slot,))

    def _peek(self):
        options = ["framing", "on"]
        if self.topics:
            options += ["topics", self.topics]
        cur = execute(self.source,
                      "SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, %s, "
                      + ", ".join(["%s"] * len(options)) + ")",
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
                execute(self.source, "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                        (self.slot, end_lsn))
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
