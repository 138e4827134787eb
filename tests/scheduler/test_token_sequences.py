"""Guided choice at the token level: what may follow, when the output is whole, what is refused."""

from __future__ import annotations

import random

import pytest

from radixflow.scheduler.sampling import SamplingParams
from radixflow.scheduler.token_sequences import (
    ChoiceStep,
    banned_next,
    choice_step,
    ends_the_output,
    open_choices,
)

CHOICES = ((5, 9), (5, 9, 40), (21,), (5, 7))


@pytest.mark.parametrize(
    ("generated", "step"),
    [
        ((), ChoiceStep(frozenset({5, 21}), False)),
        ((5,), ChoiceStep(frozenset({9, 7}), False)),
        ((5, 9), ChoiceStep(frozenset({40}), True)),  # whole, and the start of a longer one
        ((5, 9, 40), ChoiceStep(frozenset(), True)),
        ((21,), ChoiceStep(frozenset(), True)),
        ((9,), ChoiceStep(frozenset(), False)),  # off every choice: nothing may follow
    ],
)
def test_choice_step_follows_the_choices_the_output_is_a_prefix_of(generated, step):
    assert choice_step(CHOICES, generated) == step
    assert ends_the_output(CHOICES, generated) == (step.complete and not step.next_tokens)


def test_token_choices_are_checked_and_kept_as_tuples():
    params = SamplingParams(token_choices=[[5, 9], (21,)])
    assert params.token_choices == ((5, 9), (21,)) and params.problem() is None and hash(params)
    assert params.adjusts_logits
    for bad in ((), ((),), (("5",),), ((True,),), 5):
        assert str(SamplingParams(token_choices=bad).problem()).startswith(  # type: ignore[arg-type]
            "token_choices: must be a non-empty list of non-empty token-id lists"
        )
    both = SamplingParams(token_choices=((5,),), allowed_token_ids=(5,))
    assert str(both.problem()) == "allowed_token_ids: cannot be combined with a guided choice"


def test_a_banned_sequence_bans_its_last_token_right_after_the_rest():
    banned = ((7,), (3, 4, 5), (9, 5))
    assert banned_next(banned, ()) == {7}  # a one-token sequence: always
    assert banned_next(banned, (1, 3, 4)) == {7, 5}
    assert banned_next(banned, (3, 4, 1)) == {7}
    assert banned_next(banned, (9,)) == {7, 5}
    assert banned_next((), (1, 2)) == set()


def test_bad_token_sequences_are_checked_and_kept_as_tuples():
    params = SamplingParams(bad_token_sequences=[[5, 9], (21,)])
    assert params.bad_token_sequences == ((5, 9), (21,)) and params.problem() is None
    assert params.adjusts_logits
    assert SamplingParams(bad_token_sequences=()).problem() is None
    for bad in (((),), (("5",),), 5):
        assert str(SamplingParams(bad_token_sequences=bad).problem()).startswith(  # type: ignore[arg-type]
            "bad_token_sequences: must be a list of non-empty token-id lists"
        )


def test_a_choice_with_a_banned_sequence_inside_is_closed():
    banned = ((9, 40), (7,))
    assert open_choices(CHOICES, banned) == ((5, 9), (21,))
    assert open_choices(CHOICES, ()) == CHOICES
    params = SamplingParams(token_choices=CHOICES, bad_token_sequences=banned)
    assert params.open_choices == ((5, 9), (21,)) and params.problem() is None
    assert SamplingParams().open_choices is None
    every = SamplingParams(token_choices=((5, 9), (21,)), bad_token_sequences=((9,), (21,)))
    assert str(every.problem()) == "bad_token_sequences: ban every one of the token_choices"


def test_open_choices_are_those_no_banned_sequence_is_inside_of():
    # against the definition, a choice compared with every banned sequence at every position
    rng = random.Random(7)
    for _ in range(200):
        choices = tuple(tuple(rng.randrange(4) for _ in range(rng.randint(1, 5))) for _ in range(6))
        banned = tuple(tuple(rng.randrange(4) for _ in range(rng.randint(1, 3))) for _ in range(3))
        inside = [
            any(c[i : i + len(b)] == b for b in banned for i in range(len(c) - len(b) + 1)) for c in choices
        ]
        want = tuple(c for c, closed in zip(choices, inside, strict=True) if not closed)
        assert open_choices(choices, banned) == want
