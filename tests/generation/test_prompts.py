"""`is_token_list`: what the offline doors take as a prompt of token ids."""

from __future__ import annotations

import enum

import numpy as np
import pytest

from radixflow.generation.prompts import is_token_list


class Token(enum.IntEnum):
    A = 3


@pytest.mark.parametrize(
    ("value", "ids"),
    [
        ([1, 2, 3], True),
        ((1, 2), True),
        ([], True),
        ([np.int64(3), 4], True),  # numpy's integers, as SamplingParams takes them
        ([Token.A, 4], True),  # an int subclass is an Integral
        ([1, True], False),  # a bool is no token id
        ([1, 2.0], False),
        ([1, "2"], False),
        ([[1, 2], [3]], False),  # prompts, not one prompt
        ("12", False),
        (b"12", False),
        ({1: 2}, False),
    ],
)
def test_a_token_list_is_a_sequence_of_integers_and_nothing_else(value, ids):
    # plain ints are told by their types at once; any other type still goes through the
    # Integral check token by token
    assert is_token_list(value) is ids
