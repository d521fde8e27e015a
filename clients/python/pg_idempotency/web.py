"""What the HTTP middlewares (asgi.py, wsgi.py, django.py) read from a request: the
Idempotency-Key header, the scope, the request's fingerprint, and their options; the Context
the application gets. Their answers are answers.py's, their decision flow flow.py's."""
from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any, Callable, Mapping, Optional

from .spec import DEFAULT_LOCK_TTL, DEFAULT_RETENTION, DEFAULT_WAIT, PROBLEMS
from .answers import SCOPE_MISSING, is_json_type
# (documented under pg_idempotency.web before answers.py held them)
from .answers import replay_of, stored_answer  # noqa: F401
from .errors import KeyMalformed
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
        raise KeyMalformed("idempotency_key_missing", PROBLEMS["idempotency_key_missing"][1])
    key: Optional[str] = raw.strip(" \t")
    if key.startswith('"'):
        key = _parse_sf_string(key)
    if key is not None and _UUID.fullmatch(key):
        return key.lower()
    if key is None or not _TOKEN.fullmatch(key):
        raise KeyMalformed("idempotency_key_malformed", PROBLEMS["idempotency_key_malformed"][1])
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


def request_fingerprint(body: bytes, content_type: Optional[str], exclude=()) -> bytes:
    """A JSON body (by its Content-Type) is fingerprinted as JSON (so 1.10 and 1.1, or another
    member order, are the same request; InvalidJson / ProgramLimitExceeded when it is not
    JSON); any other body by its raw bytes, as SQL's idempotency.fingerprint(bytea). An empty
    body is fingerprinted too, so a later request with a body never replays it."""
    if is_json_type(content_type):
        return fingerprint(body, exclude)
    return hashlib.sha256(body).digest()


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
    lock_ttl: Any = DEFAULT_LOCK_TTL
    retention: Any = DEFAULT_RETENTION
    wait: Any = DEFAULT_WAIT
    store: Callable[[int], bool] = lambda status: status < 500
    replay_headers: Callable[[int, Any], Mapping[str, str]] = lambda status, response: {}
    applies: Optional[Callable[[str, str], bool]] = None
    max_body: int = DEFAULT_MAX_BODY
    keep_headers: tuple = ()            # more headers of the first answer that replays carry
    # The middleware's own answers: the address of the service's idempotency documentation
    # (sent as Link: <address>; rel="describedby"), and the bodies of 0.3.0 instead of problem
    # details.
    documentation: Optional[str] = None
    legacy_answers: bool = False
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
