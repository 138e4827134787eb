"""The one output path (generation/output_processor.py) over a scripted sim runner: stop strings,
stream deltas, failures, aborts, and requests forgotten once answered."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("tokenizers")

from engine_utils import new_engine

from radixflow.engine.engine import Engine
from radixflow.engine.records import RoundRecord
from radixflow.engine.runner import validate_prompt
from radixflow.generation.detokenize import token_texts
from radixflow.generation.output_processor import (
    Done,
    EngineDriver,
    FailureKind,
    FirstToken,
    OutputEvent,
    OutputProcessor,
    Streamed,
)
from radixflow.generation.params import SamplingParams
from radixflow.generation.tokenizer import TextTokenizer
from radixflow.generation.tracker import RequestTracker
from radixflow.models.io.tokenizer import save_tokenizer, train_tokenizer
from radixflow.problems import Problem
from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
from radixflow.scheduler.output import SchedulerOutput
from radixflow.scheduler.request import Request
from radixflow.scheduler.samples import Sample
from radixflow.scheduler.scheduler import SchedulerConfig

SPEC = replace(SIM_MODELS["qwen3_5-2b"], vocab_size=512, max_context=4096)
CFG = SchedulerConfig(token_budget=64, max_requests=8, block_size=8, num_blocks=512, num_state_slots=32)
# a split emoji (several byte-level tokens for one character) and repeated words
TEXT = "The quick brown fox 🙂 jumps over the lazy dog; the dog sleeps."


class ScriptedRunner(SimRunner):
    """Generates each request's scripted tokens in order (then the sim's hash tokens), with a
    logprob; ``fail`` makes the next worker call raise."""

    def __init__(self, scripts: dict[str, list[int]]) -> None:
        super().__init__(SPEC, HARDWARE["h100"])
        self.scripts = scripts
        self.fail = False

    def validate(self, request: Request) -> Problem | None:
        # it scripts a logprob for every token, so it answers ``logprobs`` (the sim refuses it)
        return validate_prompt(request, self.model)

    def run(self, batch: SchedulerOutput):
        if self.fail:
            raise RuntimeError("device lost")
        result = super().run(batch)
        for c in batch.chunks:
            script = self.scripts.get(c.request_id, [])
            n = len(c.tokens) - len(PROMPT)  # tokens generated before this one
            if c.sample and n < len(script):
                result.samples[c.request_id] = Sample(script[n], -0.25, ((script[n], -0.25),))
        return result


PROMPT = (5, 6, 7, 8)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> TextTokenizer:
    path = tmp_path_factory.mktemp("tok")
    save_tokenizer(train_tokenizer(512), path)
    return TextTokenizer.load(path)


@pytest.fixture(scope="module")
def ids(tokenizer) -> list[int]:
    return tokenizer.encode(TEXT, add_special_tokens=False)


def setup(scripts: dict[str, list[int]]) -> tuple[Engine, OutputProcessor, ScriptedRunner]:
    runner = ScriptedRunner(scripts)
    engine = new_engine(runner, CFG)
    return engine, OutputProcessor(engine), runner


def submit(
    processor: OutputProcessor, tokenizer: TextTokenizer, rid: str, stream: bool = False, **params
) -> list[OutputEvent]:
    sampling = SamplingParams(**{"max_tokens": 64, "logprobs": 1, **params})
    req = Request(rid, PROMPT, sampling=sampling)
    return processor.submit(RequestTracker(req, tokenizer), stream)


def run_all(engine: Engine, processor: OutputProcessor) -> list[OutputEvent]:
    events = list(EngineDriver(engine, processor).run())
    engine.check_integrity()
    return events


def done_of(events: list[OutputEvent], rid: str) -> Done:
    (done,) = [e for e in events if isinstance(e, Done) and e.request_id == rid]
    return done


def boundary_stop(tokenizer: TextTokenizer, ids: list[int]) -> tuple[str, int, int]:
    """A stop string that starts inside one token and ends inside the next, its first place in
    TEXT, and how many tokens it takes to complete it."""
    texts = token_texts(tokenizer, ids)
    end = 0
    for i in range(len(texts) - 1):
        end += len(texts[i])
        if len(texts[i]) >= 2 and len(texts[i + 1]) >= 2:
            stop = texts[i][-2:] + texts[i + 1][:2]
            if TEXT.find(stop) == end - 2 and end > len(texts[0]):
                return stop, end - 2, i + 2
    raise AssertionError("no token boundary fits")


def test_a_stop_string_across_a_token_boundary_cuts_the_text_and_ends_the_request(tokenizer, ids):
    stop, cut, n_tokens = boundary_stop(tokenizer, ids)
    engine, processor, _ = setup({"a": ids})
    assert submit(processor, tokenizer, "a", stop=(stop, "never-generated")) == []
    done = done_of(run_all(engine, processor), "a")
    out = done.output
    assert done.failure is None and out is not None
    assert out.text == TEXT[:cut] and out.finish_reason == "stop" and out.stop_string == stop
    # the token that completed the stop string is the last one: the engine stopped right there
    assert out.token_ids == tuple(ids[:n_tokens])
    assert out.logprobs is not None and "".join(e.text for e in out.logprobs) == out.text
    assert [e.logprob for e in out.logprobs] == [-0.25] * n_tokens
    assert engine.requests == [] and processor.following == 0  # forgotten once answered


@pytest.mark.parametrize("where", ["completes", "never_completes", "no_stop"])
def test_stream_deltas_add_up_to_the_output_and_are_never_retracted(tokenizer, ids, where):
    stops = {
        "completes": (boundary_stop(tokenizer, ids)[0],),
        "never_completes": (TEXT[-3:] + "#",),  # its start is generated last, its end never
        "no_stop": (),
    }[where]
    engine, processor, _ = setup({"s": ids})
    submit(processor, tokenizer, "s", stream=True, max_tokens=len(ids), stop=stops)
    driver, shown, events = EngineDriver(engine, processor), "", []
    while processor.following:
        for event in driver.step():
            events.append(event)
            if isinstance(event, Streamed):
                shown += event.delta.text
                assert "\ufffd" not in event.delta.text  # never half a character
                # what was shown stays: it is the start of the final text (cut before the stop)
                assert TEXT[: TEXT.find(stops[0]) if where == "completes" else None].startswith(shown)
    out = done_of(events, "s").output
    assert out is not None and shown == out.text
    assert out.text == (TEXT[: TEXT.find(stops[0])] if where == "completes" else TEXT)
    streamed = [e.delta for e in events if isinstance(e, Streamed)]
    assert sum(len(d.token_ids) for d in streamed) == len(out.token_ids)
    assert [e.text for d in streamed for e in d.logprobs or ()] == [e.text for e in out.logprobs or ()]
    assert isinstance(events[-1], Done)  # the answer comes after the last delta


def test_events_of_a_plain_request_first_token_once_then_done(tokenizer):
    engine, processor, _ = setup({})
    submit(processor, tokenizer, "p", max_tokens=5)
    events = run_all(engine, processor)
    assert [type(e) for e in events] == [FirstToken, Done]  # no deltas unless streaming
    out = done_of(events, "p").output
    assert out is not None and len(out.token_ids) == 5 and out.finish_reason == "length"
    assert engine.requests == []


def test_a_failed_round_is_a_failure_answer_and_the_request_is_forgotten(tokenizer):
    engine, processor, runner = setup({})
    submit(processor, tokenizer, "f")
    runner.fail = True
    done = done_of(run_all(engine, processor), "f")
    assert done.output is None and done.failure is not None
    assert done.failure.kind is FailureKind.FAILED
    assert done.failure.reason == "worker call failed: RuntimeError: device lost"
    assert engine.requests == [] and processor.following == 0 and not engine.has_work()


def test_a_request_the_engine_refuses_is_answered_at_submission(tokenizer):
    engine, processor, _ = setup({})
    req = Request("bad", (1, 600), sampling=SamplingParams(max_tokens=2))
    (done,) = processor.submit(RequestTracker(req, tokenizer))
    assert isinstance(done, Done) and done.output is None and done.failure is not None
    assert done.failure.kind is FailureKind.REFUSED
    assert done.failure.reason == "prompt: token id 600 is outside the vocabulary (0..511)"
    assert engine.requests == [] and processor.following == 0


def test_an_aborted_request_is_released_answered_once_and_not_followed(tokenizer):
    engine, processor, _ = setup({})
    submit(processor, tokenizer, "gone", max_tokens=50)
    submit(processor, tokenizer, "stays", max_tokens=6)
    driver = EngineDriver(engine, processor)
    first = driver.step() + driver.step()  # prefill, then a decode round: both are running
    assert {e.request_id for e in first} == {"gone", "stays"}  # their first tokens
    aborted = processor.abort("gone")
    assert aborted is not None and aborted.output is None and aborted.failure is not None
    assert aborted.failure.kind is FailureKind.ABORTED and aborted.failure.reason == "request aborted"
    assert processor.abort("gone") is None  # answered already
    rest = list(driver.run())
    assert {e.request_id for e in rest} == {"stays"}
    assert done_of(rest, "stays").output is not None
    assert engine.requests == [] and processor.following == 0
    engine.check_integrity()
    assert engine.cache.usage().locked_blocks == 0 and engine.cache.usage().working_slots == 0


def test_abort_of_a_request_that_is_over_gives_its_result(tokenizer, ids):
    stop, cut, _ = boundary_stop(tokenizer, ids)
    engine, processor, _ = setup({"x": ids})
    submit(processor, tokenizer, "x", stop=(stop,))
    while engine.has_work():  # runs to the end without anyone processing its rounds
        engine.step()
    done = processor.abort("x")
    assert done is not None and done.output is not None
    assert done.output.text == TEXT[:cut] and done.output.finish_reason == "stop"
    assert engine.requests == []


def test_only_the_requests_of_the_round_are_looked_at(tokenizer):
    engine, processor, _ = setup({})
    submit(processor, tokenizer, "a", max_tokens=40)
    submit(processor, tokenizer, "b", max_tokens=40)
    driver = EngineDriver(engine, processor)
    driver.step()
    engine.stop("a")  # ended between rounds, by someone else
    others = RoundRecord(0, 0.0, 0.0, 0.0, 1, 1, 0, 0, "budget", (("b", 0, 1),))
    assert all(e.request_id == "b" for e in processor.process(others))
    # a step without a round looks at every followed request: "a" is answered then
    (done,) = processor.process(None)
    assert isinstance(done, Done) and done.request_id == "a" and done.output is not None
    assert done.output.finish_reason == "stop" and done.output.stop_string is None


def test_the_driver_reports_each_round_and_stops_when_all_are_answered(tokenizer):
    engine, processor, _ = setup({})
    for i in range(3):
        submit(processor, tokenizer, f"r{i}", max_tokens=2 + i)
    rounds: list[RoundRecord] = []
    events = list(EngineDriver(engine, processor, rounds.append).run())
    assert sorted(e.request_id for e in events if isinstance(e, Done)) == ["r0", "r1", "r2"]
    assert [r.index for r in rounds] == [r.index for r in engine.rounds] and len(rounds) == 4
    assert not engine.has_work() and engine.requests == []


def test_a_request_aborted_behind_the_processors_back_is_answered_by_the_next_step(tokenizer):
    engine, processor, _ = setup({})
    submit(processor, tokenizer, "lost")
    engine.abort("lost")  # before it arrived: no round will ever touch it
    (done,) = EngineDriver(engine, processor).run()
    assert isinstance(done, Done) and done.failure is not None
    assert done.failure.kind is FailureKind.ABORTED and done.failure.reason == "request aborted"
    assert engine.requests == [] and processor.following == 0


def test_the_stop_string_kept_is_the_one_that_ended_the_request_under_min_tokens(tokenizer):
    # "a" is within min_tokens (it stops nothing), "b" after it: "ab" ends the request, and the
    # earlier "a", listed first and starting at the same place, is not the stop string
    a, b = (tokenizer.encode(c, add_special_tokens=False)[0] for c in "ab")
    engine, processor, _ = setup({"m": [a, b, a, a]})
    submit(processor, tokenizer, "m", stop=("a", "ab"), min_tokens=1, include_stop_str_in_output=True)
    out = done_of(run_all(engine, processor), "m").output
    assert out is not None and out.token_ids == (a, b)
    assert out.stop_string == "ab" and out.text == "ab" and out.finish_reason == "stop"


def test_a_stop_string_counts_from_the_token_after_min_tokens_as_a_stop_token_does(tokenizer):
    # vLLM searches no text of the first min_tokens tokens: like an EOS or stop token, a stop
    # string may end the request only with token min_tokens + 1, so min_tokens tokens come first
    a = tokenizer.encode("a", add_special_tokens=False)[0]
    for low in (1, 2, 3):
        engine, processor, _ = setup({"m": [a] * 6})
        submit(processor, tokenizer, "m", stop=("a",), min_tokens=low)
        out = done_of(run_all(engine, processor), "m").output
        assert out is not None and out.token_ids == (a,) * (low + 1), low
        assert out.text == "a" * low and out.finish_reason == "stop" and out.stop_string == "a"


def test_a_stop_string_in_the_text_of_the_stop_token_that_ended_the_request_stops_nothing(tokenizer, ids):
    # the text of a stop token (or EOS) that ends a request is left out, so a stop string was
    # found inside it: the text ended with a piece of it ("<|" of "<|endoftext|>") and named the
    # stop string, not the token, as what ended it. vLLM searches only the text it keeps
    words = [t for t in ids if len(tokenizer.decode([t]).strip()) >= 3]
    first, stop_token = words[0], words[1]
    inside = tokenizer.decode([stop_token]).strip()[1:3]
    for include in (False, True):
        engine, processor, _ = setup({"m": [first, stop_token, first]})
        submit(
            processor,
            tokenizer,
            "m",
            stop=(inside,),
            stop_token_ids=(stop_token,),
            include_stop_str_in_output=include,
        )
        out = done_of(run_all(engine, processor), "m").output
        assert out is not None and out.token_ids == (first, stop_token) and out.finish_reason == "stop"
        whole = tokenizer.decode([first, stop_token])
        if include:  # the token's text is kept, and searched: cut after the stop string in it
            assert out.stop_string == inside and out.text == whole[: whole.rindex(inside) + len(inside)]
        else:
            assert out.stop_string is None and out.text == tokenizer.decode([first])


def test_stop_reason_is_the_stop_string_or_stop_token_that_ended_it_and_none_otherwise(tokenizer, ids):
    # vLLM's `stop_reason`: the stop string or the stop_token_ids entry that ended the choice;
    # None when it ran to max_tokens or ended at an end-of-sequence token
    stop, _, _ = boundary_stop(tokenizer, ids)
    eos = replace(CFG, eos_token_ids=(ids[2],))
    cases = [
        ({"stop": (stop,)}, CFG, stop),
        ({"stop_token_ids": (ids[3],)}, CFG, ids[3]),
        ({"max_tokens": 3}, CFG, None),
        ({}, eos, None),  # the model's EOS
    ]
    for params, cfg, reason in cases:
        engine = new_engine(ScriptedRunner({"s": ids}), cfg)
        processor = OutputProcessor(engine)
        submit(processor, tokenizer, "s", **params)
        out = done_of(run_all(engine, processor), "s").output
        assert out is not None and out.stop_reason == reason, params


def test_each_token_searches_a_window_of_the_text_not_the_whole(tokenizer, ids, monkeypatch):
    """Each token's text was added to one growing string (a copy of the whole text per token) and
    the stop strings were searched in the whole of it: time quadratic in a long output's length,
    on the engine thread (9 s at 128k tokens). Each token now reads the end of the text only."""
    from radixflow.generation.detokenize import StopStrings
    from radixflow.scheduler.request import RequestStatus

    read: list[int] = []
    for name in ("first", "held_back"):
        method = getattr(StopStrings, name)
        monkeypatch.setattr(
            StopStrings, name, lambda self, text, *a, m=method: read.append(len(text)) or m(self, text, *a)
        )
    tokens = ids * 40  # some 1,700 tokens, 2,600 characters
    req = Request(
        "long", PROMPT, sampling=SamplingParams(max_tokens=len(tokens), stop=["lazy cat", "🙂 jumpz"])
    )
    tracker, shown = RequestTracker(req, tokenizer), []
    for t in tokens:
        req.output.append(t)
        assert not tracker.advance()
        delta = tracker.delta()
        shown.append("" if delta is None else delta.text)
    req.status = RequestStatus.FINISHED
    tracker.advance()
    shown.append(tracker.delta().text)
    assert "".join(shown) == tracker.output().text == tokenizer.decode(tokens) == TEXT * 40
    assert len(read) > len(tokens) and max(read) <= 32  # the longest stop string and a token or two


def test_a_stop_string_in_the_text_held_back_to_the_end_is_found():
    # the detokenizer's held-back text comes out when the request is over, onto a token read in
    # an earlier step: it is new text, searched as any other
    from radixflow.scheduler.request import RequestStatus

    class Bytes:
        def decode(self, ids, skip_special_tokens=False):
            return bytes(ids).decode("utf-8", errors="replace")

        def decode_each(self, ids, skip_special_tokens=False):
            return [self.decode([i]) for i in ids]

    req = Request("r", PROMPT, sampling=SamplingParams(max_tokens=8, stop=["b\ufffd"]))
    tracker = RequestTracker(req, Bytes())
    for t in b"ab\xf0\x9f":
        req.output.append(t)
        assert not tracker.advance()
    req.status = RequestStatus.FINISHED
    assert tracker.advance() and tracker.cut == 1 and tracker.output().text == "a"


class _ByteIds:
    """A decoder whose token ids are bytes: any cut may split a character."""

    def decode(self, ids, skip_special_tokens=False):
        return bytes(ids).decode("utf-8", errors="replace")

    def decode_each(self, ids, skip_special_tokens=False):
        return [self.decode([i]) for i in ids]


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("ids", [b"a\xf0\x9fx", b"\xf0\x9f\x99x", b"\xe4\xb8"])
def test_a_character_left_unfinished_before_a_stop_token_keeps_its_text(ids, include):
    # the detokenizer held back the unfinished character's bytes until a later token; the stop
    # token's text took them with it, and a stop token's text is left out: the text lost the
    # character the tokens before the stop token decode to (the text of a request ended by length
    # keeps it, as U+FFFD). The text is now that of the tokens it keeps, streamed or not
    from radixflow.scheduler.request import RequestStatus

    params = SamplingParams(max_tokens=8, stop_token_ids=(ids[-1],), include_stop_str_in_output=include)
    req = Request("r", PROMPT, sampling=params)
    tracker, shown = RequestTracker(req, _ByteIds()), ""
    for i, t in enumerate(ids):
        req.output.append(t)
        if i == len(ids) - 1:
            req.status, req.stopped_by_token = RequestStatus.FINISHED, True
        assert not tracker.advance()
        delta = tracker.delta()
        shown += delta.text if delta is not None else ""
    out = tracker.output()
    kept = ids if include else ids[:-1]
    assert out.text == _ByteIds().decode(kept) == shown and out.stop_token == ids[-1]
