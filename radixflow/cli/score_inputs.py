"""`radixflow score`'s inputs, checked before the model loads: ``--input``'s lines, or
``--context`` and the candidates of ``--candidate`` and ``--candidates-file``, each refusal naming
its flag."""

from __future__ import annotations

import argparse
from pathlib import Path

from radixflow.cli.command import UsageError, not_utf8
from radixflow.cli.score_lines import ScoreJob, read_jobs
from radixflow.jsonl import read_text


def score_inputs(args: argparse.Namespace) -> tuple[list[ScoreJob] | None, list[str]]:
    """The input file's jobs (None without ``--input``) and the candidates of the flags."""
    if args.input is not None:
        flags = {"--context": args.context, "--chat": args.chat, "--candidate": args.candidate}
        given = [flag for flag, value in flags.items() if value not in (None, False, [])]
        given += ["--candidates-file"] * (args.candidates_file is not None)
        if given:  # a flag given is named, even one whose value is empty
            raise UsageError(f"--input: the file gives contexts and candidates; drop {given[0]}")
        if args.rank_by is not None:
            raise UsageError("--input: each line's scores come in its candidates' order; drop --rank-by")
        return read_jobs(args.input), []
    if args.output is not None:
        raise UsageError("--output: only with --input (the ranking of --context is printed)")
    if args.json and args.rank_by is not None:
        raise UsageError("--json: the scores come in the candidates' order; drop --rank-by")
    candidates = list(args.candidate) + _read_candidates(args.candidates_file)
    if args.context is None:
        raise UsageError("no context: give --context TEXT, or --input PATH with many")
    _check_utf8(args.context, args.candidate)
    if not candidates:
        raise UsageError("no candidates: give --candidate TEXT (repeatable) or --candidates-file PATH")
    empty = next((i for i, c in enumerate(args.candidate) if not c), None)
    if empty is not None:  # by its flag, before the model loads (as an empty --context)
        raise UsageError(f"--candidate: candidate {empty} is empty")
    return None, candidates


def _check_utf8(context: str, candidates: list[str]) -> None:
    """`UsageError` naming the flag for text with no UTF-8 form, before the model loads (it was
    the tokenizer's refusal once it had): a byte of the command line that is not UTF-8."""
    said = not_utf8(context)
    if said is not None:
        raise UsageError(f"--context: {said}")
    bad = next(((i, said) for i, c in enumerate(candidates) if (said := not_utf8(c)) is not None), None)
    if bad is not None:
        raise UsageError(f"--candidate: candidate {bad[0]} is {bad[1]}")


def _read_candidates(path: Path | None) -> list[str]:
    if path is None:
        return []
    try:
        # as bytes: a lone carriage return inside a line stays (text mode would end the line there);
        # a byte-order mark is not the first candidate's
        text = read_text(path)
    except OSError as e:
        raise UsageError(f"--candidates-file: cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:  # a byte that is not UTF-8, named by its line
        raise UsageError(f"--candidates-file {path}: {e}") from None
    # at newlines only (a CRLF's carriage return dropped): `str.splitlines` would also end a line
    # at a form feed, U+2028 and the like, cutting a candidate that holds one in two
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines[-1] == "":  # the newline that ends the last line starts no candidate
        lines.pop()
    if not lines:  # else taken for no --candidates-file given at all
        raise UsageError(f"--candidates-file: {path} holds no candidates")
    empty = next((n for n, line in enumerate(lines, 1) if not line), None)
    if empty is not None:  # said of the file's line: a candidate's number means nothing in a file
        raise UsageError(f"--candidates-file: line {empty} of {path} is empty (each line is a candidate)")
    return lines
