"""`radixflow/cli/args.py`: the help formatter."""

from __future__ import annotations

import argparse

import pytest

from radixflow.cli.app import build_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(_commands()))
def test_a_flag_whose_help_names_its_default_gets_no_second_one(name):
    """`--max-cells` read "(default: 10000; ...) (default: 10000)": the formatter appends a
    default only where the help does not already say it."""
    parser = _commands()[name]
    formatter = parser._get_formatter()
    for action in parser._actions:
        text = formatter._expand_help(action) if action.help else ""
        assert text.count("(default") <= 1, (action.option_strings, text)


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_flag_has_help(name):
    """`generate --top-p` was listed with no help and no default."""
    assert [a.option_strings for a in _commands()[name]._actions if not a.help] == []
