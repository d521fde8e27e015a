"""The HTTP answers of the middlewares (asgi.py, wsgi.py, django.py), built here and nowhere
else: the error answers (RFC 9457 problem details, or with the legacy_answers option the
{"error", "message"} body of 0.3.0, word for word those of the other clients' middlewares:
test/vectors/http_answers.json), the form an answer is stored in, its replay, and the
Outgoing an adapter sends."""
from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any, Mapping, Optional

from .errors import (InvalidJson, KeyInProgress, KeyMalformed, KeyMismatch, KeyTooOld,
                     OutcomeError, ProgramLimitExceeded)
from .spec import PROBLEM_TITLES, PROBLEM_TYPE_BASE, PROBLEMS


def is_json_type(content_type: Optional[str]) -> bool:
    """application/json, or any */*+json media type."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith(("application/", "text/"))
                                           and media.endswith("+json"))


# PROBLEM_TYPE_BASE, PROBLEM_TITLES and PROBLEMS (the status and detail of the answers that are
# always the same) are generated from test/vectors/http_answers.json: spec.py.


@dataclasses.dataclass(frozen=True)
class Answer:
    """One of the middleware's own answers: status, the {"error": code, "message": ...} of its
    legacy body, extra headers. Sent as problem details (problem())."""
    status: int
    body: Any
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def encoded(self) -> bytes:
        """The legacy body's bytes."""
        return encode_json(self.body)

    def problem(self) -> dict:
        """The RFC 9457 problem details: type, title, status, detail, and the code as the
        extension member "error"."""
        code = self.body["error"]
        return {"type": PROBLEM_TYPE_BASE + code,
                "title": PROBLEM_TITLES.get(code, "Request failed"), "status": self.status,
                "detail": self.body["message"], "error": code}


def encode_json(value) -> bytes:
    """JSON as JSON.stringify writes it (no spaces, UTF-8); None is an empty body."""
    if value is None:
        return b""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _problem(status, error, message, headers=None) -> Answer:
    return Answer(status, {"error": error, "message": message}, headers or {})


def _fixed(code, headers=None) -> Answer:
    """The answer of `code` as the spec gives it (PROBLEMS), with `headers`."""
    status, detail = PROBLEMS[code]
    return _problem(status, code, detail, headers)


def answer_for(err: BaseException) -> Optional[Answer]:
    """The HTTP answer for an error of the helpers that has one (a malformed key or scope, the
    reserve outcomes in_progress / mismatch / too_old, a request body the fingerprint refused),
    or None."""
    if isinstance(err, KeyMalformed):
        return _problem(400, err.code, err.message)
    if isinstance(err, KeyInProgress):
        return _fixed("idempotency_key_in_use", {"Retry-After": str(err.retry_after)})
    if isinstance(err, KeyMismatch):
        return _fixed("idempotency_key_reused")
    if isinstance(err, KeyTooOld):
        return _fixed("idempotency_key_too_old")
    if isinstance(err, OutcomeError):
        return _problem(err.http_status, "idempotency_key_conflict", err.message)
    if isinstance(err, (InvalidJson, ProgramLimitExceeded)) and err.pgerror is None:
        # the request's body, refused by the client-side fingerprint (the server's own 54000,
        # say a response over 10 MB, is not the client's fault: no answer here)
        return INVALID_JSON
    return None


DATABASE_UNAVAILABLE = _fixed("database_unavailable", {"Retry-After": "1"})
INVALID_JSON = _fixed("invalid_json")
SCOPE_MISSING = _fixed("idempotency_scope_missing")
NOT_STORED = _fixed("internal_error")
BODY_TOO_LARGE = _fixed("body_too_large")


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


@dataclasses.dataclass
class Outgoing:
    """An answer as an adapter sends it: the status, (name, value) header pairs, the body's
    bytes, and for the application's own answer `native`, what the adapter needs to send it as
    the application gave it (the ASGI start message, the WSGI status line, Django's
    HttpResponse)."""
    status: int
    headers: Any
    body: bytes
    native: Any = None


def outgoing(answer, opts=None) -> Outgoing:
    """What the flow returned, as an Outgoing: one of the middleware's own answers made one, as
    problem details (the legacy body with opts.legacy_answers; Link: <opts.documentation>;
    rel="describedby" when it is set); a replay or the application's answer as they are."""
    if isinstance(answer, Answer):
        legacy = getattr(opts, "legacy_answers", False)
        documentation = getattr(opts, "documentation", None)
        body = answer.encoded() if legacy else encode_json(answer.problem())
        headers = [("Content-Type", "application/json" if legacy else "application/problem+json"),
                   ("Content-Length", str(len(body)))]
        if documentation:
            headers.append(("Link", f'<{documentation}>; rel="describedby"'))
        return Outgoing(answer.status,
                        [*headers, *((k, str(v)) for k, v in answer.headers.items())], body)
    return answer



# The reserve outcomes answered without running anything.
_OUTCOMES = {"in_progress": KeyInProgress, "mismatch": KeyMismatch, "too_old": KeyTooOld}


def outcome_answer(scope, key, reservation) -> Optional[Answer]:
    """The answer to an outcome that runs nothing (in_progress, mismatch, too_old), or None for
    'new' and 'replay'."""
    error = _OUTCOMES.get(reservation.outcome)
    if error is None:
        return None
    return answer_for(error(scope, key, reservation, reservation.outcome))


def stored_response(opts, reservation, replayed: bool) -> Outgoing:
    """The answer of a stored response: its status, stored headers and body, Content-Length;
    a replay (replayed) adds Idempotent-Replayed: true and replay_headers' (headers_of_replay)."""
    replay = replay_of(reservation.response)
    if replayed:
        headers = headers_of_replay(opts, reservation.status_code, replay)
    else:
        headers = {**replay.headers, "content-length": str(len(replay.body))}
    return Outgoing(reservation.status_code, list(headers.items()), replay.body)
