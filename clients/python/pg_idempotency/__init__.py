"""Client for the idempotency PostgreSQL extension (psycopg 3)."""
from .client import (Attempt, Claim, Lsn, Reservation, Result, accept, checkpoint, claim,
                     claim_once, complete, emit, execute, fail, idempotent, lookup, lsn_key,
                     lsn_key_parts, next_key, register_types, request_hash, reserve,
                     run_external, run_once, watermark)
# consume_once / apply_once with max_attempts (poison messages) wrap the client's.
from .consumer import Message, OutboxConsumer, apply_once, consume_once, position_key
from .errors import *  # noqa: F401,F403  (the exception classes)
from .errors import BY_SQLSTATE, IdempotencyError, translate
from .fingerprint import canonical_json, canonical_number, fingerprint
from .versions import (CLIENT_VERSION, EXTENSION_VERSIONS, Edition, ExtensionVersionError,
                       check_extension, edition, edition_async)
from .web import Answer, answer_for, parse_idempotency_key, request_fingerprint

__version__ = CLIENT_VERSION
