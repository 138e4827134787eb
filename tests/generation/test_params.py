"""`SamplingParams` of the generation layer: ``n`` choices per prompt and their seeds."""

from __future__ import annotations

import math

import pytest

from radixflow.generation.params import (
    MAX_BAD_WORD_CHARS,
    MAX_CHOICE_CHARS,
    MAX_CHOICES,
    MAX_STOP_CHARS,
    SamplingParams,
    choice_seed,
)
from radixflow.generation.scoring import specials_asked


@pytest.mark.parametrize("n", [0, -1, MAX_CHOICES + 1])
def test_n_outside_one_to_the_limit_is_a_problem_naming_n(n):
    problem = SamplingParams(n=n).problem()
    assert problem is not None and problem.param == "n"
    assert str(problem) == f"n: must be an integer between 1 and {MAX_CHOICES}, got {n!r}"


@pytest.mark.parametrize(
    "field, value", [("n", 1.0), ("n", "2"), ("n", True), ("n", None), ("truncate_prompt_tokens", 1.5)]
)
def test_an_integer_field_given_no_integer_is_said_as_every_door_says_it(field, value):
    # "n: must be an integer between 1 and 128, got 1.5" where the server and --n say "must be an integer"
    assert str(SamplingParams(**{field: value}).problem()) == f"{field}: must be an integer, got {value!r}"


@pytest.mark.parametrize(
    "stop",
    [
        ["x"] * (MAX_STOP_CHARS + 1),  # every one is searched for on every token
        ["x" * (MAX_STOP_CHARS - 1), "yz"],  # a long one costs its length on every token
    ],
)
def test_stop_strings_past_the_limit_in_all_are_a_problem_naming_stop(stop):
    problem = SamplingParams(stop=stop).problem()
    assert problem is not None and problem.param == "stop"
    assert str(problem) == (
        f"stop: at most {MAX_STOP_CHARS} characters of stop strings in all, got {MAX_STOP_CHARS + 1}"
    )
    assert SamplingParams(stop=stop[1:]).problem() is None


@pytest.mark.parametrize(
    ("field", "limit", "what"),
    [("guided_choice", MAX_CHOICE_CHARS, "choices"), ("bad_words", MAX_BAD_WORD_CHARS, "bad words")],
)
def test_choices_and_bad_words_past_the_limit_in_all_are_a_problem_naming_them(field, limit, what):
    """Each is followed on every token (and choices against bad words once): 100,000 bad words
    took 5 s for two tokens, where stop strings had a cap."""
    assert SamplingParams(**{field: ["x" * (limit - 2), "yz"]}).problem() is None
    for texts in (["x"] * (limit + 1), ["x" * (limit - 1), "yz"]):
        problem = SamplingParams(**{field: texts}).problem()
        assert problem is not None and problem.param == field
        assert problem.message == f"at most {limit} characters of {what} in all, got {limit + 1}"


def test_choices_keep_everything_but_n_and_the_seed():
    params = SamplingParams(max_tokens=5, temperature=0.7, top_k=3, seed=9, stop=("x",), logprobs=2, n=4)
    assert params.problem() is None
    choices = params.choices()
    assert len(choices) == 4 and all(c.n == 1 and c.problem() is None for c in choices)
    kept = {(c.max_tokens, c.temperature, c.top_k, c.stop, c.logprobs) for c in choices}
    assert kept == {(5, 0.7, 3, ("x",), 2)}
    # choice 0 is the request's own seed: n = 1 gives what it always gave
    assert [c.seed for c in choices] == [9, choice_seed(9, 1), choice_seed(9, 2), choice_seed(9, 3)]
    assert SamplingParams(seed=9).choices() == [SamplingParams(seed=9)]
    assert all(c.seed is None for c in SamplingParams(n=3).choices())  # unseeded stays unseeded


def test_choice_seeds_are_distinct_and_do_not_overlap_neighbouring_seeds():
    seeds = [choice_seed(s, i) for s in range(-3, 40) for i in range(8)]
    assert len(set(seeds)) == len(seeds)  # seeds 1 and 2 with n = 2 draw four different streams
    big = [choice_seed(s, 1) for s in (2**64 - 1, -(2**63), 0)]
    assert all(0 <= s < 2**63 for s in big)  # a 64-bit seed from the server mixes into range


@pytest.mark.parametrize(
    ("k", "max_tokens", "kept"),
    [(None, 4, 10), (3, 4, 3), (10, 4, 10), (50, 4, 10), (-1, 4, 8), (-1, 16, 1), (-1, 0, 10)],
)
def test_truncation_keeps_the_prompts_last_tokens(k, max_tokens, kept):
    prompt = list(range(10))
    params = SamplingParams(max_tokens=max_tokens, truncate_prompt_tokens=k)
    assert params.problem() is None
    assert params.truncated(prompt, context=12) == prompt[-kept:]  # -1: room for max_tokens in 12


def test_truncating_to_what_fits_keeps_the_whole_context_when_nothing_is_generated():
    # a prompt may fill the context with max_tokens 0 (scoring), so -1 keeps all of it then
    prompt = list(range(10))
    assert SamplingParams(max_tokens=0, truncate_prompt_tokens=-1).truncated(prompt, context=10) == prompt
    assert SamplingParams(max_tokens=1, truncate_prompt_tokens=-1).truncated(prompt, context=10) == prompt[1:]


@pytest.mark.parametrize("k", [0, -2])
def test_a_truncation_that_keeps_nothing_is_a_problem(k):
    assert str(SamplingParams(truncate_prompt_tokens=k).problem()).startswith(
        "truncate_prompt_tokens: must be an integer >= 1, or -1 (what fits)"
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [("stop", 5), ("stop", [None]), ("stop_token_ids", 5), ("stop_token_ids", [None])],
)
def test_a_stop_that_is_no_list_is_a_problem_not_a_crash(field, value):
    problem = SamplingParams(**{field: value}).problem()
    assert problem is not None and problem.param == field
    assert problem.message.endswith(f", got {value!r}")  # stop's did not say what it was given
    assert SamplingParams(stop="x", stop_token_ids=[3]).problem() is None


@pytest.mark.parametrize("field", ["stop", "stop_token_ids", "bad_words", "logit_bias"])
def test_none_is_no_list_as_vllms_defaults_and_the_servers_null_say(field):
    # vLLM's SamplingParams defaults these to None and the server takes null for them, yet
    # SamplingParams(stop=None) was refused ("stop: must be a string or a list of strings, got
    # None"): code forwarding an optional value (stop=args.stop) broke on the offline API only
    given = SamplingParams(**{field: None})
    assert given.problem() is None and given == SamplingParams() and hash(given) == hash(SamplingParams())


@pytest.mark.parametrize("empty", [(), []])
def test_an_empty_choice_list_is_a_problem_not_free_text(empty):
    assert SamplingParams().guided_choice is None and SamplingParams().problem() is None
    problem = SamplingParams(guided_choice=empty).problem()
    assert problem is not None and problem.param == "guided_choice"


def test_a_top_k_of_minus_one_is_no_cut_as_vllm_spells_it():
    assert SamplingParams(top_k=-1).top_k == 0 and SamplingParams(top_k=-1).problem() is None
    problem = SamplingParams(top_k=-2).problem()
    assert problem is not None and problem.param == "top_k" and "-1: no cut" in problem.message


@pytest.mark.parametrize(
    ("field", "texts", "expected"),
    [
        ("guided_choice", ("yes", " "), "guided_choice: item 1 is only whitespace (' '); each needs text"),
        ("guided_choice", ("",), "guided_choice: item 0 is empty (''); each needs text"),
        ("bad_words", ("\t\n",), "bad_words: item 0 is only whitespace ('\\t\\n'); each needs text"),
        ("guided_choice", ("a", 3), "guided_choice: must be a list of strings, got ['a', 3]"),
        ("bad_words", "word", "bad_words: must be a list of strings, got 'word'"),
    ],
)
def test_a_blank_choice_or_bad_word_is_named_as_what_is_wrong_with_it(field, texts, expected):
    # a whitespace-only choice was refused as "must be a list of non-empty strings, got (' ',)":
    # a list of non-empty strings, by its own words
    problem = SamplingParams(**{field: texts}).problem()
    assert problem is not None and str(problem) == expected


def test_a_default_max_tokens_is_fitted_to_the_room_and_never_below_one():
    params = SamplingParams(max_tokens=32, min_tokens=20)
    assert params.fitted(10) == SamplingParams(max_tokens=10, min_tokens=10)
    assert params.fitted(0).max_tokens == 1  # no room: refused as the prompt, not as max_tokens
    assert params.fitted(100) == params


@pytest.mark.parametrize("room", [0, 5])
def test_fitting_never_raises_a_max_tokens_of_zero(room):
    # a scoring request (prompt logprobs, nothing generated) fitted stays one that generates
    # nothing: a cap never raises, and a prompt filling the context runs at max_tokens 0
    params = SamplingParams(max_tokens=0, prompt_logprobs=0)
    assert params.fitted(room) == params


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("temperature", math.nan, "temperature: must be a finite number, got nan"),
        ("top_p", math.inf, "top_p: must be a finite number, got inf"),
        ("min_p", -math.inf, "min_p: must be a finite number, got -inf"),
        ("repetition_penalty", math.inf, "repetition_penalty: must be a finite number, got inf"),
        ("presence_penalty", math.nan, "presence_penalty: must be a finite number, got nan"),
        ("temperature", "hot", "temperature: must be a number, got 'hot'"),
        ("frequency_penalty", True, "frequency_penalty: must be a number, got True"),
        ("top_k", 1.5, "top_k: must be an integer, got 1.5"),
        ("max_tokens", "8", "max_tokens: must be an integer, got '8'"),
        ("logprobs", 2.0, "logprobs: must be an integer, got 2.0"),
    ],
)
def test_a_value_that_is_no_number_is_said_as_every_door_says_it(field, value, expected):
    # SamplingParams said "temperature: must be a number >= 0, got nan" where the command line and
    # the server say "must be a finite number" (and "must be a number" for text): one check, two wordings
    assert str(SamplingParams(**{field: value}).problem()) == expected


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1, 2**100])
def test_a_seed_past_64_bits_is_a_problem_as_the_server_says(seed):
    # LLM took any integer as a seed, where the server refused one past 64 bits: the sampler reads
    # seeds mod 2^64, so seed 2^64 drew exactly seed 0's tokens, unsaid
    problem = SamplingParams(seed=seed).problem()
    assert problem is not None and problem.param == "seed"
    assert str(problem) == f"seed: must fit in 64 bits ({-(2**63)} to {2**64 - 1}), got {seed}"


@pytest.mark.parametrize("seed", [-(2**63), -1, 0, 2**64 - 1])
def test_every_64_bit_seed_is_taken(seed):
    assert SamplingParams(seed=seed).problem() is None


@pytest.mark.parametrize(
    "bias, expected",
    [
        (math.nan, "logit_bias: token 7's bias must be a finite number, got nan"),
        ("x", "logit_bias: token 7's bias must be a number, got 'x'"),
        (101, "logit_bias: token 7's bias must be a number in [-100, 100], got 101"),
    ],
)
def test_a_bias_that_is_no_number_is_said_as_the_flag_and_the_server_say_it(bias, expected):
    # "token 7's bias must be a number in [-100, 100], got nan", where --logit-bias 7=nan and the
    # server's {"7": NaN} say "must be a finite number"
    assert str(SamplingParams(logit_bias={7: bias}).problem()) == expected


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("allowed_token_ids", [], "allowed_token_ids: must be a non-empty list of ids, got []"),
        ("stop_token_ids", ["a", 3], "stop_token_ids: must be a list of token ids, got ['a', 3]"),
        ("guided_choice", ["a", 3], "guided_choice: must be a list of strings, got ['a', 3]"),
        ("stop", ["a", None], "stop: must be a string or a list of strings, got ['a', None]"),
        ("logit_bias", [(1, 2, 3)], "logit_bias: must map token ids to biases, got [[1, 2, 3]]"),
    ],
)
def test_a_list_sent_is_shown_as_the_list_it_was(field, value, expected):
    # the lists are kept as tuples, and were shown so: an LLM caller's and a JSON client's [] as "()"
    assert str(SamplingParams(**{field: value}).problem()) == expected


def test_numpy_integers_are_read_as_the_integers_they_are():
    # n=np.int64(2) was refused as "n: must be an integer, got np.int64(2)"
    import numpy as np

    p = SamplingParams(n=np.int64(2), truncate_prompt_tokens=np.int32(3), seed=np.int64(1))
    assert p.problem() is None and p == SamplingParams(n=2, truncate_prompt_tokens=3, seed=1)
    assert [type(c.seed) for c in p.choices()] == [int, int]


@pytest.mark.parametrize("field", ["ignore_eos", "include_stop_str_in_output", "skip_special_tokens"])
def test_numpy_bools_are_read_as_the_bools_they_are(field):
    # ignore_eos=np.True_ (a flag from an array of them) was refused as "must be true or false,
    # got np.True_", where numpy's numbers are read as Python's
    import numpy as np

    for flag in (True, False):
        p = SamplingParams(**{field: np.bool_(flag)})
        assert p.problem() is None and p == SamplingParams(**{field: flag})
        assert type(getattr(p, field)) is bool


def test_a_numpy_bool_as_add_special_tokens_is_the_bool_it_is():
    import numpy as np

    assert specials_asked("some text", np.False_) is False
    assert specials_asked("some text", np.True_) is True


@pytest.mark.parametrize(
    ("field", "texts", "said"),
    [
        ("guided_choice", ("a", "\u0301"), "guided_choice: item 1 ('\u0301') is no token to this tokenizer"),
        ("bad_words", ("\u0301",), "bad_words: item 0 ('\u0301') is no token to this tokenizer"),
    ],
)
def test_a_text_the_tokenizer_makes_no_token_of_is_refused_naming_its_field(field, texts, said):
    # a normalizer may drop a text whole (a lone combining accent, stripped): it was refused as
    # "token_choices: must be a non-empty list of non-empty token-id lists", a field never given
    from radixflow.problems import ProblemError

    def encode(text: str) -> list[int]:
        return [ord(c) for c in text if c != "\u0301"]

    with pytest.raises(ProblemError) as e:
        SamplingParams(**{field: texts}).tokenized(encode)
    assert str(e.value) == said


HUGE = 10**5000  # past the 4300 digits Python will spell: str(HUGE) raises ValueError


@pytest.mark.parametrize("value", [HUGE, -HUGE], ids=["huge", "-huge"])
@pytest.mark.parametrize(
    "field",
    [
        "max_tokens",
        "min_tokens",
        "top_k",
        "logprobs",
        "prompt_logprobs",
        "seed",
        "n",
        "truncate_prompt_tokens",
    ]
    + ["include_stop_str_in_output", "skip_special_tokens", "ignore_eos"],
)
def test_an_integer_past_what_python_spells_is_a_problem_not_a_traceback(field, value):
    # n, min_tokens and truncate_prompt_tokens quoted the value with repr: ValueError ("Exceeds the
    # limit (4300 digits)") from LLM(...), or from `generate --n` given 5000 digits
    problem = SamplingParams(**{field: value}).problem()
    if problem is not None:  # top_k takes any size: no cut
        assert "\n" not in str(problem) and "5001 digits" in str(problem), problem


def test_a_truncation_past_what_python_spells_is_said_against_the_context():
    problem = SamplingParams(truncate_prompt_tokens=HUGE).context_problem(8192)
    assert (
        str(problem)
        == "truncate_prompt_tokens: an integer of 5001 digits is more than the model context of 8192"
    )


@pytest.mark.parametrize("field", ["token_choices", "bad_token_sequences"])
@pytest.mark.parametrize("value", [(HUGE,), [HUGE], (1, 2) * 40])
def test_token_sequences_of_the_wrong_shape_are_quoted_short_as_lists(field, value):
    # a flat list holding a 5000-digit id was quoted with repr: ValueError ("Exceeds the limit
    # (4300 digits)") out of the check meant to refuse it; a long one was quoted whole, as a tuple
    problem = SamplingParams(**{field: value}).problem()
    assert problem is not None and problem.param == field
    assert "\n" not in str(problem) and len(str(problem)) < 120 and "(" not in problem.message, problem


@pytest.mark.parametrize("stop", [("a\udcff",), ("ok", "\ud800")])
def test_a_stop_string_with_a_lone_surrogate_is_a_problem_as_a_bad_word_is(stop):
    # no output text holds a lone surrogate, so the stop string never matched: LLM and
    # `generate --stop $'\xff'` (a byte that is not UTF-8) took it silently, where a bad word or a
    # guided choice is refused in these words (and every JSON door refuses any such string)
    from radixflow.generation.tokenizer import unicode_problem

    i = len(stop) - 1
    problem = SamplingParams(stop=stop).problem()
    assert problem is not None and problem.param == "stop"
    assert problem.message == f"item {i}: {unicode_problem(stop[i])}"
    assert "lone UTF-16 surrogate" in problem.message


@pytest.mark.parametrize(
    ("field", "array"),
    [
        ("stop_token_ids", [1, 2]),
        ("allowed_token_ids", [1, 2]),
        ("token_choices", [[1, 2]]),
        ("bad_token_sequences", [[1, 2]]),
        ("stop", ["a", "b"]),
        ("bad_words", ["x"]),
        ("guided_choice", ["yes", "no"]),
    ],
)
def test_an_array_for_a_list_field_is_refused_with_the_hint_a_prompt_gets(field, array):
    # "stop: must be a string or a list of strings, got array(['a', 'b'], ...)" said no way out
    np = pytest.importorskip("numpy")
    problem = SamplingParams(**{field: np.array(array)}).problem()
    assert problem is not None and problem.param == field, problem
    assert problem.message.endswith(" (an array: pass .tolist())"), problem.message
    assert SamplingParams(**{field: np.array(array).tolist()}).problem() is None


def test_an_array_inside_a_list_field_gets_the_hint_and_a_lone_number_none():
    np = pytest.importorskip("numpy")
    problem = SamplingParams(token_choices=[np.array([1, 2]), [3]]).problem()
    assert problem is not None and problem.message.endswith(" (an array: pass .tolist())"), problem
    # np.int64(5).tolist() is 5, still no list: no hint that would not help
    problem = SamplingParams(stop_token_ids=np.int64(5)).problem()
    assert problem is not None and "tolist" not in problem.message, problem
