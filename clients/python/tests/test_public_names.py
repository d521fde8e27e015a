"""The package's public names, and the submodules the documentation and examples import, are
those the client has always offered (and the exception classes of the SQLSTATEs added since):
splitting its modules changes no import of a user."""
import importlib
import types

import pg_idempotency

PUBLIC = [
    "Answer", "ArraySubscriptError", "Attempt", "BY_SQLSTATE", "CLIENT_VERSION",
    "CardinalityViolation", "Claim", "ConnectionLost", "DuplicateObject", "EXTENSION_VERSIONS",
    "Edition", "ExtensionVersionError",
    "FeatureNotSupported", "IdempotencyError", "InvalidJson",
    "InvalidTransactionTermination", "InvalidParameterValue", "KeyEmpty",
    "KeyInProgress", "KeyMalformed", "KeyMismatch", "KeyTooLong", "KeyTooOld",
    "KeyUntranslatable", "LockNotAvailable", "Lsn", "Message", "NullValueNotAllowed",
    "ObjectInUse", "ObjectNotInPrerequisiteState", "OutboxConsumer", "OutcomeError",
    "PoisonMessage",
    "PositionBelowWatermark", "ProgramLimitExceeded", "QueryCanceled", "ReadOnlySqlTransaction",
    "Reservation", "Result", "ResultConflict", "SequenceGeneratorLimitExceeded",
    "SerializationFailure", "StaleAttempt", "StatementSyntaxError", "TransactionAborted",
    "TransactionOpen",
    "UndefinedObject", "UntranslatableCharacter", "accept", "answer_for", "apply_once",
    "canonical_json", "canonical_number", "check_extension", "check_names", "checkpoint",
    "claim", "claim_once", "complete", "consume_once", "edition", "edition_async", "emit",
    "execute", "fail", "fingerprint", "forget",
    "idempotent", "lookup", "lsn_key", "lsn_key_parts", "next_key", "parse_idempotency_key",
    "position_key", "register_types", "request_fingerprint", "request_hash", "reserve",
    "run_external", "run_once", "translate", "watermark",
]

# Submodules that README.md, docs/, examples/, bench/ and test/ import from (grep for
# "from pg_idempotency." and "pg_idempotency.<module>"), with the names they take.
SUBMODULE_NAMES = {
    "pg_idempotency.asgi": ["IdempotencyMiddleware"],
    "pg_idempotency.wsgi": ["IdempotencyMiddleware"],
    "pg_idempotency.django": ["IdempotencyMiddleware"],
    "pg_idempotency.connection": ["cursor_of"],
    "pg_idempotency.answers": ["replay_of", "stored_answer"],
    "pg_idempotency.web": ["replay_of", "stored_answer"],
}


def test_public_names_are_unchanged():
    public = sorted(n for n, v in vars(pg_idempotency).items()
                    if not n.startswith("_") and not isinstance(v, types.ModuleType))
    assert public == sorted(PUBLIC)


def test_public_names_come_from_the_modules_of_their_concern():
    """Each public name is the object its module defines (no second copy of a class or a
    function under the same name)."""
    for name in PUBLIC:
        value = getattr(pg_idempotency, name)
        module = getattr(value, "__module__", None)
        if module and module.startswith("pg_idempotency."):
            assert getattr(importlib.import_module(module), name, None) is value, name


def test_submodules_the_documentation_imports():
    for module, names in SUBMODULE_NAMES.items():
        if module == "pg_idempotency.django":
            importlib.import_module("django")  # (the test environment has Django)
        imported = importlib.import_module(module)
        for name in names:
            assert hasattr(imported, name), f"{module}.{name}"
