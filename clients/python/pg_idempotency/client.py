"""Internal compatibility: the names this module held before the client was split by concern
(connection, statements, keys, transactions, streams, consumer). The middlewares still import
from here; new code imports from the modules themselves. Not public API: the package's public
names are those of pg_idempotency (__init__.py)."""
from . import statements as _sql
from .connection import (autocommit_to_restore, begin_needed, check_encodable, cursor_of,
                         execute, register_types, reserve_begin_usable)
from .consumer import claim_once, consume_once
from .keys import (Reservation, checkpoint, complete, fail, lookup, request_hash, reservation_of,
                   reserve, reserve_begin_refused, reserve_params)
from .streams import Lsn, accept, apply_once, emit, lsn_key, lsn_key_parts, next_key, watermark
from .transactions import Attempt, Claim, Result, claim, idempotent, run_external, run_once

RESERVE_SQL = _sql.RESERVE
RESERVE_BEGIN_SQL = _sql.RESERVE_BEGIN
COMPLETE_SQL = _sql.COMPLETE
COMPLETE_COMMIT_SQL = _sql.COMPLETE_COMMIT
CLAIM_ONCE_SQL = _sql.CLAIM_ONCE

__all__ = [
    "CLAIM_ONCE_SQL", "COMPLETE_COMMIT_SQL", "COMPLETE_SQL", "RESERVE_BEGIN_SQL", "RESERVE_SQL",
    "Attempt", "Claim", "Lsn", "Reservation", "Result", "accept", "apply_once",
    "autocommit_to_restore", "begin_needed", "check_encodable", "checkpoint", "claim",
    "claim_once", "complete", "consume_once", "cursor_of", "emit", "execute", "fail",
    "idempotent", "lookup", "lsn_key", "lsn_key_parts", "next_key", "register_types",
    "request_hash", "reservation_of", "reserve", "reserve_begin_refused", "reserve_begin_usable",
    "reserve_params", "run_external", "run_once", "watermark",
]
