"""`radixflow.problems`: the one-line wording every door shares."""

from __future__ import annotations

import pytest

from radixflow.problems import Problem, counted, flag


@pytest.mark.parametrize(
    ("n", "noun", "plural", "expected"),
    [
        (1, "context", None, "1 context"),
        (0, "context", None, "0 contexts"),
        (2, "request", None, "2 requests"),
        (2, "SamplingParams", "SamplingParams", "2 SamplingParams"),
    ],
)
def test_a_count_of_one_takes_the_singular(n, noun, plural, expected):
    assert counted(n, noun, plural) == expected


def test_another_parameter_a_message_names_is_spelled_as_the_door_spells_its_own():
    # `generate --min-tokens 5 --max-tokens 2` said "--min-tokens: ... between 0 and max_tokens (2)"
    problem = Problem("min_tokens", "must be at most max_tokens (2), got 5", mentions=("max_tokens",))
    assert problem.render() == "min_tokens: must be at most max_tokens (2), got 5"
    assert problem.render(flag) == "--min-tokens: must be at most --max-tokens (2), got 5"
    item = problem.of_item("prompt 1", flag)
    assert item == "prompt 1: --min-tokens: must be at most --max-tokens (2), got 5"
    assert problem.within("groups").render() == "groups.min_tokens: must be at most max_tokens (2), got 5"
