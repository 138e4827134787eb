"""Running the app under uvicorn, with a shutdown that drains the engine before connections close."""

from __future__ import annotations

import socket

import uvicorn

from radixflow.generation.setup import LoadedModel
from radixflow.server.app import create_app
from radixflow.server.state import ServerConfig, ServerState

ROUND_HISTORY = 256  # rounds the engine keeps; the metrics aggregate every round as it happens


class Server(uvicorn.Server):
    """uvicorn's server, except that shutting down first tells the engine loop to drain: accepted
    requests get ``drain_s`` to finish, then fail with a 503, while their connections are still
    open to carry that answer."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.state.loop.shutdown(self.state.config.drain_s)
        await super().shutdown(sockets)


def build_server(
    model: LoadedModel,
    config: ServerConfig,
    host: str,
    port: int,
    log_level: str = "info",
) -> Server:
    engine = model.engine(round_history=ROUND_HISTORY)
    state = ServerState(model, engine, config)
    uv_config = uvicorn.Config(
        create_app(state),
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=int(config.drain_s) + 5,  # past the drain: answers are on their way
        access_log=log_level == "debug",
    )
    return Server(uv_config, state)
