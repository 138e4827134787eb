"""MODEL on the command line: every command that takes a model takes it as an argument or as
``--model MODEL`` (as `vllm serve` does), declared once (`add_model_argument`) and settled once
the command line is parsed (`settle_model`: the parser of `cli.app` calls it, and `flags.from_args`
for any other parser, which would leave ``--model`` unread)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

# the args attribute holding the flag an error about the model names: "--model", or None where
# MODEL was given as the argument (named "model", as every door names the option)
MODEL_FLAG = "model_flag"

# MODEL of the commands that require one: each generates or scores, so needs weights
MODEL_ARG_HELP = "a zoo model (see `radixflow models`) or a checkpoint directory: a model with weights"

_BY_FLAG = "model_by_flag"  # --model's value, until settled into args.model
_WAYS = "model_ways"  # the command's `ModelWays`, until settled
_REQUIRED = "the following arguments are required: "  # argparse's words


@dataclass(frozen=True)
class ModelWays:
    """How a command takes its model. ``missing``: how argparse's "required" message names a
    model not given, as it did when one spelling was the command's only one (None: the command
    has a default); ``repeatable``: a list of models (calibrate)."""

    missing: str | None
    repeatable: bool = False


def add_model_argument(
    parser: argparse.ArgumentParser, help: str, missing: str | None = "MODEL", repeatable: bool = False
) -> None:
    """MODEL as an argument and as ``--model`` (`ModelWays` says what ``missing`` and
    ``repeatable`` mean). Neither is required by argparse: `settle_model` refuses a missing one."""
    many = " (or several)" if repeatable else ""
    parser.add_argument("model", metavar="MODEL", nargs="*" if repeatable else "?", help=help + many)
    either = "either spelling; both given name one" + ("" if missing else "; neither: MODEL's default")
    parser.add_argument(
        "--model",
        dest=_BY_FLAG,
        metavar="MODEL",
        action="append" if repeatable else "store",
        help=f"MODEL as a flag{', repeatable' if repeatable else ''} ({either})",
    )
    parser.set_defaults(**{_WAYS: ModelWays(missing, repeatable)})


def _shown(value: str | list[str]) -> str:
    return " ".join(map(repr, value)) if isinstance(value, list) else repr(value)


def settle_model(args: argparse.Namespace) -> str | None:
    """Put the model given either way into ``args.model`` and the spelling an error names into
    ``args.model_flag``; the usage error's message where the two ways name different models or a
    required model is missing. No-op (None) for a command that takes no model."""
    ways = vars(args).pop(_WAYS, None)
    if ways is None:
        return None
    by_flag, by_argument = vars(args).pop(_BY_FLAG), _given(args.model)
    if by_flag is not None and by_argument is not None and _differ(by_flag, by_argument):
        both = f"MODEL {_shown(by_argument)} and --model {_shown(by_flag)}"
        if ways.repeatable:
            return f"{both} name different models: give the list one way"
        return f"{both} name two models: give one, either way"
    if by_argument is None and by_flag is None and ways.missing is not None:
        return _REQUIRED + ways.missing
    # a model not given (the command's default) is the flag's to change
    args.model = by_flag if by_flag is not None else by_argument
    setattr(args, MODEL_FLAG, None if by_argument is not None and by_flag is None else "--model")
    return None


def _given(by_argument: str | list[str] | None) -> str | list[str] | None:
    """MODEL as given; None where it was not (calibrate's empty list). An empty name is given: the
    model's own check refuses it in every door's words."""
    return None if by_argument == [] else by_argument


def _differ(by_flag: str | list[str], by_argument: str | list[str]) -> bool:
    if isinstance(by_flag, list) and isinstance(by_argument, list):
        return set(by_flag) != set(by_argument)  # one name twice is one model
    return by_flag != by_argument


def model_spelling(args: argparse.Namespace) -> str:
    """How a command's own message names the model: as it was given (the flag, or ``model`` for
    the argument, as `ProblemError`'s rendering names it)."""
    return getattr(args, MODEL_FLAG, None) or "model"


def with_missing_model(message: str, args: argparse.Namespace) -> str:
    """argparse's message naming the required arguments missing, with a required model not given
    either way named first, as argparse named it when MODEL was one of them."""
    ways = getattr(args, _WAYS, None)
    if not message.startswith(_REQUIRED) or ways is None or ways.missing is None:
        return message
    if _given(getattr(args, "model", None)) is not None or getattr(args, _BY_FLAG, None) is not None:
        return message
    return f"{_REQUIRED}{ways.missing}, {message.removeprefix(_REQUIRED)}"
