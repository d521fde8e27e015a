"""The Idempotency-Key header as Django middleware, on Django's own database connection: the
claim, the view's ORM writes and the stored answer commit in one transaction.

    # settings.py
    MIDDLEWARE = [..., "pg_idempotency.django.IdempotencyMiddleware"]
    IDEMPOTENCY = {"scope": lambda req: req.headers["x-account"], "lock_ttl": "30 seconds"}

    # a view: request.idempotency.key, .attempt; the ORM's writes are in the claim's transaction

IDEMPOTENCY takes the options of pg_idempotency.asgi.IdempotencyMiddleware (scope, key,
exclude, lock_ttl, retention, wait, store, replay_headers, applies, max_body, and the statement
form's statement, params, status) and `database`
(the alias, default "default"); the callables get a RequestInfo whose `raw` is the Django
request. Answers: those of the ASGI and WSGI middlewares.
"""
from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse

from .answers import BODY_TOO_LARGE, Outgoing, outgoing
from .django_session import DjangoSession
from .flow import BodyTooLarge, Flow, run
from .web import RequestInfo


def _send(answer, opts) -> HttpResponse:
    out = outgoing(answer, opts)
    if out.native is not None:
        return out.native                       # the view's own HttpResponse
    response = HttpResponse(out.body, status=out.status)
    del response["Content-Type"]                # only the answer's own, if it has one
    for name, value in out.headers:
        response[name] = value
    return response


def _buffered(streaming) -> HttpResponse:
    response = HttpResponse(b"".join(streaming.streaming_content), status=streaming.status_code)
    for name, value in streaming.items():
        response[name] = value
    return response


class IdempotencyMiddleware(Flow):
    def __init__(self, get_response):
        self.get_response = get_response
        config = dict(getattr(settings, "IDEMPOTENCY", {}))
        self.database = config.pop("database", "default")
        super().__init__(config.pop("scope", None), **config)

    def __call__(self, request):
        if not self.options.applies_to(request.method, request.path):
            return self.get_response(request)
        try:
            # the announced length first: a body over the limit is not read
            length = request.META.get("CONTENT_LENGTH") or ""
            if length.strip().isdigit():
                self.over_limit(int(length))
            self.over_limit(len(request.body))
        except BodyTooLarge:
            return _send(BODY_TOO_LARGE, self.options)

        def run_app(context):
            request.idempotency = context
            response = self.get_response(request)  # Django turns exceptions into a 500
            if response.streaming:
                response = _buffered(response)
            return Outgoing(response.status_code, response.items(), response.content, response)

        headers = {k.lower(): v for k, v in request.headers.items()}
        req = RequestInfo(request.method, request.path, headers, request.body, request)
        return _send(run(self.handle(req, DjangoSession(self.database), run_app)), self.options)


__all__ = ["IdempotencyMiddleware"]
