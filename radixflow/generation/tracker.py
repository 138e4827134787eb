"""Following one engine request from the outside: its text, stop strings, stream deltas, result.

A tracker only reads its `Request` (between engine steps, on the thread that steps the engine);
ending the request when a stop string appears is the caller's move (`Engine.stop`), so the engine
stays the only writer of its requests.
"""

from __future__ import annotations

from functools import partial

from radixflow.engine.engine import Engine
from radixflow.engine.interrupts import HeldInterrupt
from radixflow.generation.detokenize import Decoder, IncrementalDetokenizer, StopStrings, token_texts
from radixflow.generation.outputs import GenerationOutput, PromptTokenLogprobs, StreamDelta, TokenLogprob
from radixflow.scheduler.request import Request


class RequestTracker:
    """``choice``: which of its prompt's ``n`` choices the request is (its output says so)."""

    def __init__(self, request: Request, tokenizer: Decoder, choice: int = 0) -> None:
        self.request, self.choice = request, choice
        self._tokenizer = tokenizer
        params = request.sampling
        self._stops = StopStrings(getattr(params, "stop", ()))
        skip = getattr(params, "skip_special_tokens", True)
        self._detok = IncrementalDetokenizer(tokenizer, skip, context=request.prompt)
        # each generated token's text (the detokenizer's last held-back text with the last one),
        # kept apart: one string grown by each token was a copy of the whole text per token
        self._pieces: list[str] = []
        self._ends: list[int] = []  # end offset in ``text`` of each generated token's text
        self._recent = ""  # the text's last characters, as many as the longest stop string has
        self._flushed = False
        self._kept: int | None = None  # end of the text kept before a left-out stop token's
        self.cut: int | None = None  # where the stop string starts in ``text``
        self.stop_string: str | None = None
        self._sent_tokens = 0  # what `delta` has handed out
        self._sent_prompt = False

    @property
    def id(self) -> str:
        return self.request.id

    @property
    def done(self) -> bool:
        return self.request.status.done

    @property
    def text(self) -> str:
        """The text of the tokens seen so far, before any stop-string cut (made whole: not per token)."""
        return "".join(self._pieces)

    def _length(self) -> int:
        return self._ends[-1] if self._ends else 0

    def advance(self) -> bool:
        """Read the tokens the engine added since the last call. True when a stop string has just
        appeared: the caller ends the request (`Engine.stop`); the text is cut before it."""
        req, new_from, before = self.request, self._length(), self._recent
        added = []
        while len(self._ends) < len(req.output):
            held = ""
            if self._before_hidden_stop_token():
                # the text held back (an unfinished character) is the kept tokens', not the
                # left-out stop token's that would complete or carry it: it starts the stop
                # token's text (the tokens before may be streamed already), and is kept
                held = self._detok.flush()
                self._kept = self._length() + len(held)
            added.append(self._append(held + self._detok.push(req.output[len(self._ends)])))
        if req.status.done and not self._flushed and self._ends:
            self._flushed = True
            added.append(self._append(self._detok.flush(), onto_last=True))
        floor = self._stops_from()
        if self.cut is not None or floor is None or self._length() == new_from:
            return False  # a stop string ends in new text only
        searched = max(new_from, floor)
        # the stop strings are searched in the new text and the end of the text before it (no
        # token reads the whole text)
        base, window = new_from - len(before), before + "".join(added)
        if req.status.done:
            # not the text of a stop token or EOS that ended the request: it is left out (vLLM
            # searches only the text it keeps)
            window = window[: max(0, self._stop_token_start() - base)]
        hit = self._stops.first(window, searched - base)
        if hit is None:
            return False
        self.cut, self.stop_string = base + hit.at, hit.stop
        return True

    def _before_hidden_stop_token(self) -> bool:
        """The next token to read is the stop token or EOS that ended the request, its text left
        out (`_stop_token_start`), and tokens come before it."""
        req = self.request
        hidden = req.stopped_by_token and not getattr(req.sampling, "include_stop_str_in_output", False)
        return hidden and req.status.done and 0 < len(self._ends) == len(req.output) - 1

    def _stops_from(self) -> int | None:
        """Where in ``text`` a stop string must end past (None: nowhere yet): past the text of the
        first ``min_tokens`` tokens, as vLLM searches none of it, so a stop string ends a request
        with token ``min_tokens + 1`` at the earliest, as a stop token or EOS does."""
        low = getattr(self.request.sampling, "min_tokens", 0)
        if low == 0:
            return 0
        return self._ends[low - 1] if len(self._ends) > low else None

    def _append(self, piece: str, onto_last: bool = False) -> str:
        """``piece`` as the next token's text, or (``onto_last``) after the last token's; returned."""
        if onto_last:
            self._pieces[-1] += piece
            self._ends[-1] += len(piece)
        else:
            self._pieces.append(piece)
            self._ends.append(self._length() + len(piece))
        if self._stops.longest:
            self._recent = (self._recent + piece)[-self._stops.longest :]
        return piece

    # ------------------------------------------------------------------ results
    def delta(self) -> StreamDelta | None:
        """What is new since the last delta and safe to show (None: nothing yet).

        While the request runs, text that may be the start of a stop string is held back, with
        the tokens it belongs to. The first delta after the prompt is computed carries the prompt
        logprobs when they were asked for.
        """
        limit = self._limit()
        end = self._sent_tokens
        while end < len(self._ends) and (self.done or self._ends[end] <= limit):
            end += 1
        prompt_ready = not self._sent_prompt and (self.done or self.request.prefilled)
        if end == self._sent_tokens and not prompt_ready:
            return None
        start, self._sent_tokens = self._sent_tokens, end
        prompt = None
        if prompt_ready:
            self._sent_prompt = True
            prompt = self._prompt_logprobs()
        return StreamDelta(
            token_ids=tuple(self.request.output[start:end]),
            text="".join(self._texts(start, end, limit)),
            logprobs=self._logprobs(start, end, limit),
            prompt_logprobs=prompt,
        )

    def output(self) -> GenerationOutput:
        """The finished request's result (call once it is done and `advance` has seen it)."""
        req = self.request
        reason = (
            "stop" if self.cut is not None else (req.finish_reason.value if req.finish_reason else "length")
        )
        limit = self._limit()
        n = len(self._ends)
        return GenerationOutput(
            request_id=req.id,
            prompt_token_ids=tuple(req.prompt),
            token_ids=tuple(req.output[:n]),
            text=self.text[:limit],
            finish_reason=reason,
            logprobs=self._logprobs(0, n, limit),
            prompt_logprobs=self._prompt_logprobs(),
            cached_tokens=req.reused,
            stop_string=self.stop_string,
            choice=self.choice,
            stop_token=self._stop_token(),
        )

    def _stop_token(self) -> int | None:
        """The ``stop_token_ids`` entry that ended the request, if one did (its last token: a token
        that ends a request is the last one generated). One the client listed counts whether or
        not it is also the model's end-of-sequence token (only the scheduler knows those)."""
        req = self.request
        if not req.stopped_by_token or not req.output:
            return None
        last = req.output[-1]
        return last if last in req.sampling.stop_token_ids else None

    def _limit(self) -> int:
        """End of the text that may be shown now."""
        if self.cut is not None:
            if getattr(self.request.sampling, "include_stop_str_in_output", False):
                assert self.stop_string is not None
                return self.cut + len(self.stop_string)
            return self.cut
        if self.done:
            return self._stop_token_start()
        return self._length() - self._stops.held_back(self._recent)

    def _stop_token_start(self) -> int:
        """End of a done request's text: where the text of the stop token or end-of-sequence
        token that ended it starts (vLLM leaves that text out; its id stays in the output),
        unless it is asked for with ``include_stop_str_in_output``. The scheduler says which
        requests a token ended (`Request.stopped_by_token`): only it knows the model's EOS."""
        req, params = self.request, self.request.sampling
        if not req.stopped_by_token or getattr(params, "include_stop_str_in_output", False):
            return self._length()
        if len(self._ends) != len(req.output):
            return self._length()
        if self._kept is not None:
            return self._kept
        return self._ends[-2] if len(self._ends) > 1 else 0

    def _texts(self, start: int, end: int, limit: int) -> list[str]:
        """Texts of tokens [start, end), each cut at ``limit``."""
        out = []
        for i in range(start, end):
            begin = self._ends[i - 1] if i else 0
            out.append(self._pieces[i][: max(0, min(self._ends[i], limit) - begin)])
        return out

    def _logprobs(self, start: int, end: int, limit: int) -> tuple[TokenLogprob, ...] | None:
        k = self.request.sampling.logprobs
        if k is None:
            return None
        samples = self.request.output_logprobs
        texts = self._texts(start, end, limit)
        return tuple(  # the top k asked for (the sampler reports at least a few, for its own use)
            TokenLogprob(samples[i].token, text, samples[i].logprob, samples[i].top[:k])
            for i, text in zip(range(start, end), texts, strict=True)
        )

    def _prompt_logprobs(self) -> PromptTokenLogprobs | None:
        """The prompt's logprobs as the runner left them; entries (and the prompt's token texts)
        are built only when someone reads them."""
        req = self.request
        if req.sampling.prompt_logprobs is None:
            return None
        return PromptTokenLogprobs(
            req.prompt, req.prompt_logprobs, partial(token_texts, self._tokenizer, req.prompt)
        )


def observe(engine: Engine, tracker: RequestTracker) -> None:
    """After an engine step: read the tracker's new tokens; a stop string ends the request now.
    A Ctrl-C meanwhile is raised once it has ended: part way, the request was marked finished
    with its path lock, blocks and state slot still held, which no cleanup would give back."""
    if tracker.advance():
        with HeldInterrupt() as held:
            engine.stop(tracker.id)
        if held.came:
            raise KeyboardInterrupt
        tracker.advance()  # done now: the detokenizer hands over what it held back
