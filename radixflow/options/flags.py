"""Engine options on the command line: declared once (`add_engine_flags`), read once (`from_args`).

Every flag defaults to None ("not given"), so a command can tell a given flag from a default (and
warn about one that cannot change the run); the option's own default is shown in the help.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radixflow.options.engine_options import EngineOptions, option_fields, spec_of
from radixflow.options.machine import path_length_problem
from radixflow.options.model_arg import MODEL_ARG_HELP, add_model_argument, settle_model
from radixflow.options.numerals import Written, max_digits, read_float, read_int, spelled, typed_float
from radixflow.options.sizes import Bytes, exact_size
from radixflow.options.spec import OptionSpec
from radixflow.problems import NOT_A_NUMBER, NOT_AN_INTEGER, NOT_FINITE, Problem, ProblemError, flag, shown
from radixflow.user_paths import file_path_problem, stdin_problem, stdout_problem, user_path

GROUPS = {
    "model": "model and runner",
    "scheduler": "scheduler and cache",
    "sim": "sim cost model (sim runner only)",
    "output": "output",
}
POLICY_HELP = (
    "scheduling policy; repeat to run several side by side where a command compares them "
    "(default: adaptive; bench: native, radixflow and adaptive)"
)


def path_arg(text: str) -> Path:
    """argparse type: a file path. A NUL character is refused here, where the flag is named: no
    file name holds one and every os call would fail on it later, far from the flag."""
    if "\x00" in text:
        raise argparse.ArgumentTypeError(f"{text!r} contains a NUL character")
    if not text:
        raise argparse.ArgumentTypeError("must be a path, got an empty string")
    if (problem := path_length_problem("path", text)) is not None:  # an os call on it would raise
        raise argparse.ArgumentTypeError(problem.message)
    return user_path(text)


def file_path_arg(text: str) -> Path:
    """argparse type: the path of a file to write (`path_arg`). One that ends in a separator
    names a directory, which `Path` would drop, writing a file of the directory's name."""
    path = path_arg(text)
    problem = file_path_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return path


def not_stdout(parse: Callable[[str], Path], holds: str) -> Callable[[str], Path]:
    """argparse type: ``parse``, with ``-`` refused (`stdout_problem`): an output that cannot go to
    standard output, which holds ``holds``."""

    def checked(text: str) -> Path:
        problem = stdout_problem(text, holds)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return parse(text)

    return checked


def not_stdin(text: str) -> Path:
    """argparse type: the path of a file to read (`path_arg`), ``-`` refused (`stdin_problem`)."""
    problem = stdin_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return path_arg(text)


def parse_int(text: str) -> int:
    """argparse type: an integer in ASCII digits (`read_int`; its range is checked where the
    option is validated), of no more digits than Python spells: the commands' own checks quote
    a value back as it is (an engine option's flag, `PARSERS`, reads any: its one check says
    how far out of range it is)."""
    value = read_int(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{NOT_AN_INTEGER}, got {shown(text)}")  # as `type_problem`
    if not spelled(value):  # as the server's JSON parser refuses one
        longest = f"{NOT_AN_INTEGER} of at most {max_digits()} digits"
        raise argparse.ArgumentTypeError(f"{longest}, got {shown(value)}")
    return value


def parse_float(text: str) -> float:
    """argparse type: a finite number in ASCII digits (`read_float`; nan and inf refused; the
    range is checked elsewhere)."""
    value = read_float(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{NOT_A_NUMBER}, got {shown(text)}")
    if not math.isfinite(value):  # a `Written`: the text as typed
        raise argparse.ArgumentTypeError(f"{NOT_FINITE}, got {value!r}")
    return value


def parse_typed_float(text: str) -> float:
    """argparse type: `parse_float`, its value kept as typed (`Written`), for a check made after
    parsing (a `SamplingParams` field's) to quote ``-1``, not ``-1.0``."""
    return Written(parse_float(text), text)


@dataclass(frozen=True)
class Unparsed:
    """A flag's text that is not a number of its option's type: kept, so the one check refuses it
    in the words every door uses (``--seed: must be an integer, got 'abc'``), not argparse's."""

    text: str

    def __repr__(self) -> str:
        return repr(self.text)


def _lenient(read: Callable[[str], Any]) -> Any:
    def parse(text: str) -> Any:
        value = read(text)
        return Unparsed(text) if value is None else value

    return parse


# an option flag's text in its option's type; nan, inf and choices are refused by the one check
# (a float as typed: "--per-request-ms -1" is refused as "got -1", not "got -1.0")
PARSERS: dict[type, Any] = {int: _lenient(read_int), float: _lenient(typed_float), str: str, Bytes: str}


def add_engine_flags(
    parser: argparse.ArgumentParser,
    model_required: bool = False,
    only: tuple[str, ...] | None = None,
    helps: dict[str, str] | None = None,
) -> None:
    """Every engine option as a flag, in its group (``only``: just these options, for a command that
    builds no engine of its own); MODEL is an argument or ``--model`` (`add_model_argument`), which
    ``model_required`` commands need, with weights, and others default; ``helps``:
    a command's own words for an option whose flag does something else there (they say its default)."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in option_fields():
        if only is not None and f.name not in only:
            continue
        spec = spec_of(f)
        if helps and f.name in helps:
            spec = dataclasses.replace(spec, help=helps[f.name], show_default=False)
        if f.name == "model":
            helped = MODEL_ARG_HELP if model_required else spec.help
            add_model_argument(parser, helped, missing="MODEL" if model_required else None)
            continue
        if spec.group not in groups:
            groups[spec.group] = parser.add_argument_group(GROUPS[spec.group])
        _add_flag(groups[spec.group], f.name, spec, f.default)


def _add_flag(group: argparse._ArgumentGroup, name: str, spec: OptionSpec, default: object) -> None:
    # choices are shown, not checked, here: the one check refuses a value with every door's words
    metavar = spec.metavar or ("{" + ",".join(spec.choices()) + "}" if spec.choices is not None else None)
    if name == "policy":
        group.add_argument("--policy", action="append", metavar=metavar, help=POLICY_HELP)
        return
    # a size as the flag takes it (4MiB, not 4194304), where a unit holds it exactly
    said = exact_size(default) if spec.kind is Bytes and isinstance(default, int) else default
    shown = "" if default is None or not spec.show_default else f" (default: {said})"
    group.add_argument(
        spec.flag or flag(name),
        *spec.aliases,
        dest=name,
        type=PARSERS[spec.kind],
        metavar=metavar,
        help=spec.help + shown,
    )


def add_option_flags(
    parser: argparse.ArgumentParser, cls: type, title: str, helps: dict[str, str] | None = None
) -> None:
    """Every field of an options dataclass declared with `option` (the server's) as a flag, in one
    group: default None ("not given"), so the dataclass's own default applies (`given_values`).
    ``helps``: a command's own words for a field, where it does something else there (they say
    its default, if it has one there: run-batch's --drain-timeout has none)."""
    group = parser.add_argument_group(title)
    for f in dataclasses.fields(cls):
        spec = spec_of(f)
        if helps and f.name in helps:
            spec = dataclasses.replace(spec, help=helps[f.name], show_default=False)
        _add_flag(group, f.name, spec, f.default)


def given_values(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The fields of ``cls`` whose flags were given, by field name (for `spec.checked`)."""
    names = (f.name for f in dataclasses.fields(cls))
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def flag_spellings(*classes: type) -> dict[str, str]:
    """Field name -> its flag, for every field of these options dataclasses (how an error names it;
    with its older spellings, as ``--fixed-cost-ms/--round-overhead-ms``, so either is recognised)."""
    return {
        f.name: "/".join((spec_of(f).flag or flag(f.name), *spec_of(f).aliases))
        for cls in classes
        for f in dataclasses.fields(cls)
    }


def given(args: argparse.Namespace, only: tuple[str, ...] | None = None) -> list[str]:
    """Engine options the user gave (in declaration order; ``only``: among these)."""
    names = [f.name for f in option_fields() if only is None or f.name in only]
    return [name for name in names if getattr(args, name, None) is not None]


def policies(args: argparse.Namespace) -> list[str] | None:
    """The ``--policy`` values in order, once each (None: not given)."""
    return None if args.policy is None else list(dict.fromkeys(args.policy))


def from_args(
    args: argparse.Namespace, one_policy: bool = True, only: tuple[str, ...] | None = None, local: bool = True
) -> EngineOptions:
    """The options the flags give, validated (`ProblemError` naming the option at fault).

    ``one_policy``: the command runs one engine, so ``--policy`` may be given once; ``only``: the
    command declared just these options (`add_engine_flags`), the rest keep their defaults;
    ``local`` False: the engines are built elsewhere (`EngineOptions.validate`)."""
    if (problem := settle_model(args)) is not None:  # a parser other than the CLI's, which settles it
        raise ProblemError(Problem("model", problem))
    values = {name: getattr(args, name) for name in given(args, only)}
    if "policy" in values:
        names = policies(args) or []
        if one_policy and len(names) > 1:
            raise ProblemError(Problem("policy", f"given {len(names)} times: this command runs one engine"))
        for name in names[1:]:  # the first is checked with the options
            EngineOptions.from_mapping({"policy": name})
        values["policy"] = names[0]
    return EngineOptions.from_mapping(values, local=local)
