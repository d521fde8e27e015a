"""The middlewares' answers and what they store, against test/vectors/http_answers.json, which
the Node middleware's tests check too: the same bodies, word for word, in both clients. No
database: the answers given before a connection is taken come from the WSGI middleware (the
three middlewares share them: middleware.py), the 503 from a server nothing listens on."""
import base64
import io
import json
import pathlib

import pytest

from pg_idempotency.errors import KeyInProgress, KeyMismatch, KeyTooOld
from pg_idempotency.answers import (NOT_STORED, PROBLEM_TITLES, answer_for, outgoing, replay_of,
                                    stored_answer)
from pg_idempotency.wsgi import IdempotencyMiddleware

VECTORS = json.loads((pathlib.Path(__file__).resolve().parents[3] / "test" / "vectors" /
                      "http_answers.json").read_text(encoding="utf-8"))
UNREACHABLE = "host=127.0.0.1 port=1 connect_timeout=2"   # nothing listens on port 1


DOCUMENTATION = "https://api.example.com/docs/idempotency"
# How the middleware answers: (documentation, legacy_answers)
STYLES = [(None, False), (DOCUMENTATION, False), (None, True)]


def expect(status, headers, body, name, style=(None, False)):
    """The vectors' answer name: problem details, or with legacy_answers the old body."""
    documentation, legacy = style
    want = VECTORS["answers" if legacy else "problems"][name]
    assert status == want["status"], name
    assert body == want["body"], name
    for header, value in want["headers"].items():
        assert headers[header.lower()] == value, (name, header)
    assert headers.get("link") == (documentation and f'<{documentation}>; rel="describedby"')


def post(headers, body=b'{"item": "widget"}', style=(None, False)):
    def app(environ, start_response):
        start_response("599 Never", [])
        return [b""]
    mw = IdempotencyMiddleware(app, conninfo=UNREACHABLE, max_body=64,
                               scope=lambda req: req.headers["x-account"],
                               documentation=style[0], legacy_answers=style[1])
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/orders", "CONTENT_TYPE":
               "application/json", "CONTENT_LENGTH": str(len(body)),
               "wsgi.input": io.BytesIO(body)}
    environ.update({"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()})
    got = {}

    def start_response(status, response_headers, exc_info=None):
        got["status"] = int(status.split(" ", 1)[0])
        got["headers"] = {k.lower(): v for k, v in response_headers}
    text = b"".join(mw(environ, start_response))
    return got["status"], got["headers"], json.loads(text)


@pytest.mark.parametrize("style", STYLES, ids=["problem details", "documentation", "legacy"])
def test_the_answers_given_before_the_claim(style):
    key = {"Idempotency-Key": "k-1", "X-Account": "acct_1"}
    expect(*post({"X-Account": "acct_1"}, style=style), "idempotency_key_missing", style)
    expect(*post({**key, "Idempotency-Key": "has space"}, style=style),
           "idempotency_key_malformed", style)
    expect(*post({"Idempotency-Key": "k-1"}, style=style), "idempotency_scope_missing", style)
    expect(*post({**key, "X-Account": ""}, style=style), "idempotency_scope_empty", style)
    expect(*post({**key, "X-Account": "a" * 256}, style=style), "idempotency_scope_too_long",
           style)
    expect(*post(key, b'{"item": ', style=style), "invalid_json", style)
    expect(*post(key, json.dumps({"item": "x" * 100}).encode(), style=style), "body_too_large",
           style)
    expect(*post(key, style=style), "database_unavailable", style)   # nothing listens there


def test_the_problem_titles():
    assert PROBLEM_TITLES == VECTORS["titles"]


def test_the_reserve_outcomes_answers():
    holder = type("Reservation", (), {"locked_until": None})()   # inside its transaction
    for error, name in ((KeyInProgress("s", "k", holder, "in_progress"), "idempotency_key_in_use"),
                        (KeyMismatch("s", "k", None, "mismatch"), "idempotency_key_reused"),
                        (KeyTooOld("s", "k", None, "too_old"), "idempotency_key_too_old")):
        answer = answer_for(error)
        headers = {k.lower(): v for k, v in answer.headers.items()}
        expect(answer.status, headers, answer.body, name, (None, True))
        out = outgoing(answer)
        expect(out.status, {k.lower(): v for k, v in out.headers}, json.loads(out.body), name)
    expect(NOT_STORED.status, {}, NOT_STORED.body, "internal_error", (None, True))
    out = outgoing(NOT_STORED)
    expect(out.status, {k.lower(): v for k, v in out.headers}, json.loads(out.body),
           "internal_error")


def _bytes(x):
    return base64.b64decode(x["body_base64"]) if "body_base64" in x else x["body"].encode()


@pytest.mark.parametrize("case", VECTORS["stored"], ids=lambda c: str(c["stored"]["headers"]))
def test_what_is_stored_and_what_its_replay_sends(case):
    answer = case["answer"]
    assert stored_answer(_bytes(answer), list(answer["headers"].items()), ["ETag"]) == \
        case["stored"]
    replay = replay_of(case["stored"])
    assert dict(replay.headers) == case["replay"]["headers"]
    assert replay.body == _bytes(case["replay"])


def test_a_value_stored_before_the_mark_replays_as_json():
    replay = replay_of(VECTORS["legacy"]["stored"])
    assert dict(replay.headers) == VECTORS["legacy"]["replay"]["headers"]
    assert replay.body.decode() == VECTORS["legacy"]["replay"]["body"]
