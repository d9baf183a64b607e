"""The FastAPI application: routes, the gate (API key, draining) and error handlers.

Every error leaves in the OpenAI shape; an unexpected exception becomes a generic 500 naming a
request id, and the server log has that id with the traceback (`api_errors.internal_error`).
"""
from __future__ import annotations

import hmac
import re
import time
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from moeserve import __version__
from moeserve.errors import EngineDeadError
from moeserve.server.api_errors import ApiError, clip, internal_error, public_reason, unavailable
from moeserve.server.chat import create_chat_completion
from moeserve.server.common import ServerState, check_model
from moeserve.server.completions import create_completion
from moeserve.server.engine_client import SHUTTING_DOWN
from moeserve.server.kv_health import kv_quarantine
from moeserve.server.tokenize_routes import detokenize, tokenize, tokenizer_info

_OPEN_PATHS = ("/health",)  # answered without an API key
_CREDENTIALS = re.compile(rb"([^ \t]+)[ \t]+(.*)", re.DOTALL)  # Authorization: <scheme> <token>


class Gate:
    """Pure ASGI middleware (it must not wrap `receive`, which disconnect detection reads):
    401 without the right API key, 503 for new requests once the server is draining, and the count
    of every response by route and status (`moeserve_http_responses_total`)."""

    def __init__(self, app: ASGIApp, state: ServerState, routes: set[str]):
        self.app = app
        self.state = state
        self.routes = routes  # fixed paths; anything else is labelled by its family or "other"
        key = state.config.api_key
        self.expected = key.encode() if key else None
        self.origins = frozenset(o.lower().rstrip("/") for o in state.config.allowed_origins)  # as _refused_origin compares

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        status = 500  # what the client sees if nothing was sent
        started = False

        async def counted(message: Any) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
            await send(message)

        try:
            error = _refused_coding(scope)
            if error is None and self.expected is not None and path not in _OPEN_PATHS:
                error = self._refused_key(scope)
            if error is None and path in self.routes:  # an unknown route is a 404 whatever it was sent
                error = _refused_media_type(scope) or _refused_origin(scope, self.origins)
            if error is None and self.state.draining and path not in ("/metrics",):
                error = unavailable(self._draining_message())
            if error is None:
                return await self.app(scope, receive, counted)
            await error.response()(scope, receive, counted)
        except Exception as e:  # re-raised by starlette once its 500 handler answered and logged it
            if not started:
                await internal_error(e, f"{scope.get('method')} {path}").response()(scope, receive, counted)
        finally:
            self.state.metrics.http.labels(route=self._route_label(path), status=str(status)).inc()

    def _draining_message(self) -> str:
        """Why new requests are refused while draining, with the engine's own reason where it died first
        (a lost host or rank stops the launch, and its SIGTERM starts the drain): a client polling /health
        learns what happened, not only that the server is going."""
        reason = self.state.client.dead_reason
        if reason is None or reason == SHUTTING_DOWN:
            return SHUTTING_DOWN
        return f"{SHUTTING_DOWN}: the engine is not available: {reason}"

    def _route_label(self, path: str) -> str:
        """A bounded label set: clients choose paths, and every distinct label is a series kept forever."""
        if path in self.routes:
            return path
        return "/v1/models/{model}" if path.startswith("/v1/models/") else "other"

    def _refused_key(self, scope: Scope) -> ApiError | None:
        if _count_header(scope, b"authorization") > 1:
            # which to believe? servers and proxies disagree (the last one won here), so neither
            return ApiError(400, "more than one Authorization header: send one", code="invalid_api_key")
        if not self._authorized(scope):
            return ApiError(401, "missing or incorrect API key: send 'Authorization: Bearer <key>'", code="invalid_api_key")
        return None

    def _authorized(self, scope: Scope) -> bool:
        given = b""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                given = value
        # RFC 9110: the scheme is case-insensitive and one or more spaces or tabs end it; the key is
        # compared in constant time
        credentials = _CREDENTIALS.fullmatch(given)
        scheme, token = credentials.groups() if credentials else (b"", given)
        return hmac.compare_digest(token, self.expected) and scheme.lower() == b"bearer"


def _count_header(scope: Scope, name: bytes) -> int:
    return sum(1 for key, _ in scope.get("headers", []) if key == name)


def _codings(scope: Scope, name: bytes) -> list[str]:
    return [c.strip().lower() for key, value in scope.get("headers", []) if key == name
            for c in value.decode("latin-1").split(",") if c.strip()]


def _refused_coding(scope: Scope) -> ApiError | None:
    """A body in a coding we do not decode: read as it came, `Transfer-Encoding: gzip, chunked` with a
    plain JSON body was served as if it were uncompressed. RFC 9112 6.1: a transfer coding the server
    does not understand is a 501 (h11, the fallback stack, refuses it itself: a 400 there); RFC 9110
    8.4: an unsupported content coding is a 415."""
    transfer = [c for c in _codings(scope, b"transfer-encoding") if c != "chunked"]
    if transfer:
        return ApiError(501, f"Transfer-Encoding '{clip(transfer[0])}' is not supported: send the body as is or chunked",
                        code="unsupported_transfer_encoding")
    content = [c for c in _codings(scope, b"content-encoding") if c != "identity"]
    if content:
        return ApiError(415, f"Content-Encoding '{clip(content[0])}' is not supported: send the body uncompressed",
                        code="unsupported_content_encoding")
    return None


def _refused_media_type(scope: Scope) -> ApiError | None:
    """A POST whose Content-Type says it is not JSON (415). Read as JSON whatever it said, a
    `text/plain` or form body was served: the content types a web page may POST cross-origin without
    a preflight, so any page the user visited could make a server without --api-key generate or
    start and stop routing traces (FastAPI refuses them for its JSON bodies since 0.65.2, and so
    vLLM does). A body with no Content-Type is read as JSON, as FastAPI does."""
    if scope.get("method") != "POST":
        return None
    given = [v for k, v in scope.get("headers", []) if k == b"content-type"]
    if not given:
        return None
    media = given[-1].decode("latin-1").split(";", 1)[0].strip().lower()
    if len(given) == 1 and (media == "application/json" or (media.startswith("application/") and media.endswith("+json"))):
        return None
    return ApiError(415, f"Content-Type '{clip(media)}' is not supported: send the body as JSON with "
                         "'Content-Type: application/json'", code="unsupported_media_type")


def _refused_origin(scope: Scope, allowed: frozenset[str]) -> ApiError | None:
    """A POST a web page sent from an origin --allowed-origins does not name (403). Browsers send Origin
    with every cross-origin POST, and a page may POST a body with no Content-Type (a Blob) without a
    preflight, which is read as JSON: without this a page the user visited could make a server without
    --api-key generate or start and stop routing traces. CORS alone only hides the response from the
    page; the request would still run. Clients that are not browsers (curl, SDKs, routers) send no Origin."""
    if scope.get("method") != "POST" or "*" in allowed:
        return None
    given = [v.decode("latin-1").strip() for k, v in scope.get("headers", []) if k == b"origin"]
    if not given or all(o.lower().rstrip("/") in allowed for o in given):  # allowed: lower case, no trailing /
        return None
    return ApiError(403, f"a request from the web page at origin '{clip(given[0])}' is not allowed: start the server "
                         "with --allowed-origins naming it", code="origin_not_allowed")


# RFC 9110 9.1: a general-purpose server supports HEAD wherever it supports GET (uvicorn sends the
# head without the body); FastAPI's @app.get routes answered HEAD 405 (vLLM's do too)
READ_METHODS = ["GET", "HEAD"]


def _routes(app: FastAPI, state: ServerState) -> None:
    started = int(time.time())

    @app.api_route("/health", methods=READ_METHODS)
    async def health() -> Any:
        if not state.client.healthy:
            return unavailable(f"the engine is not available: {state.client.dead_reason or 'no heartbeat'}").response()
        body: dict[str, Any] = {"status": "ok"}
        kv = kv_quarantine(state.client.stats)
        if kv is not None:  # held blocks: 200 still, "degraded" past a bound (kv_health.py)
            body["kv_quarantine"], reason = kv
            if reason is not None:
                body.update(status="degraded", reason=reason)
        return JSONResponse(body)

    @app.api_route("/version", methods=READ_METHODS)
    async def version() -> Any:
        return {"version": __version__}

    cards = [{"id": name, "object": "model", "created": started, "owned_by": "moeserve", "root": state.model_name,
              "max_model_len": state.max_model_len} for name in state.model_names]

    @app.api_route("/v1/models", methods=READ_METHODS)
    @app.api_route("/v1/models/", methods=READ_METHODS)  # the list too, not a lookup of the model named ""
    async def models() -> Any:
        return {"object": "list", "data": cards}

    @app.api_route("/v1/models/{model_id:path}", methods=READ_METHODS)
    async def model(model_id: str) -> Any:
        check_model(state, model_id)
        return cards[state.model_names.index(model_id)] if model_id in state.model_names else cards[0]

    @app.api_route("/metrics", methods=READ_METHODS)
    async def metrics() -> Any:
        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    for action in ("start", "stop", "dump"):
        app.add_api_route(f"/v1/trace/{action}", _trace_route(state, action), methods=["POST"])

    app.add_api_route("/v1/completions", create_completion, methods=["POST"])
    app.add_api_route("/v1/chat/completions", create_chat_completion, methods=["POST"])
    app.add_api_route("/tokenize", tokenize, methods=["POST"])
    app.add_api_route("/detokenize", detokenize, methods=["POST"])
    app.add_api_route("/tokenizer_info", tokenizer_info, methods=READ_METHODS)


def _trace_route(state: ServerState, action: str):
    """POST /v1/trace/{start,stop,dump}: control the routing recorder (files go to --record-trace-dir;
    without one, what it records could never be written, so every action is refused)."""

    async def route() -> Any:
        if state.client.config.placement_runtime.record_trace_dir is None:
            raise ApiError(400, "routing traces need a directory to be written to: start the server with "
                                "--record-trace-dir DIR (or record_trace_dir: DIR in its --config file)",
                           code="trace_dir_not_configured")
        try:
            result = await state.client.trace_control(action)
        except EngineDeadError as e:
            raise unavailable(f"the engine is not available: {e}")
        if not result.ok:
            raise ApiError(400, public_reason(result.message), code="recorder_error")
        return {"object": "trace_control", "action": action, "path": result.path}

    return route


def _error_handlers(app: FastAPI, state: ServerState) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> Any:
        return e.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> Any:
        message = {404: "no such route; see /v1/models, /v1/completions, /v1/chat/completions, /tokenize, /detokenize", 405: "method not allowed on this route"}
        # starlette's headers stay (a 405's Allow names the methods the route takes)
        return ApiError(e.status_code, message.get(e.status_code, "request refused"), code=str(e.status_code),
                        headers=e.headers).response()

    @app.exception_handler(Exception)
    async def unexpected(request: Request, e: Exception) -> Any:
        return internal_error(e, f"{request.method} {request.url.path}").response()


def build_app(state: ServerState) -> Any:
    app = FastAPI(title="moeserve", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = state
    _routes(app, state)
    _error_handlers(app, state)
    fixed = {route.path for route in app.routes if "{" not in getattr(route, "path", "{")}
    gated = Gate(app, state, fixed)
    origins = state.config.allowed_origins
    if not origins:
        return gated
    from starlette.middleware.cors import CORSMiddleware

    # outside the gate: a browser's preflight carries no Authorization header, so it is answered
    # before the key check; every other response, a 401 included, gets the CORS headers, so a web
    # page can read the error. Bearer keys, not cookies: no credentials mode.
    return CORSMiddleware(gated, allow_origins=list(origins), allow_methods=["GET", "POST"], allow_headers=["*"],
                          expose_headers=["Retry-After"], max_age=600)
