"""The scheduler's `SamplingParams`: what its fields accept."""

from __future__ import annotations

import numpy as np
import pytest

from radixflow.scheduler.sampling import SamplingParams


def test_numpy_numbers_are_read_as_the_python_numbers_they_are():
    """seed=np.int64(3) (a seed from numpy's random, a token id from an array) was refused as
    "seed: must be an integer, got np.int64(3)": an integer, said not to be one."""
    p = SamplingParams(
        max_tokens=np.int64(4),
        min_tokens=np.int32(1),
        temperature=np.float32(0.5),
        top_k=np.int32(3),
        top_p=np.float64(0.5),
        seed=np.uint64(2**64 - 1),
        logprobs=np.int8(2),
        stop_token_ids=[np.int64(5)],
        allowed_token_ids=(np.int64(5), 6),
        logit_bias={np.int64(7): np.float32(1.5)},
        bad_token_sequences=[(np.int16(10),)],
    )
    assert p.problem() is None
    plain = SamplingParams(
        max_tokens=4,
        min_tokens=1,
        temperature=0.5,
        top_k=3,
        top_p=0.5,
        seed=2**64 - 1,
        logprobs=2,
        stop_token_ids=(5,),
        allowed_token_ids=(5, 6),
        logit_bias=((7, 1.5),),
        bad_token_sequences=((10,),),
    )
    assert p == plain and hash(p) == hash(plain)
    assert type(p.seed) is int and type(p.temperature) is float and type(p.stop_token_ids[0]) is int
    assert type(p.logit_bias[0][0]) is int and type(p.bad_token_sequences[0][0]) is int
    choices = SamplingParams(token_choices=[[np.int64(8), 9]]).token_choices
    assert choices == ((8, 9),) and type(choices[0][0]) is int
    # a bool is still no number, and a float no integer
    assert SamplingParams(max_tokens=np.float64(2.0)).problem().param == "max_tokens"
    assert SamplingParams(top_k=True).problem().param == "top_k"


def test_a_guided_choice_shorter_than_min_tokens_is_never_followed():
    """token_choices (5,) and (6, 7, 8) with min_tokens 2 ended the output at (5,) with finish
    reason stop, one token where two were asked for: min_tokens broken unsaid. Only the choices
    that long are followed, as an end-of-sequence token is held back until then."""
    p = SamplingParams(max_tokens=8, min_tokens=2, token_choices=((5,), (6, 7, 8), (9, 1)))
    assert p.problem() is None and p.open_choices == ((6, 7, 8), (9, 1))
    assert SamplingParams(max_tokens=8, token_choices=((5,), (6, 7))).open_choices == ((5,), (6, 7))
    short = SamplingParams(max_tokens=8, min_tokens=3, token_choices=((5,), (9, 1)))
    assert str(short.problem()) == (
        "min_tokens: 3 cannot be met: every one of the token_choices the output may become is shorter"
    )
    assert short.problem().mentions == ("token_choices",)
    # banned sequences close choices first: that every choice is banned is said as before
    banned = SamplingParams(max_tokens=8, min_tokens=3, token_choices=((5,),), bad_token_sequences=((5,),))
    assert str(banned.problem()) == "bad_token_sequences: ban every one of the token_choices"


def test_an_allow_list_whose_every_token_is_banned_is_refused():
    """allowed_token_ids (69,) with the one-token bad sequence (69,) generated 69 on every step:
    the ban left no token to pick, and the sampler picks the least unlikely banned one."""
    banned = SamplingParams(max_tokens=4, allowed_token_ids=(69,), bad_token_sequences=((69,), (3, 4)))
    assert str(banned.problem()) == "bad_token_sequences: ban every one of the allowed_token_ids"
    assert banned.problem().mentions == ("allowed_token_ids",)
    # one allowed token left, or a ban of a longer sequence (it bans 69 only after 68): fine
    assert SamplingParams(allowed_token_ids=(69, 70), bad_token_sequences=((69,),)).problem() is None
    assert SamplingParams(allowed_token_ids=(69,), bad_token_sequences=((68, 69),)).problem() is None


def test_a_top_k_of_another_kind_is_named_not_numpys_error():
    """top_k=np.array([1, 2]) raised numpy's "The truth value of an array ... is ambiguous" from
    the check for vLLM's -1, naming no field."""
    p = SamplingParams(top_k=np.array([1, 2]))
    assert str(p.problem()).startswith("top_k: must be an integer, got array([1, 2]")
    assert SamplingParams(top_k=-1).top_k == 0 and SamplingParams(top_k=np.int64(-1)).top_k == 0


@pytest.mark.parametrize(
    ("given", "param"),
    [
        ({"max_tokens": 10**5000}, "max_tokens"),
        ({"seed": 10**5000}, "seed"),
        ({"stop_token_ids": ("x",) * 1000}, "stop_token_ids"),
    ],
)
def test_a_huge_value_is_refused_in_one_short_line(given, param):
    # past Python's 4300 digits an int has no str: the refusal itself raised ValueError ("Exceeds
    # the limit ... for integer string conversion"), a traceback for a mistyped number
    problem = SamplingParams(**given).problem()
    assert problem is not None and problem.param == param, problem
    assert len(problem.message) < 160, problem.message


@pytest.mark.parametrize(
    ("max_tokens", "says"),
    [
        (-1, "max_tokens: must be an integer >= 0, got -1"),
        (-(10**5000), "max_tokens: must be an integer >= 0, got an integer of 5001 digits"),
        (10**5000, "max_tokens: must be at most 9223372036854775807, got an integer of 5001 digits"),
        (2**63, "max_tokens: must be at most 9223372036854775807, got 9223372036854775808"),
        ("4", "max_tokens: must be an integer, got '4'"),
        (4.0, "max_tokens: must be an integer, got 4.0"),
    ],
    ids=["-1", "-huge", "huge", "2**63", "str", "float"],  # a huge int has no str for an id
)
def test_max_tokens_out_of_range_or_no_integer_is_said_once(max_tokens, says):
    assert str(SamplingParams(max_tokens=max_tokens).problem()) == says
    assert SamplingParams(max_tokens=2**63 - 1).problem() is None


@pytest.mark.parametrize("name", ["stop_token_ids", "logit_bias", "bad_token_sequences"])
def test_none_for_a_list_field_is_an_empty_list(name):
    # vLLM's defaults and a JSON null say "none" for each; bad_token_sequences alone refused it
    params = SamplingParams(**{name: None})
    assert getattr(params, name) == () and params.problem() is None
