"""An `LLM` as an object: what copying, pickling and building it from options do."""

from __future__ import annotations

import copy
import pickle

import pytest

from radixflow.generation import LLM, SamplingParams

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
