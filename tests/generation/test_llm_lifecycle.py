"""An `LLM` as an object: what copying, pickling and building it from options do."""

from __future__ import annotations

import copy
import pickle

import pytest

from radixflow.generation import LLM, SamplingParams
from radixflow.options import EngineOptions
from radixflow.problems import ProblemError

MODEL = "qwen3_5-tiny"
GREEDY = SamplingParams(max_tokens=4, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(zoo) -> LLM:
    return LLM(MODEL, kv_blocks=64, state_slots=16)


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
    llm.engine.check_integrity()


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
