"""An `LLM` as an object: what copying, pickling and building it from options do."""

from __future__ import annotations

import copy
import pickle
import signal

import pytest

from radixflow.generation import LLM, SamplingParams
from radixflow.options import EngineOptions
from radixflow.problems import ProblemError
from radixflow.scheduler.request import Request
from radixflow.scheduler.samples import FinishReason

MODEL = "qwen3_5-tiny"
GREEDY = SamplingParams(max_tokens=4, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(zoo) -> LLM:
    return LLM(MODEL, kv_blocks=64, state_slots=16)


def assert_idle(llm: LLM) -> None:
    """Between calls: the engine whole, nothing in it, and nothing of the cache held for a
    request (no path lock, private KV block or working state slot; `check_integrity` cannot
    tell one held for a request the engine has let go of)."""
    llm.engine.check_integrity()
    assert llm.engine.requests == [] and not llm.engine.has_work()
    cache = llm.engine.cache
    assert (cache.locked_nodes, set(cache.private_blocks), set(cache.working_slots)) == (0, set(), set())


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy, pickle.dumps])
def test_an_llm_refuses_to_be_copied_or_pickled_in_one_line(llm, copier):
    """A shallow copy was a second name for the same engine, lock included: a copy per thread
    ("one LLM per thread") refused each other's calls, and closing the copy left the original
    open. A deep copy or a pickle (multiprocessing, a Ray task) failed deep in the runner on
    its native kernels' ctypes handles (``ValueError: ctypes objects containing pointers``)."""
    refused = r"^an LLM cannot be copied or pickled: .* one LLM per thread or process"
    with pytest.raises(TypeError, match=refused):
        copier(llm)
    assert llm.generate([5, 6, 7], GREEDY)[0].finish_reason == "length"  # untouched
    assert_idle(llm)


def test_options_given_at_the_other_door_are_one_line_naming_the_door_that_takes_them(llm):
    """`LLM(EngineOptions(...))` said "model: must be a string, got EngineOptions(model=..., r...",
    and `LLM.from_options` given a mapping raised a bare AttributeError from deep inside."""
    options = EngineOptions(model=MODEL, kv_blocks=64, state_slots=16)
    with pytest.raises(ProblemError, match=r"^model: .*got an EngineOptions: LLM\.from_options\(options\)"):
        LLM(options)
    with pytest.raises(
        ProblemError, match=r"^options: must be an EngineOptions, got dict: LLM\(model, \*\*options\)"
    ):
        LLM.from_options({"model": MODEL, "kv_blocks": 64})  # type: ignore[arg-type]
    # either door builds the same engine
    built = LLM.from_options(options)
    assert built.options == llm.options
    prompts = [[5, 6, 7, 8], "Water boils at"]
    assert [o.token_ids for o in built.generate(prompts, GREEDY)] == [
        o.token_ids for o in llm.generate(prompts, GREEDY)
    ]


def test_a_ctrl_c_as_a_stop_string_ends_a_request_leaves_nothing_behind(llm, monkeypatch):
    """A Ctrl-C while the engine ended a request at its stop string (`Engine.stop`, between
    rounds), once it was marked finished and before its blocks, slots and path lock were given
    back, left them held for good (the call's cleanup saw a finished request and let it be):
    each such Ctrl-C took a state slot and KV blocks out of the cache and pinned a path in it."""
    prompt = "Water boils at 100 degrees Celsius at sea level."
    params = SamplingParams(max_tokens=12, stop=["1"], ignore_eos=True)
    (want,) = llm.generate(prompt, params)
    assert want.finish_reason == "stop" and len(want.token_ids) < 12  # the stop string comes early
    writer, stopped = llm.engine.scheduler.writer, []
    release = writer.release

    def pressed(req: Request, running: bool) -> None:
        if not stopped:  # the lone request ends by its stop string: the first to give back
            stopped.append(req.finish_reason)
            signal.raise_signal(signal.SIGINT)
        release(req, running)

    monkeypatch.setattr(writer, "release", pressed)
    with pytest.raises(KeyboardInterrupt):
        llm.generate(prompt, params)
    monkeypatch.undo()
    assert stopped == [FinishReason.STOP]
    assert_idle(llm)
    assert llm.generate(prompt, params)[0].token_ids == want.token_ids
    assert_idle(llm)
