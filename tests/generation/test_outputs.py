"""Prompt logprobs kept as the runner's columns, read as entries only when someone asks."""

from __future__ import annotations

import pytest

from radixflow.generation.outputs import PromptTokenLogprobs, TokenLogprob
from radixflow.scheduler.samples import PromptLogprob, PromptLogprobs

PROMPT = (10, 11, 12, 13, 14)
TEXTS = ["a", "b", "c", "d", "e"]


def columns(positions: list[int]) -> PromptLogprobs:
    return PromptLogprobs(
        positions,
        [PROMPT[p] for p in positions],
        [-float(p) for p in positions],
        [[p, p + 100] for p in positions],
        [[-0.5, -1.5] for _ in positions],
    )


def test_columns_extend_and_read_as_prompt_logprob_entries():
    scored = columns([1, 2])
    scored.extend(columns([3, 4]))
    assert len(scored) == 4 and scored.positions == [1, 2, 3, 4]
    assert scored[2] == PromptLogprob(3, 13, -3.0, ((3, -0.5), (103, -1.5)))
    assert [p.position for p in scored] == [1, 2, 3, 4]
    assert scored[-1].position == 4 and [p.position for p in scored[1:3]] == [2, 3]


@pytest.mark.parametrize("positions", [[1, 2, 3, 4], [2, 4], []])
def test_entries_are_built_on_access_with_none_where_nothing_was_scored(positions):
    calls = []

    def texts() -> list[str]:
        calls.append(1)
        return TEXTS

    lazy = PromptTokenLogprobs(PROMPT, columns(positions), texts)
    assert len(lazy) == len(PROMPT) and not calls  # nothing detokenized yet
    assert [lazy.row(p) for p in range(5)] == [
        positions.index(p) if p in positions else None for p in range(5)
    ]
    expected = [
        TokenLogprob(PROMPT[p], TEXTS[p], -float(p), ((p, -0.5), (p + 100, -1.5))) if p in positions else None
        for p in range(5)
    ]
    assert list(lazy) == expected and lazy[1:] == tuple(expected[1:]) and lazy[-1] == expected[-1]
    assert lazy == tuple(expected) and lazy != tuple(expected[:-1])
    assert len(calls) == (1 if positions else 0)  # the texts once, and only when an entry needs them
    with pytest.raises(IndexError):
        lazy[5]


class Detokenizer:
    """Stands for the tokenizer the texts come from: picklable, and heavy in a real model."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> list[str]:
        self.calls += 1
        return TEXTS


def test_pickled_entries_carry_their_texts_not_the_tokenizer():
    # the texts' maker (a partial over the tokenizer: megabytes at a 150k vocabulary) was pickled
    # with every output that had prompt logprobs
    import pickle

    maker = Detokenizer()
    lazy = PromptTokenLogprobs(PROMPT, columns([1, 2, 3]), maker)
    data = pickle.dumps(lazy)
    assert b"Detokenizer" not in data and maker.calls == 1
    back = pickle.loads(data)
    assert back == lazy and back[2] == TokenLogprob(12, "c", -2.0, ((2, -0.5), (102, -1.5)))
    assert maker.calls == 1  # the original keeps the texts it made for the pickle


def test_an_output_with_prompt_logprobs_hashes_as_its_equals_do():
    # GenerationOutput is a frozen value (hashable: a set of outputs, a dict key), but one with
    # prompt logprobs raised "TypeError: unhashable type: 'PromptTokenLogprobs'"
    from radixflow.generation.outputs import GenerationOutput

    def output() -> GenerationOutput:
        lazy = PromptTokenLogprobs(PROMPT, columns([1, 2, 3]), lambda: TEXTS)
        return GenerationOutput("r", PROMPT, (7,), "x", "length", prompt_logprobs=lazy)

    first, again = output(), output()
    assert first == again and hash(first) == hash(again) and len({first, again}) == 1
    lazy = first.prompt_logprobs
    assert lazy is not None and hash(lazy) == hash(tuple(lazy))  # equal to its tuple, hashed as it
