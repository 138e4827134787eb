"""The FastAPI application: routes, error handlers, and the engine loop's life with the server's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute, APIRouter
from starlette.requests import Request as HttpRequest

from radixflow.package import package_version
from radixflow.server import chat, completions, score, tokenize
from radixflow.server.errors import install_handlers
from radixflow.server.limits import BodyLimit, LongBodyLane
from radixflow.server.loop import ENGINE_GRACE_S, STUCK
from radixflow.server.state import ServerState
from radixflow.server.submission import ClientGone


def create_app(state: ServerState) -> FastAPI:
    """An app serving ``state``'s model; its engine loop starts and stops with the app."""
    # No 307 to the path without a trailing slash: a client that does not follow it got an empty
    # answer, and behind a TLS proxy its Location is an http:// URL. OpenAI answers a 404 naming
    # the path; ours names the route meant too (`errors.routing_message`).
    app = FastAPI(title="RadixFlow", lifespan=_lifespan(state), redirect_slashes=False)
    app.state.radixflow = state
    lane = LongBodyLane(state.config.long_body_bytes, answering=state.answering)
    app.add_middleware(BodyLimit, max_bytes=state.config.max_body_bytes, lane=lane)
    install_handlers(app)
    app.add_exception_handler(ClientGone, _client_gone)
    for module in (completions, chat, score, tokenize):
        answer_head_as_get(module.router)
        app.include_router(module.router)
    _add_model_routes(app, state)
    _add_status_routes(app, state)
    answer_head_as_get(app.router)
    return app


def answer_head_as_get(router: APIRouter) -> None:
    """Each GET route of ``router`` answers HEAD too, as HTTP asks (a load balancer probes
    ``HEAD /health``; FastAPI's GET routes answered it 405): a twin route on the same endpoint,
    left out of the OpenAPI schema (one operation id per function). The server sends the
    headers, not the body. Once per route: a module's router outlives the app it joined."""
    routes = [r for r in router.routes if isinstance(r, APIRoute)]
    twinned = {r.path for r in routes if "HEAD" in r.methods}
    for route in routes:
        if "GET" in route.methods and route.path not in twinned:
            router.add_api_route(
                route.path, route.endpoint, methods=["HEAD"], include_in_schema=False, name=route.name
            )


async def _client_gone(_: HttpRequest, __: Exception) -> Response:
    """A client that left before its prompts were ready: nobody reads an answer."""
    return Response(status_code=499)


def _lifespan(state: ServerState) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: ``state``'s engine loop runs while the app does."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state.loop.start()
        try:
            yield
        finally:
            # Also when the app's own client fails (run-batch): the engine thread ran on otherwise.
            # Normally `Server.shutdown` has begun draining already; this covers other ASGI servers.
            # Bounded: an engine thread stuck in its round is left behind, its requests answered.
            state.loop.shutdown(state.config.drain_s)
            if not await asyncio.to_thread(state.loop.join, state.config.drain_s + ENGINE_GRACE_S):
                state.loop.abandon(STUCK)
            state.close()

    return lifespan


def _add_model_routes(app: FastAPI, state: ServerState) -> None:
    """``/v1/models`` and ``/v1/models/{model}``: the one model ``state`` serves."""
    card = {
        "id": state.model_name,
        "object": "model",
        "created": 0,
        "owned_by": "radixflow",
        "max_model_len": state.longest,
    }

    @app.get("/v1/models")
    async def models() -> dict[str, object]:
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{model:path}")  # the openai client's models.retrieve; an id may hold "/"
    async def model(model: str) -> dict[str, object]:
        if not model:  # "/v1/models/": the list, as the redirect to it gave before this route
            return await models()
        state.check_model(model)
        return card


def _add_status_routes(app: FastAPI, state: ServerState) -> None:
    """``/health``, ``/version`` and ``/metrics``."""

    @app.get("/health")
    async def health() -> Response:
        if state.loop.accepting:
            stalled = state.loop.stalled  # alive, with work waiting, and no round for long
            return JSONResponse({"status": stalled or "ok"}, status_code=503 if stalled else 200)
        status = state.loop.failure or ("draining" if state.loop.alive else "stopped")
        return JSONResponse({"status": status}, status_code=503)

    @app.get("/version")
    async def server_version() -> dict[str, str]:
        return {"version": package_version()}  # as vLLM's route

    @app.get("/metrics")
    async def metrics(http: HttpRequest) -> Response:
        body, content_type = state.metrics.render(http.headers.get("accept"))
        return Response(body, media_type=content_type)
