"""The server's settings, each declared once with its `OptionSpec`: `ServerConfig` (what the routes
and the engine loop obey) and `Listen` (where the HTTP server listens).

`radixflow serve` makes its flags from these declarations (`options.flags.add_option_flags`), so a
flag's default, help and error come from here; tests and the fleet build `ServerConfig` directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from radixflow.options.machine import HTTP_SHARE, MAX_THREADS, TOKENIZER_THREADS
from radixflow.options.sizes import Bytes
from radixflow.options.spec import option, sizes_in_bytes

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024  # a full 128k-token context as text is about 0.5 MB
# Bodies past this size have their tokenizing done in the long lane (`ServerState.offload`): a
# text this long tokenizes in tens of milliseconds.
LONG_BODY_BYTES = 64 * 1024
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
# The longest drain: a week is past any supervisor's patience, and far inside what a thread's wait
# takes (threading.TIMEOUT_MAX, about 9.2e9 s: 1e10 raised OverflowError at shutdown).
MAX_DRAIN_S = 7 * 24 * 3600
# The most accepted, unanswered requests: each holds its prompt and answer in memory (kilobytes
# at least), so a million is gigabytes; past it a count is a mistake (10**12), refused
MAX_PENDING = 1_000_000


@dataclass(frozen=True)
class ServerConfig:
    max_pending: int = option(
        256,
        f"accepted, unanswered requests before new ones get 429 (at most {MAX_PENDING})",
        int,
        low=1,
        high=MAX_PENDING,
        group="server",
        metavar="N",
    )
    default_max_tokens: int = option(
        256,
        "chat max_tokens when a request names none (capped to what fits beside its prompt in the model "
        "context and the KV cache)",
        int,
        low=1,
        group="server",
        metavar="N",
    )
    drain_s: float = option(
        30.0,
        "seconds to finish accepted requests on shutdown before they fail",
        float,
        low=0.0,
        high=MAX_DRAIN_S,
        group="server",
        metavar="S",
        flag="--drain-timeout",
    )
    max_body_bytes: int = option(
        DEFAULT_MAX_BODY_BYTES,
        "larger request bodies get 413 before they are parsed: bytes, or a size with a unit as "
        "--cache-memory takes it, e.g. 8MiB, 512KB, 2GiB (K, M, G: powers of 1000; Ki, Mi, Gi: of 1024); "
        "1KiB to 1TiB",
        Bytes,  # `ServerConfig(max_body_bytes="8MiB")` holds 8388608, as the flag does
        low=1024,
        high=2**40,
        group="server",
        metavar="SIZE",
    )
    tokenizer_threads: int = option(
        TOKENIZER_THREADS,
        "threads that tokenize prompts and build answers beside the event loop (default: the "
        f"server's thread plan, {TOKENIZER_THREADS} up to {(TOKENIZER_THREADS + 1) * HTTP_SHARE - 1} "
        f"CPUs; with --replicas, {TOKENIZER_THREADS})",
        int,
        low=1,
        high=MAX_THREADS,
        group="server",
        metavar="N",
        show_default=False,
    )
    long_text_threads: int = option(
        1,
        "threads that tokenize bodies over --long-body-bytes, apart from the others (a long text "
        "waits for long ones only)",
        int,
        low=1,
        high=MAX_THREADS,
        group="server",
        metavar="N",
    )
    long_body_bytes: int = option(
        LONG_BODY_BYTES,
        "request bodies over this size are tokenized in the long-text lane: bytes, or a size with "
        "a unit as --max-body-bytes takes it, e.g. 64KiB, 1MB; 1 byte to 1TiB",
        Bytes,  # `ServerConfig(long_body_bytes="64KiB")` holds 65536, as the flag does
        low=1,
        high=2**40,
        group="server",
        metavar="SIZE",
    )

    def __post_init__(self) -> None:
        sizes_in_bytes(self)  # every door's values checked, a size's text held in bytes


@dataclass(frozen=True)
class Listen:
    host: str = option("127.0.0.1", "address to listen on", str, group="server", metavar="HOST")
    port: int = option(8000, "port to listen on (0: any free port)", int, low=0, high=65535, group="server")
    log_level: str = option("info", "server log level", str, choices=lambda: list(LOG_LEVELS), group="server")
