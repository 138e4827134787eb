"""Argument types and checks shared by the commands."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from radixflow.cli.command import UsageError


def _number(kind: type, positive: bool) -> Callable[[str], object]:
    """argparse type: a number of ``kind`` that is > 0 (``positive``) or >= 0."""

    def parse(text: str) -> object:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a valid {kind.__name__}: {text!r}") from None
        if value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"must be {'positive' if positive else '>= 0'}, got {text}")
        return value

    return parse


positive_int, positive_float = _number(int, True), _number(float, True)
non_negative_int, non_negative_float = _number(int, False), _number(float, False)


def check_output_paths(*paths: Path | None) -> None:
    """Fail before a long run, not after it, when a result file cannot be written."""
    for path in paths:
        if path is not None and not path.resolve().parent.is_dir():
            raise UsageError(f"cannot write {path}: directory {path.parent} does not exist")
        if path is not None and path.is_dir():
            raise UsageError(f"cannot write {path}: it is a directory")
