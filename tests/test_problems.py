"""`radixflow.problems`: the one-line wording every door shares."""

from __future__ import annotations

import pytest

from radixflow.problems import counted


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
