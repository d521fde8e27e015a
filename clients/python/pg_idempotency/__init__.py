"""Client for the idempotency PostgreSQL extension (psycopg 3)."""
from .connection import execute, register_types
# consume_once / apply_once with max_attempts (poison messages).
from .consumer import (Message, OutboxConsumer, apply_once, claim_once, consume_once,
                       position_key)
from .errors import *  # noqa: F401,F403  (the exception classes)
from .errors import BY_SQLSTATE, IdempotencyError, translate
from .fingerprint import canonical_json, canonical_number, fingerprint
from .keys import (Reservation, checkpoint, complete, fail, forget, lookup, request_hash,
                   reserve)
from .streams import Lsn, accept, emit, lsn_key, lsn_key_parts, next_key, watermark
from .transactions import Attempt, Claim, Result, claim, idempotent, run_external, run_once
from .versions import (CLIENT_VERSION, EXTENSION_VERSIONS, Edition, ExtensionVersionError,
                       check_extension, edition, edition_async)
from .answers import Answer, answer_for
from .web import parse_idempotency_key, request_fingerprint

__version__ = CLIENT_VERSION
