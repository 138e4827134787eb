"""A number typed on the command line: every way a flag reads one (an engine option's flag, a
server limit's, generate's sampling flags, bench's own limits, a list of ids, TOKEN=BIAS) reads
the same text the same way, and says a refusal as the other doors say it, in one line."""

from __future__ import annotations

import math
from typing import Any

import pytest

from radixflow.cli import main


class Accepted(Exception):
    """Raised where a command would go on to load a model or draw a workload: the flags passed."""


def _accepted(*_: Any, **__: Any) -> None:
    raise Accepted


@pytest.fixture
def run(monkeypatch, capsys):
    """``main(argv)``'s exit code (0: every check passed) and its standard error's lines."""
    import radixflow.cli.bench as bench
    import radixflow.cli.serve as serve
    from radixflow.generation import LLM

    monkeypatch.setattr(LLM, "from_options", _accepted)
    monkeypatch.setattr(bench, "load_workload", _accepted)
    monkeypatch.setattr(serve, "refuse_setup", _accepted)

    def go(argv: list[str]) -> tuple[int, list[str]]:
        try:
            code = main(argv)
        except Accepted:
            code = 0
        return code, capsys.readouterr().err.strip().splitlines()

    return go


GENERATE = ["generate", "qwen3_5-tiny", "--prompt", "hi"]
SERVE = ["serve", "qwen3_5-tiny"]
# (the command before the flag, the flag, what it reads: an integer or a number), one of each way
# a flag's text becomes a number
NUMBER_FLAGS = [
    (["bench"], "--kv-blocks", "an integer"),  # an engine option's flag
    (["bench"], "--tflops", "a number"),
    (["bench"], "--repeat", "an integer"),  # bench's own, with its range
    (["bench", "--arrival", "poisson"], "--rate", "a number"),
    (GENERATE, "--max-tokens", "an integer"),  # generate's sampling flags
    (GENERATE, "--temperature", "a number"),
    (GENERATE, "--stop-token-ids", "an integer"),
    (SERVE, "--max-pending", "an integer"),  # a server limit's flag
    (SERVE, "--drain-timeout", "a number"),
]
# digits of other scripts, which Python's int() and float() read (int("١٢") == 12): a JSON body,
# a TOML cell and LLM(...) take numbers in ASCII only, and refuse this text as a string
FOREIGN_DIGITS = ["\u0661\u0662", "\uff11\uff12", "\u0967"]


@pytest.mark.parametrize(("before", "flag", "kind"), NUMBER_FLAGS)
@pytest.mark.parametrize("text", FOREIGN_DIGITS)
def test_digits_of_another_script_are_refused_as_every_other_door_refuses_them(run, before, flag, kind, text):
    code, err = run([*before, f"{flag}={text}"])
    assert (code, err) == (2, [f"radixflow: error: {flag}: must be {kind}, got {text!r}"])


def test_a_logit_bias_token_in_digits_of_another_script_is_no_token_id(run):
    code, err = run([*GENERATE, "--logit-bias", "\u0661\u0662=1"])
    assert (code, err) == (2, ["radixflow: error: --logit-bias: keys must be token ids, got '\u0661\u0662'"])


@pytest.mark.parametrize(("before", "flag", "kind"), NUMBER_FLAGS)
def test_what_python_reads_as_a_number_in_ascii_is_still_taken(run, before, flag, kind):
    """Underscores between digits (TOML's 1_000, Python's too) and spaces around are kept."""
    for text in ("1_00", " 100 ", "+100"):
        assert run([*before, f"{flag}={text}"])[0] == 0, (flag, text)


FLOAT_FLAGS = [(before, flag) for before, flag, kind in NUMBER_FLAGS if kind == "a number"]


@pytest.mark.parametrize(("before", "flag"), FLOAT_FLAGS)
@pytest.mark.parametrize("text", ["1e400", "-1E400", "Infinity", "NaN"])
def test_a_number_no_float_holds_is_quoted_as_typed(run, before, flag, text):
    """``--tflops 1e400`` was refused as "got inf", a value the user never typed (float() reads
    1e400 as inf), where ``--temperature 1e400`` said "got 1e400"."""
    code, err = run([*before, f"{flag}={text}"])
    assert (code, err) == (2, [f"radixflow: error: {flag}: must be a finite number, got {text}"])


@pytest.mark.parametrize(("before", "flag", "kind"), NUMBER_FLAGS)
@pytest.mark.parametrize("text", ["9" * 5000, "-" + "9" * 5000, "x" * 5000], ids=["huge", "-huge", "long"])
def test_a_long_text_is_refused_in_one_short_line(run, before, flag, kind, text):
    """An integer past the 4300 digits Python reads was "must be an integer" (it is one, and
    LLM(...) given it says how it is out of range), and each refusal quoted all 5000 characters."""
    code, err = run([*before, f"{flag}={text}"])
    if code == 0:  # a token id: the vocabulary refuses it once the model is loaded
        assert flag == "--stop-token-ids" and text != "x" * 5000
        return
    assert code == 2 and len(err) == 1 and err[0].startswith(f"radixflow: error: {flag}: "), err
    assert len(err[0]) < 160, err
    if kind == "an integer" and text != "x" * 5000:
        assert "must be an integer, got" not in err[0] and "an integer of 5000 digits" in err[0], err


@pytest.mark.parametrize(
    ("text", "bias"),
    [
        ("5=x", "x"),
        ("5=", ""),
        ("5=nan", math.nan),
        ("5=1e400", math.inf),
        ("5=-inf", -math.inf),
        ("5=200", 200.0),
    ],
)
def test_a_bad_bias_is_refused_in_the_words_of_llm(run, text, bias):
    """``--logit-bias 5=x`` was "must be a number, got 'x'" and 5=nan "must be a finite number",
    where LLM(...) says "token 5's bias must be ...": the flag's bias reaches the one check, a
    non-finite one said as typed."""
    from radixflow.cli.generate_flags import sampling_flag
    from radixflow.generation import SamplingParams

    problem = SamplingParams(logit_bias={5: bias}).problem()
    assert problem is not None
    core = problem.render(sampling_flag).rpartition(", got ")[0]
    code, err = run([*GENERATE, f"--logit-bias={text}"])
    assert (code, err) == (2, [f"radixflow: error: {core}, got {_as_typed(text.partition('=')[2])}"])


def test_a_bias_no_float_holds_for_a_token_of_5000_digits_is_one_short_line(run):
    # its message spelled the token with str(), which raised: argparse said "invalid token_bias
    # value: '9999...'", all 5000 digits
    code, err = run([*GENERATE, f"--logit-bias={'9' * 5000}=nan"])
    assert code == 2 and len(err) == 1 and len(err[0]) < 160, err
    assert "an integer of 5000 digits's bias must be a finite number, got nan" in err[0], err


def _as_typed(bias: str) -> str:
    """A bias quoted back: text that is no number as a string, a number as the user typed it."""
    try:
        float(bias)
    except ValueError:
        return repr(bias)
    return bias  # finite too (200 was said "200.0")


def test_a_number_kept_as_written_survives_a_copy():
    import copy
    import pickle

    from radixflow.options.numerals import read_float

    value = read_float("1e400")
    for kept in (copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
        assert repr(kept) == "1e400" and kept == math.inf


@pytest.mark.parametrize(
    ("given", "flag", "value"),
    [(["--logit-bias", "-1=2"], "--logit-bias", "-1=2"), (["--stop", "-x"], "--stop", "-x")],
)
def test_a_value_that_begins_with_a_dash_is_told_how_to_give_it(run, given, flag, value):
    # argparse reads "-1=2" as a flag: "--logit-bias: expected one argument" named no way out
    code, err = run([*GENERATE, *given])
    hint = f"(a value that begins with '-' is read as a flag: write {flag}={value})"
    assert (code, err) == (2, [f"radixflow: error: {flag}: expected one argument {hint}"])
    assert run([*GENERATE, f"{flag}={value}"])[1] != err


@pytest.mark.parametrize(
    ("text", "said"), [("-1", "-1"), ("-1_0", "-1_0"), ("-2e0", "-2e0"), (" -0.5 ", "-0.5")]
)
def test_an_option_flags_number_out_of_range_is_quoted_as_typed(run, text, said):
    # "--per-request-ms -1" was refused as "got -1.0", --drain-timeout 1e10 as "got 10000000000.0":
    # numbers nobody typed, where the commands' own flags, a TOML cell and LLM(...) quote the value
    code, err = run([*GENERATE, f"--per-request-ms={text}"])
    assert (code, err) == (2, [f"radixflow: error: --per-request-ms: must be at least 0, got {said}"])


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("--temperature=-1", "--temperature: must be a number >= 0, got -1"),
        ("--top-p=2", "--top-p: must be in (0, 1], got 2"),
        ("--presence-penalty=3e0", "--presence-penalty: must be a number in [-2, 2], got 3e0"),
        ("--logit-bias=5=200", "--logit-bias: token 5's bias must be a number in [-100, 100], got 200"),
    ],
)
def test_a_sampling_flags_number_out_of_range_is_quoted_as_typed(run, given, said):
    # "--temperature -1" was refused as "got -1.0", a number nobody typed
    assert run([*GENERATE, given]) == (2, [f"radixflow: error: {said}"])


def test_sampling_flags_in_range_are_held_as_plain_floats():
    from radixflow.cli.app import build_parser
    from radixflow.cli.generate_flags import sampling_params

    args = build_parser("generate").parse_args(
        [*GENERATE, "--temperature", "1", "--top-p", "0.5", "--logit-bias", "5=2"]
    )
    params = sampling_params(args)
    assert params.problem() is None and (params.temperature, params.top_p) == (1.0, 0.5)
    assert type(params.temperature) is float and type(params.logit_bias[0][1]) is float
