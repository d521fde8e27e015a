"""Streams: watermarks (accept, watermark, apply_once), stream keys (next_key), the outbox
(emit) and its WAL-position keys (Lsn, lsn_key)."""
from __future__ import annotations

import uuid
from typing import Callable, Optional

from psycopg.types.json import Jsonb

from . import statements as sql
from .connection import check_encodable, execute, transaction_with
from .errors import PositionBelowWatermark


def _accept_query(conn, consumer, partition, position):
    check_encodable(conn, (), (("consumer", consumer), ("partition", partition)))
    if isinstance(position, int):
        return sql.ACCEPT_BIGINT, (consumer, partition, position)
    return sql.ACCEPT_UUID, (consumer, partition, uuid.UUID(str(position)))


def accept(conn, consumer, partition, position) -> bool:
    """idempotency.accept with an int (bigint) or uuid.UUID / UUID string (128-bit) position."""
    return execute(conn, *_accept_query(conn, consumer, partition, position)).fetchone()[0]


def watermark(conn, consumer, partition) -> Optional[int]:
    """The stored position as an int (None if none)."""
    check_encodable(conn, (), (("consumer", consumer), ("partition", partition)))
    v = execute(conn, sql.WATERMARK, (consumer, partition)).fetchone()[0]
    return None if v is None else int(v)


def _position_int(position) -> int:
    return position if isinstance(position, int) else uuid.UUID(str(position)).int


def apply_once(conn, consumer, partition, position, fn: Callable, *, strict=False) -> bool:
    """Runs fn(conn) in one transaction with accept(consumer, partition, position): true if it
    ran, false for a position at or below the watermark (a redelivery). A rollback (an exception
    in fn) undoes the watermark move too, so the message is applied again next time.
    strict=True: a position below the watermark (not equal to it) raises
    PositionBelowWatermark instead of returning false, for partitions that must arrive in
    order (an out-of-order message would otherwise be skipped without a word)."""
    def then(accepted):
        if not accepted:
            if strict:
                mark = watermark(conn, consumer, partition)
                if mark is not None and _position_int(position) < mark:
                    raise PositionBelowWatermark(consumer, partition, position, mark)
            return False
        fn(conn)
        return True

    return transaction_with(conn, *_accept_query(conn, consumer, partition, position), then)


def next_key(conn, stream) -> int:
    """The stream's next key (idempotency.next_key)."""
    check_encodable(conn, (), (("stream", stream),))
    v = execute(conn, sql.NEXT_KEY, (stream,)).fetchone()[0]
    return None if v is None else int(v)


def emit(conn, topic, payload) -> "Lsn":
    """idempotency.emit: the payload goes to the outbox's topic; returns its WAL position."""
    check_encodable(conn, (), (("topic", topic),))
    return Lsn.parse(execute(conn, sql.EMIT, (topic, Jsonb(payload))).fetchone()[0])


class Lsn(int):
    """A WAL position: an int that prints as PostgreSQL's pg_lsn text ('0/16B3748')."""

    @classmethod
    def parse(cls, text: str) -> "Lsn":
        hi, lo = text.split("/")
        return cls((int(hi, 16) << 32) | int(lo, 16))

    def __str__(self):
        return f"{int(self) >> 32:X}/{int(self) & 0xFFFFFFFF:X}"

    __repr__ = __str__


def lsn_key(commit_lsn: int, lsn: int) -> uuid.UUID:
    """The outbox key: commit LSN then LSN, each 64-bit big-endian (as idempotency.lsn_key)."""
    if lsn > commit_lsn:
        raise ValueError("lsn must not exceed commit_lsn")
    return uuid.UUID(int=(int(commit_lsn) << 64) | int(lsn))


def lsn_key_parts(key) -> tuple:
    """(commit LSN, LSN) of an outbox key (uuid.UUID or its text)."""
    v = key.int if isinstance(key, uuid.UUID) else uuid.UUID(str(key)).int
    return Lsn(v >> 64), Lsn(v & (2**64 - 1))
