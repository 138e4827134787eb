"""`radixflow generate`'s flags: the engine flags and the generation group (prompts, lengths,
sampling, stops, constraints, logits, what is printed), declared by group, and read back as
`SamplingParams` (`sampling_params`). The sampling flags are parsed as numbers only: their ranges
are `SamplingParams.problem`'s, the one check every door runs (`sampling_flag` names a field as
its flag)."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

from radixflow.generation.params import MAX_CHOICES, SamplingParams, unsent_max_tokens
from radixflow.options.flags import Unparsed, add_engine_flags, parse_int, parse_typed_float
from radixflow.options.numerals import Written, read_int, typed_float
from radixflow.problems import NOT_FINITE, flag
from radixflow.scheduler.sampling_checks import bias_name

FLOAT_FLAGS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
DEFAULT_MAX_TOKENS = 32  # what --max-tokens is when not given, capped to each prompt's room


def add_arguments(p: argparse.ArgumentParser) -> None:
    # the sampling flags are parsed as numbers only: their ranges are `SamplingParams.problem`'s,
    # the one check every door runs, so a flag is refused in the API's words (named as the flag)
    add_engine_flags(p, model_required=True)
    g = p.add_argument_group("generation")
    _prompt_flags(g)
    _length_flags(g)
    sampling_flags(g)
    _stop_flags(g)
    _constraint_flags(g)
    _logit_flags(g)
    _report_flags(g)


def _prompt_flags(g: argparse._ArgumentGroup) -> None:
    """The prompts, and how each is sent."""
    g.add_argument("--prompt", action="append", required=True, help="a prompt (repeat for a batch)")
    g.add_argument(
        "--chat", action="store_true", help="send each prompt as a user message through the chat template"
    )


def _length_flags(g: argparse._ArgumentGroup) -> None:
    """How many tokens each prompt gets, and how many answers."""
    g.add_argument(
        "--max-tokens",
        type=parse_int,
        default=None,
        help=f"tokens to generate per prompt (default {DEFAULT_MAX_TOKENS}, or --min-tokens if more, capped "
        "to the room the prompt leaves in the model context and the cache; one given is never capped)",
    )
    g.add_argument(
        "--min-tokens",
        type=parse_int,
        default=0,
        help="tokens before EOS, a stop token or string may end it",
    )
    g.add_argument(
        "--n",
        type=parse_int,
        default=1,
        help=f"choices per prompt, 1 to {MAX_CHOICES} (they share the prompt in the cache; with --seed each "
        "has its own stream)",
    )


def sampling_flags(g: argparse._ArgumentGroup) -> None:
    """How a token is drawn from the logits."""
    g.add_argument("--temperature", type=parse_typed_float, default=0.0, help="0 (or below 1e-5) is greedy")
    g.add_argument(
        "--top-p",
        type=parse_typed_float,
        default=1.0,
        help="in (0, 1]: sample from the likeliest tokens whose probability reaches it; 1 is no cut",
    )
    g.add_argument("--top-k", type=parse_int, default=0, help="0 or -1: no cut")
    g.add_argument(
        "--min-p",
        type=parse_typed_float,
        default=0.0,
        help="in [0, 1]: drop tokens under min-p times the best's",
    )


def _stop_flags(g: argparse._ArgumentGroup) -> None:
    """Where an answer ends early."""
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument(
        "--stop-token-ids",
        type=token_ids,
        default=None,
        metavar="IDS",
        help="comma-separated token ids that end generation, as an end-of-sequence token does",
    )
    g.add_argument(
        "--include-stop-str-in-output",
        action="store_true",
        help="end the text after the stop string that ended it (default: just before it)",
    )


def _constraint_flags(g: argparse._ArgumentGroup) -> None:
    """What an answer may hold, and how much of each prompt is kept."""
    g.add_argument(
        "--guided-choice",
        action="append",
        default=[],
        metavar="TEXT",
        help="the output is one of these strings (repeatable)",
    )
    g.add_argument(
        "--bad-word", action="append", default=[], metavar="TEXT", help="never generate TEXT (repeatable)"
    )
    g.add_argument(
        "--truncate-prompt-tokens",
        type=parse_int,
        default=None,
        metavar="K",
        help="keep only each prompt's last K tokens (-1: as many as leave room for --max-tokens)",
    )
    g.add_argument(
        "--allowed-token-ids",
        type=token_ids,
        default=None,
        metavar="IDS",
        help="comma-separated token ids: the only tokens that may be generated",
    )


def _logit_flags(g: argparse._ArgumentGroup) -> None:
    """Penalties and biases that shift the logits, and EOS ignored."""
    g.add_argument("--presence-penalty", type=parse_typed_float, default=0.0, help="in [-2, 2] (OpenAI's)")
    g.add_argument("--frequency-penalty", type=parse_typed_float, default=0.0, help="in [-2, 2] (OpenAI's)")
    g.add_argument(
        "--repetition-penalty",
        type=parse_typed_float,
        default=1.0,
        help="> 0; 1 is none (transformers' rule)",
    )
    g.add_argument(
        "--logit-bias",
        type=token_bias,
        action="append",
        default=[],
        metavar="TOKEN=BIAS",
        help="add BIAS (in [-100, 100]) to token id TOKEN's logit (repeatable)",
    )
    g.add_argument("--ignore-eos", action="store_true", help="keep generating past end-of-sequence tokens")


def _report_flags(g: argparse._ArgumentGroup) -> None:
    """What is printed beside the text."""
    g.add_argument(
        "--logprobs",
        type=parse_int,
        default=None,
        metavar="K",
        help="each generated token's logprob and top K (the sum is printed; all with --json)",
    )
    g.add_argument(
        "--prompt-logprobs",
        type=parse_int,
        default=None,
        metavar="K",
        help="score the prompt: each token's logprob, rank and top K (the sum is printed; all with --json)",
    )
    g.add_argument(
        "--skip-special-tokens",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="leave special tokens (an end-of-sequence token, for instance) out of the text",
    )
    g.add_argument("--json", action="store_true", help="print every output as JSON")


def sampling_flag(param: str) -> str:
    """A `SamplingParams` field as this command's flag spells it (``logit_bias`` -> ``--logit-bias``)."""
    return {"bad_words": "--bad-word"}.get(param, flag(param))


def token_ids(text: str) -> tuple[int, ...]:
    """argparse type: ``3,17,42`` as token ids (the vocabulary's bounds are checked with the rest);
    an empty text is no ids, for the one check to say whether a list of none will do."""
    if not text.strip():
        return ()
    return tuple(parse_int(part) for part in text.split(","))


def token_bias(text: str) -> tuple[int | str, float | Unparsed]:
    """argparse type: ``TOKEN=BIAS`` as ``(token id, bias)`` (ranges are checked with the rest; a
    TOKEN or BIAS that is no number is kept as typed, for the one check to refuse in every door's
    words, ``token 5's bias must be a number``). A bias no float holds is refused here, in those
    words, as typed (``1e400``): the one check would say it back as ``inf``."""
    token, sep, bias = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"must be TOKEN=BIAS, got {text!r}")
    number, value = read_int(token), typed_float(bias)  # a bias as typed (`typed_floats`)
    if number is not None and value is not None and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{bias_name(number)} {NOT_FINITE}, got {value!r}")
    return (token if number is None else number), (Unparsed(bias) if value is None else value)


def sampling_params(args: argparse.Namespace) -> SamplingParams:
    """The generation flags as `SamplingParams`: a flag not given is the field's own default,
    but ``--max-tokens`` (`DEFAULT_MAX_TOKENS`: a command line asks for text, not
    `SamplingParams()`'s one token; raised to ``--min-tokens``, which asks for at least that
    many; `cli/generate.py`'s run caps it to what each prompt leaves)."""
    default = unsent_max_tokens(DEFAULT_MAX_TOKENS, args.min_tokens)
    return typed_floats(
        SamplingParams(
            max_tokens=default if args.max_tokens is None else args.max_tokens,
            min_tokens=args.min_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            min_p=args.min_p,
            seed=args.seed,  # given: each prompt draws from its own seeded stream
            stop=tuple(args.stop),
            stop_token_ids=args.stop_token_ids,
            skip_special_tokens=args.skip_special_tokens,
            include_stop_str_in_output=args.include_stop_str_in_output,
            allowed_token_ids=args.allowed_token_ids,
            guided_choice=tuple(args.guided_choice) or None,  # None: free text
            bad_words=tuple(args.bad_word),
            truncate_prompt_tokens=args.truncate_prompt_tokens,
            ignore_eos=args.ignore_eos,
            logprobs=args.logprobs,
            prompt_logprobs=args.prompt_logprobs,
            n=args.n,
            presence_penalty=args.presence_penalty,
            frequency_penalty=args.frequency_penalty,
            repetition_penalty=args.repetition_penalty,
            logit_bias=tuple(args.logit_bias),
        )
    )


def typed_floats(params: SamplingParams) -> SamplingParams:
    """``params`` as its check quotes them (a float flag as typed, `parse_typed_float`: ``got -1``,
    not ``got -1.0``), held as plain floats once they pass it."""
    if params.problem() is not None:
        return params
    plain = {f: float(v) for f in FLOAT_FLAGS if isinstance(v := getattr(params, f), Written)}
    bias = tuple((t, float(b) if isinstance(b, Written) else b) for t, b in params.logit_bias)
    return replace(params, **plain, logit_bias=bias)
