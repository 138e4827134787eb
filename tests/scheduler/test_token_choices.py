"""Guided choice at the token level: what may follow, when the output is whole, what is refused."""

from __future__ import annotations

import pytest

from radixflow.scheduler.sampling import SamplingParams
from radixflow.scheduler.token_choices import ChoiceStep, choice_step, ends_the_output

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
