"""What the HTTP middlewares (asgi.py, wsgi.py, django.py) share besides their flow
(middleware.py): the Idempotency-Key header, the request's fingerprint, the options, the
answers they send and the form an answer is stored in. The answers are those of the Node
client's Express middleware."""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
from typing import Any, Callable, Mapping, Optional

from .errors import (InvalidJson, KeyInProgress, KeyMalformed, KeyMismatch, KeyTooOld,
                     OutcomeError, ProgramLimitExceeded)
from .fingerprint import fingerprint

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
_TOKEN = re.compile(r"[\x21-\x7e]{1,255}")  # visible ASCII, no spaces

DEFAULT_MAX_BODY = 1 << 20


def parse_idempotency_key(raw: Optional[str]) -> str:
    """The key of an Idempotency-Key header: the IETF draft's sf-string (RFC 8941: "..." with
    \\" and \\\\ the only escapes; a parameter, a list or anything else after the closing quote
    is refused) or the unquoted token Stripe-style clients send, the two spellings of one key
    being the same key. The key is a UUID (lower-cased) or 1 to 255 visible ASCII characters
    (test/vectors/idempotency_key.json). KeyMalformed (a 400) otherwise."""
    if raw is None or raw == "":
        raise KeyMalformed("idempotency_key_missing", "the Idempotency-Key header is required")
    key: Optional[str] = raw.strip(" \t")
    if key.startswith('"'):
        key = _parse_sf_string(key)
    if key is not None and _UUID.fullmatch(key):
        return key.lower()
    if key is None or not _TOKEN.fullmatch(key):
        raise KeyMalformed("idempotency_key_malformed",
                           "the Idempotency-Key must be a UUID or 1 to 255 visible ASCII "
                           "characters")
    return key


def _parse_sf_string(text: str) -> Optional[str]:
    """The value of an RFC 8941 sf-string that is all of text, or None."""
    out = []
    i = 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 1
            if i == len(text) or text[i] not in '"\\':
                return None
            out.append(text[i])
        elif c == '"':
            return "".join(out) if i == len(text) - 1 else None
        elif not " " <= c <= "~":
            return None
        else:
            out.append(c)
        i += 1
    return None  # not closed


def is_json_type(content_type: Optional[str]) -> bool:
    """application/json, or any */*+json media type."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith(("application/", "text/"))
                                           and media.endswith("+json"))


def request_fingerprint(body: bytes, content_type: Optional[str], exclude=()) -> bytes:
    """A JSON body (by its Content-Type) is fingerprinted as JSON (so 1.10 and 1.1, or another
    member order, are the same request; InvalidJson / ProgramLimitExceeded when it is not
    JSON); any other body by its raw bytes, as SQL's idempotency.fingerprint(bytea). An empty
    body is fingerprinted too, so a later request with a body never replays it."""
    if is_json_type(content_type):
        return fingerprint(body, exclude)
    return hashlib.sha256(body).digest()


@dataclasses.dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, a JSON body, extra headers."""
    status: int
    body: Any
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def encoded(self) -> bytes:
        return encode_json(self.body)


def encode_json(value) -> bytes:
    """JSON as JSON.stringify writes it (no spaces, UTF-8); None is an empty body."""
    if value is None:
        return b""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _problem(status, error, message, headers=None) -> Answer:
    return Answer(status, {"error": error, "message": message}, headers or {})


def answer_for(err: BaseException) -> Optional[Answer]:
    """The HTTP answer for an error of the helpers that has one (a malformed key or scope, the
    reserve outcomes in_progress / mismatch / too_old, a request body the fingerprint refused),
    or None."""
    if isinstance(err, KeyMalformed):
        return _problem(400, err.code, err.message)
    if isinstance(err, KeyInProgress):
        return _problem(409, "idempotency_key_in_use",
                        "a request with this Idempotency-Key is still being processed; retry "
                        "later", {"Retry-After": str(err.retry_after)})
    if isinstance(err, KeyMismatch):
        return _problem(422, "idempotency_key_reused",
                        "this Idempotency-Key was already used with a different request body")
    if isinstance(err, KeyTooOld):
        return _problem(422, "idempotency_key_too_old",
                        "this Idempotency-Key was created before the retention window, so the "
                        "request cannot be told apart from a new one; check whether the first "
                        "request took effect, then use a new key")
    if isinstance(err, OutcomeError):
        return _problem(err.http_status, "idempotency_key_conflict", err.message)
    if isinstance(err, (InvalidJson, ProgramLimitExceeded)) and err.pgerror is None:
        # the request's body, refused by the client-side fingerprint (the server's own 54000,
        # say a response over 10 MB, is not the client's fault: no answer here)
        return INVALID_JSON
    return None


# The bodies of these answers are those of the Node middleware, word for word
# (test/vectors/http_answers.json, checked by both clients' tests).
DATABASE_UNAVAILABLE = _problem(503, "database_unavailable",
                                "the database could not be reached; retry with the same "
                                "Idempotency-Key", {"Retry-After": "1"})
INVALID_JSON = _problem(400, "invalid_json",
                        "the request body is sent as JSON but is not JSON, or is over the "
                        "limits of the fingerprint")
SCOPE_MISSING = _problem(400, "idempotency_scope_missing",
                         "the request does not say whose it is: the scope of its "
                         "Idempotency-Key is missing")
NOT_STORED = _problem(500, "internal_error",
                      "the request failed; retry with the same Idempotency-Key")
BODY_TOO_LARGE = _problem(413, "body_too_large",
                          "the request body is over the limit of the idempotency middleware")


# What complete() stores for an answer is {"idempotency_http": 1, "headers": {...}, and the
# body as one of "body" (the JSON value of a JSON answer), "text" (any other UTF-8 text) or
# "base64" (other bytes); none for an empty body}. The headers are those of the first answer
# that a client reads (lower-case names): Content-Type, Location and the keep_headers option's.
# A replay sends them, and the body, as they were (test/vectors/http_answers.json).
STORED_MARK = "idempotency_http"
KEPT_HEADERS = ("content-type", "location")


def _refuse_constant(name):
    raise ValueError(f"{name} is not JSON")


def stored_answer(body: bytes, headers, keep=()) -> dict:
    """What complete() stores for an answer: `headers` are its (name, value) pairs."""
    wanted = {*KEPT_HEADERS, *(name.lower() for name in keep)}
    kept: dict = {}
    for name, value in headers:
        name = name.decode("latin-1") if isinstance(name, bytes) else str(name)
        value = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        if name.lower() in wanted and name.lower() not in kept:
            kept[name.lower()] = value
    stored: dict = {STORED_MARK: 1, "headers": kept}
    if not body:
        return stored
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        stored["base64"] = base64.b64encode(body).decode("ascii")
        return stored
    if is_json_type(kept.get("content-type")):
        try:
            stored["body"] = json.loads(text, parse_constant=_refuse_constant)
            return stored
        except ValueError:
            pass                        # sent as JSON, but not JSON: kept as its text
    stored["text"] = text
    return stored


@dataclasses.dataclass(frozen=True)
class Replay:
    """A stored answer as a replay sends it: headers (lower-case names), the body's bytes, and
    `value` (the JSON value or the text; None for bytes or no body) for replay_headers."""
    headers: Mapping[str, str]
    body: bytes
    value: Any


def replay_of(response) -> Replay:
    """The replay of what complete() stored; a value stored without the mark (before it
    existed) is a JSON body, replayed as application/json."""
    if isinstance(response, dict) and response.get(STORED_MARK) == 1:
        headers = dict(response.get("headers") or {})
        if "body" in response:
            value = response["body"]
            body = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
            return Replay(headers, body, value)
        if "text" in response:
            return Replay(headers, response["text"].encode("utf-8"), response["text"])
        if "base64" in response:
            return Replay(headers, base64.b64decode(response["base64"]), None)
        return Replay(headers, b"", None)
    return Replay({"content-type": "application/json"}, encode_json(response), response)


def headers_of_replay(opts, status: int, replay: Replay) -> dict:
    """The headers of a replay: the stored ones, Content-Length, Idempotent-Replayed: true and
    those of the replay_headers option (which win)."""
    headers = {**replay.headers, "content-length": str(len(replay.body)),
               "idempotent-replayed": "true"}
    for name, value in opts.replay_headers(status, replay.value).items():
        headers[name.lower()] = str(value)
    return headers


def _scope_missing() -> KeyMalformed:
    """A 400: the scope function found nothing (a header it reads is missing)."""
    return KeyMalformed(SCOPE_MISSING.body["error"], SCOPE_MISSING.body["message"])


@dataclasses.dataclass
class RequestInfo:
    """What the scope / key / applies callables of the middlewares get."""
    method: str
    path: str
    headers: Mapping[str, str]          # lower-case names
    body: bytes
    raw: Any = None                     # the ASGI scope, WSGI environ or Django request


@dataclasses.dataclass
class Options:
    """The middlewares' options (see asgi.IdempotencyMiddleware)."""
    scope: Any
    key: Optional[Callable[[RequestInfo], str]] = None
    exclude: tuple = ()
    lock_ttl: Any = "5 minutes"
    retention: Any = "24 hours"
    wait: Any = "0"
    store: Callable[[int], bool] = lambda status: status < 500
    replay_headers: Callable[[int, Any], Mapping[str, str]] = lambda status, response: {}
    applies: Optional[Callable[[str, str], bool]] = None
    max_body: int = DEFAULT_MAX_BODY
    keep_headers: tuple = ()            # more headers of the first answer that replays carry
    # The statement form: the middleware answers a new key with this statement's result
    # (idempotency.execute_once), params(RequestInfo) its parameters, stored with `status`.
    statement: Optional[str] = None
    params: Optional[Callable[["RequestInfo"], Any]] = None
    status: int = 201

    def applies_to(self, method: str, path: str) -> bool:
        """applies(method, path); by default POST and PATCH (the methods that are not
        idempotent by themselves)."""
        if self.applies is not None:
            return bool(self.applies(method, path))
        return method.upper() in ("POST", "PATCH")

    def identify(self, req: RequestInfo):
        """(scope, key, request_hash); raises KeyMalformed, InvalidJson, ProgramLimitExceeded."""
        try:
            scope = self.scope(req) if callable(self.scope) else self.scope
        except KeyError as e:       # req.headers["x-account"] of a request without it
            raise _scope_missing() from e
        if scope is None:
            raise _scope_missing()
        key = (self.key(req) if self.key is not None
               else parse_idempotency_key(req.headers.get("idempotency-key")))
        return scope, key, request_fingerprint(req.body, req.headers.get("content-type"),
                                               self.exclude)

    def statement_params(self, req: "RequestInfo"):
        """The statement's parameters for the request (none without a params function)."""
        return list(self.params(req)) if self.params is not None else []

    def reserve_options(self):
        return {"lock_ttl": self.lock_ttl, "retention": self.retention, "wait": self.wait}


def options_from(scope, **kwargs) -> Options:
    if scope is None:
        raise TypeError("the idempotency middleware needs a scope (a string, or a callable of "
                        "the request)")
    if kwargs.get("statement") is None and (kwargs.get("params") is not None or
                                            kwargs.get("status") is not None):
        raise TypeError("the idempotency middleware's params= and status= go with statement=")
    return Options(scope=scope, **{k: v for k, v in kwargs.items() if v is not None})


@dataclasses.dataclass
class Context:
    """What the handler gets (request.state.idempotency, environ["idempotency"],
    request.idempotency): `conn` is the connection whose transaction holds the claim; the
    handler's writes through it commit with the stored answer."""
    conn: Any
    scope: str
    key: str
    attempt: int
    recovery_point: Optional[str]
    reservation: Any
