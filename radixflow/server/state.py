"""What the routes share: the model, its tokenizer, the engine loop, metrics, and `submit`, which
hands a request's prompts to the engine loop as a `server.submission.Submission`."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar

from radixflow.engine.engine import Engine
from radixflow.engine.runner import ModelInfo
from radixflow.generation.params import SamplingParams
from radixflow.generation.setup import LoadedModel
from radixflow.generation.tokenizer import TextTokenizer
from radixflow.generation.tracker import RequestTracker
from radixflow.problems import Problem, ProblemError
from radixflow.scheduler.request import Request
from radixflow.server.config import DEFAULT_MAX_BODY_BYTES as DEFAULT_MAX_BODY_BYTES  # re-exported
from radixflow.server.config import ServerConfig
from radixflow.server.errors import ApiError
from radixflow.server.events import NotAccepting, QueueFull, Sink
from radixflow.server.limits import BODY_BYTES, Answering
from radixflow.server.loop import EngineLoop
from radixflow.server.metrics import ServerMetrics
from radixflow.server.submission import Submission

T = TypeVar("T")


class ServingLoop(Protocol):
    """What the routes drive: one `EngineLoop` in this process, or replicas elsewhere (a fleet)."""

    @property
    def failure(self) -> str | None:
        """Why it serves nothing (its engine loop died, or every replica's did), if so."""
        ...

    def start(self) -> None: ...

    @property
    def alive(self) -> bool: ...

    @property
    def accepting(self) -> bool: ...

    @property
    def stalled(self) -> str | None:
        """Why it looks stuck though alive (work waits, no progress for long), if so."""
        ...

    def submit(self, items: list[tuple[Request, RequestTracker]], sink: Sink, stream: bool) -> None:
        """Accept all or none (`QueueFull`, `NotAccepting`); events go to ``sink``."""
        ...

    def check_open(self, adding: int = 1, reading: int = 0) -> None:
        """Raise what `submit` would for ``adding`` more prompts now (`QueueFull`, `NotAccepting`),
        ``reading`` others, still being tokenized, counted as queued."""
        ...

    def abort(self, request_ids: list[str]) -> None:
        """Cancel these requests (their client went away)."""
        ...

    def shutdown(self, drain_s: float) -> None:
        """Stop accepting; fail what has not finished after ``drain_s`` seconds. Returns at once."""
        ...

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every accepted request is answered after `shutdown` (at most ``timeout``
        seconds); True once that is so."""
        ...

    def abandon(self, message: str) -> None:
        """Answer every accepted, unanswered request with a 503 carrying ``message`` now: what
        runs them is stuck past the drain (`join` returns then)."""
        ...


@dataclass(frozen=True)
class Backend:
    """What the routes need of the model, whoever runs it."""

    name: str  # the model id the server reports
    tokenizer: TextTokenizer | None
    info: ModelInfo
    problem: Callable[[Request], Problem | None]  # pure: why a request can never run here
    room: Callable[[int], int]  # pure: most tokens a prompt of this many tokens may generate here
    make_loop: Callable[[ServerMetrics], ServingLoop]


def local_backend(model: LoadedModel, engine: Engine, max_pending: int) -> Backend:
    """One engine in this process, stepped by its own thread."""
    return Backend(
        model.name,
        model.tokenizer,
        engine.runner.model,
        engine.problem,  # a pure check, safe from the event loop
        engine.room,
        lambda metrics: EngineLoop(engine, metrics, max_pending),
    )


class ServerState:
    def __init__(self, backend: Backend, config: ServerConfig) -> None:
        self.model_name, self.config = backend.name, config
        # prompts: a text too long for the context is refused before it is tokenized; /tokenize
        # counts a text of any length
        self.unbounded_tokenizer = backend.tokenizer
        self.tokenizer = backend.tokenizer.limited(backend.info.max_context) if backend.tokenizer else None
        self.engine_info = backend.info
        self._problem, self._room = backend.problem, backend.room
        self.metrics = ServerMetrics()
        self.loop = backend.make_loop(self.metrics)
        self.answering = Answering()  # long bodies make way for these (`LongBodyLane`)
        self._serial = itertools.count()
        self._reading = 0  # prompts past `admitting` and not yet submitted or refused (event loop only)
        self._run_id = uuid.uuid4().hex[:8]
        self._workers = ThreadPoolExecutor(config.tokenizer_threads, thread_name_prefix="radixflow-tokenizer")
        self._long_lane = ThreadPoolExecutor(config.long_text_threads, thread_name_prefix="radixflow-long")

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a tokenizer thread, so the event loop keeps answering other requests
        meanwhile: tokenizing, rendering a chat template or detokenizing an echoed prompt takes
        seconds for a long one. The tokenizer releases the GIL while it works.

        A request whose body is over ``long_body_bytes`` gets a thread of the long lane: however
        many long texts arrive, they queue behind each other, never ahead of a short prompt."""
        long = BODY_BYTES.get() > self.config.long_body_bytes
        pool = self._long_lane if long else self._workers
        return await asyncio.get_running_loop().run_in_executor(pool, partial(fn, *args))

    def close(self) -> None:
        """Stop the tokenizer threads (the server is done)."""
        self._workers.shutdown(wait=False, cancel_futures=True)
        self._long_lane.shutdown(wait=False, cancel_futures=True)

    @property
    def context(self) -> int:
        return self.engine_info.max_context

    @property
    def longest(self) -> int:
        """The most tokens, prompt and output together, one request may hold here: the model
        context, or less where the KV cache holds less (what clients read from ``max_model_len``;
        vLLM refuses to start where its cache holds less than its context)."""
        return 1 + self._room(1)

    def problem(self, request: Request) -> Problem | None:
        """Why ``request`` can never run here; None when it can. Pure, as `Backend.problem`."""
        return self._problem(request)

    def prompt_tokenizer(self, params: SamplingParams) -> TextTokenizer:
        """The tokenizer of a request's prompts: the one refusing a text too long for the context
        untokenized, unless the request truncates its prompts (``truncate_prompt_tokens``: the
        end of a text of any length runs, as offline)."""
        if params.truncate_prompt_tokens is None:
            return self.tokenizer
        return self.unbounded_tokenizer

    def check_model(self, name: str | None) -> None:
        if name is not None and name != self.model_name:
            raise ApiError(  # 404, as OpenAI and vLLM answer it (the openai client's NotFoundError)
                404,
                f"model {name!r} does not exist; this server serves {self.model_name!r}",
                "model",
                "model_not_found",
            )

    def requests(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        namespace: str,
        fit: bool = False,
        item: str = "prompt",
    ) -> list[tuple[Request, RequestTracker]]:
        """Engine requests for these prompts, each prompt's ``params.n`` choices one after another
        (item ``prompt * n + choice``); ApiError 400 naming the first prompt that cannot run.
        ``fit``: ``params.max_tokens`` is a default the client never sent, so each prompt's is
        capped to what fits here (`Backend.room`; at least 1, so a prompt too long for the cache
        is refused as the prompt). Safe on a tokenizer thread, where it runs: the checks cost a
        pass over every prompt token. ``item``: what an error calls prompt ``i`` (a scoring
        request's prompts are its candidates)."""
        if len(prompts) * params.n > self.config.max_pending:
            asked = _asked(len(prompts), params.n, item)
            raise ApiError(
                400,
                f"{asked} in one request; the server queues {self.config.max_pending}",
                "n" if params.n > 1 else "prompt",  # n is what a chat request can lower
            )
        problem = params.context_problem(self.context)
        if problem is not None:
            raise ApiError.from_problem(problem)
        items = []
        namespace = compact_namespace(namespace)
        try:
            params = params.tokenized(partial(self.tokenizer.encode, add_special_tokens=False))
        except ProblemError as e:  # a choice or bad word the tokenizer refuses
            raise ApiError.from_problem(e.problem) from None
        for i, whole in enumerate(prompts):
            prompt = params.truncated(whole, self.context)
            room = self._room(len(prompt))
            sampling = params.fitted(room) if fit else params
            reqs = [
                Request(f"{self._run_id}-{next(self._serial)}", tuple(prompt), namespace, sampling=p)
                for p in sampling.choices()
            ]
            # a min_tokens past the room a default max_tokens is capped to is refused, not lowered
            # behind the caller's back; then the first choice's check (a pass over the prompt)
            # stands for all: the choices differ only in their seeds
            problem = (params.room_problem(room) if fit else None) or self._problem(reqs[0])
            if problem is not None:
                named = len(prompts) > 1 or item != "prompt"
                raise ApiError.from_problem(problem, f"{item} {i}" if named else None)
            items.extend((req, RequestTracker(req, self.tokenizer, c)) for c, req in enumerate(reqs))
        return items

    @contextmanager
    def admitting(self, adding: int = 1) -> Iterator[None]:
        """The 429 or 503 a request for the engine gets now, before anything is tokenized, when
        its loop would refuse its ``adding`` prompts (each prompt's choices counted; the queue
        full, or shutting down), the prompts other requests are still tokenizing counted as
        queued; inside, this request's count as such until it is submitted or refused. A long
        prompt is not tokenized, behind others in its lane, only to be refused, nor is a burst
        tokenized whole while the queue still looks empty. On the event loop only (the count is
        its own). `submit` checks again."""
        # more than the queue ever holds is the client's mistake, the 400 `requests` says it with:
        # here it is refused only as one prompt would be
        counted = adding if adding <= self.config.max_pending else 1
        with self._refusals():
            self.loop.check_open(counted, self._reading)
        self._reading += counted
        self.metrics.on_tokenizing(self._reading)
        try:
            yield
        finally:
            self._reading -= counted
            self.metrics.on_tokenizing(self._reading)

    def submit(self, items: list[tuple[Request, RequestTracker]], stream: bool) -> Submission:
        with self._refusals():
            return Submission(self.loop, items, stream, self.answering)

    @contextmanager
    def _refusals(self) -> Iterator[None]:
        """The loop's refusals as the client's answers (429, 503), each counted by its reason."""
        try:
            yield
        except QueueFull as e:
            self.metrics.on_rejected("queue_full")
            raise ApiError(429, str(e)) from None  # its code, as every refusal's: `STATUS_CODES`
        except NotAccepting as e:
            self.metrics.on_rejected("not_accepting")
            raise ApiError(503, str(e)) from None


def _asked(prompts: int, n: int, item: str) -> str:
    """What a request asks of the queue, said as the client sent it."""
    if n == 1:
        return f"{prompts} {item}s"
    return f"n = {n} choices" if prompts == 1 else f"{prompts} {item}s times n = {n}"


MAX_NAMESPACE_CHARS = 64


def compact_namespace(namespace: str) -> str:
    """``namespace``, or past ``MAX_NAMESPACE_CHARS`` its SHA-256 (71 characters: no namespace
    kept as it is reads like one): the cache keeps a namespace's name for as long as it holds its
    blocks, and a client's cache salt may be megabytes long. Distinct salts keep distinct
    namespaces (no SHA-256 collision is known), so none shares a prefix with another."""
    if len(namespace) <= MAX_NAMESPACE_CHARS:
        return namespace
    digest = hashlib.sha256(namespace.encode("utf-8", "surrogatepass")).hexdigest()
    return f"sha256:{digest}"
