"""`radixflow score MODEL --context ... --candidate ...`: candidates ranked by their logprob given
one shared context (`LLM.score`), best first; or `--input FILE`: many contexts, each with its own
candidates, from JSONL to JSONL (`cli.score_file`)."""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from radixflow.cli.args import (
    add_restart_flag,
    check_output_paths,
    engine_inputs,
    note_trace_kept,
    require_tokenizer,
    trace_failure_held,
    warn,
    warn_ineffective_for_model,
    warn_ineffective_options,
    warn_trace_unwritten,
    write_trace,
)
from radixflow.cli.command import UsageError, print_finished, with_notes, write_stdout
from radixflow.cli.extras import require_torch_extra
from radixflow.cli.kept_rows import KeptRows, go_on_from, kept_rows, row_options, run_record
from radixflow.cli.lines_out import check_partial, claimed, output_path, write_lines
from radixflow.cli.score_file import left_to_run, run_jobs, score_row
from radixflow.cli.score_inputs import score_inputs
from radixflow.cli.score_lines import ScoreJob, job_record
from radixflow.cli.serve_setup import refuse_setup
from radixflow.generation.scoring import EMPTY_CONTEXT
from radixflow.options.flags import add_engine_flags, file_path_arg, from_args, not_stdin
from radixflow.problems import ProblemError, counted
from radixflow.progress import LoggedProgress, RequestBar

if TYPE_CHECKING:  # the generation package is imported when a command runs (torch extra checked first)
    from radixflow.generation import LLM
    from radixflow.generation.scoring import CandidateScore
    from radixflow.options.engine_options import EngineOptions

ORDERS = ("total", "mean")  # rank by the candidate's log-likelihood, or per token
TOKEN_IDS_BY_FILE = "give token ids in an --input file (a context or candidate may be a list of ids)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_engine_flags(p, model_required=True)
    g = p.add_argument_group("scoring")
    g.add_argument("--context", help="the text every candidate follows")
    g.add_argument(
        "--chat",
        action="store_true",
        help="send the context as a user message through the chat template: the candidates are replies",
    )
    g.add_argument("--candidate", action="append", default=[], help="a continuation to score (repeatable)")
    g.add_argument(
        "--candidates-file",
        type=not_stdin,
        metavar="PATH",
        help="more candidates, one per line as written (leading spaces count; the line break does not)",
    )
    g.add_argument(
        "--rank-by",
        choices=ORDERS,
        default=None,  # not given: by total; given beside --json or --input, refused whatever its value
        help=f"rank --context's candidates by total log-likelihood, or mean per token (default: {ORDERS[0]})",
    )
    g.add_argument("--json", action="store_true", help="print every score as JSON, in the given order")
    g.add_argument(
        "--input",
        type=not_stdin,
        metavar="PATH",
        help='JSONL, one {"context": ..., "candidates": [...], "id": ...} per line (instead of --context; '
        'optional "add_special_tokens": false for a text context without them)',
    )
    g.add_argument(
        "--output",
        type=file_path_arg,
        metavar="PATH",
        help="with --input: where the JSONL results go (default: stdout; - for stdout); they stream "
        "into PATH.partial, which replaces PATH only when every line is done (a Ctrl-C or a failure "
        "leaves PATH as it was, and the same command goes on from the rows kept there); a device or "
        "a pipe (/dev/stdout) is written in place",
    )
    add_restart_flag(g)


def run(args: argparse.Namespace, console: Console) -> int:
    require_torch_extra("radixflow score")
    jobs, candidates = score_inputs(args)
    options = from_args(args)
    outputs = {"--trace-out": None if options.trace_out is None else Path(options.trace_out)}
    output = output_path(args.output)
    inputs = {"--input": args.input, "--candidates-file": args.candidates_file, **engine_inputs(options)}
    check_output_paths(outputs | {"--output": output}, inputs)
    with claimed("--output", output):  # held to the end: another run for --output is refused
        check_partial("--output", output, inputs | outputs)
        record = run_record("score", map(job_record, jobs or []), row_options(options))
        if jobs is None and args.restart:  # kept_rows would name --output, refused beside --context
            warn("--restart: no effect: only --input's rows go to a partial file")
        kept = kept_rows("--output", output, args.restart and jobs is not None, record)  # None: no --input
        if jobs is not None and kept is not None:  # refused, or said, before the model loads
            go_on_from(output, kept, lambda: left_to_run(jobs, kept.rows), _failed(kept))
        refuse_setup(options)  # what the model's setup refuses, before a warning of the run
        warn_ineffective_options(args, options)
        return _score(args, console, options, jobs, candidates, output, kept, record)


def _score(
    args: argparse.Namespace,
    console: Console,
    options: EngineOptions,
    jobs: list[ScoreJob] | None,
    candidates: list[str],
    output: Path | None,
    kept: KeptRows | None,
    record: str,
) -> int:
    """`run` once its inputs are checked and ``output`` is claimed: ``jobs`` (``--input``'s
    lines, those the ``kept`` rows answer too; None: ``candidates`` after ``--context``) scored,
    their rows or the table written; the exit code."""
    from radixflow.generation import LLM, GenerationError

    llm = None
    finished: dict[int, CandidateScore] = {}  # --context's candidates as they are scored, by place
    try:
        llm = LLM.from_options(options)
        if jobs is None:  # --context and --candidate; an --input file may hold token ids
            require_tokenizer(llm, "--context and --candidate are text, which need", TOKEN_IDS_BY_FILE)
            _require_template(args, llm)
            _require_context(args, llm)
        warn_ineffective_for_model(args, llm.model.setup.choice.has_recurrent)
        with LoggedProgress(console=Console(stderr=True)) as progress, trace_failure_held():
            bar = RequestBar(progress, "scoring")
            if jobs is not None:
                code = _run_file(output, llm, jobs, bar, kept, record, args.restart)
                write_trace(llm.model.setup)  # after the rows: a trace the disk refuses costs none
                return code
            context = [{"role": "user", "content": args.context}] if args.chat else args.context
            hear = lambda s: finished.__setitem__(s.index, s)  # noqa: E731
            scores = llm.score(context, candidates, progress=bar.hear, on_candidate=hear)
    except ProblemError:
        raise
    except KeyboardInterrupt as e:  # a Ctrl-C, or a SIGTERM taken as one: the trace is written
        _print_finished(args, console, candidates, finished, e)
        note_trace_kept(None if llm is None else llm.model.setup, e)
        raise
    except ValueError as e:  # the API names the context "context"; the command line gave --context
        raise UsageError(str(e) if jobs is not None else _flagged(args, str(e))) from None
    except GenerationError as e:  # a round failed: the candidates scored before it are still printed
        _print_finished(args, console, candidates, finished, e)
        print(f"radixflow: error: {with_notes(str(e), e)}", file=sys.stderr)
        warn_trace_unwritten(llm.model.setup)  # the LLM ran (its run failed): after that line
        return 1
    _print_scores(args, console, candidates, scores)
    write_trace(llm.model.setup)
    return 0


def _flagged(args: argparse.Namespace, said: str) -> str:
    """The API's refusal of ``--context`` or of a candidate ("context: ...", "candidate 3: ...")
    named by the flag that gave it, as the command's own refusals are ("--candidates-file: line
    2 of PATH is empty": the candidates of ``--candidate`` come first, then the file's lines)."""
    if said.startswith("context: "):
        return f"--{said}"
    found = re.match(r"candidate (\d+): ", said)
    if found is None:
        return said
    line = int(found[1]) - len(args.candidate) + 1  # of --candidates-file, where >= 1
    if line < 1:
        return f"--candidate: {said}"
    return f"--candidates-file: line {line} of {args.candidates_file}: {said[found.end() :]}"


def _require_template(args: argparse.Namespace, llm: LLM) -> None:
    """`UsageError` naming ``--chat`` for a model without a chat template: the API's refusal
    says to give the context as text, which is what the command line gave beside the flag."""
    if args.chat and not llm.tokenizer.chat.available:
        raise UsageError("--chat: this model has no chat template (drop --chat to score the context as text)")


def _require_context(args: argparse.Namespace, llm: LLM) -> None:
    """`UsageError` naming ``--context`` for an empty one that the tokenizer adds no token to: a
    tokenizer that starts each text with a BOS token scores the candidates after it alone (their
    unconditional likelihood), as `LLM.score` and /v1/score do, so only the model can say."""
    if args.context == "" and not args.chat and not llm.tokenizer.encode(""):
        raise UsageError(f"--context: {EMPTY_CONTEXT}")


def _failed(kept: KeptRows | None) -> int:
    """The kept rows of lines the model refused (error lines)."""
    return 0 if kept is None else sum("error" in row for row in kept.rows)


def _run_file(
    output: Path | None,
    llm: LLM,
    jobs: list[ScoreJob],
    bar: RequestBar,
    kept: KeptRows | None,
    record: str,
    restart: bool,
) -> int:
    """Every job of ``--input`` that the ``kept`` rows of an earlier run do not answer (`_standing`),
    a JSON line each to ``output`` (None: stdout) as it ends, its partial file recording ``record``
    (`run_record`; ``restart``: ``--restart`` was given); 1 when the model refused a line (its error
    line is in the output, kept or new), else 0."""
    kept = _standing(llm, jobs, kept)
    left = jobs[len(kept.rows) :] if kept is not None else jobs
    tally = write_lines(
        "--output",
        output,
        lambda out: run_jobs(left, llm.score_many, llm.scoring_tokens, out, bar.hear),
        kept,
        record,
        restart,
    )
    print(f"radixflow: {tally.line()}", file=sys.stderr)
    return 1 if tally.failed or _failed(kept) else 0


def _standing(llm: LLM, jobs: list[ScoreJob], kept: KeptRows | None) -> KeptRows | None:
    """``kept`` (an earlier run's rows of the first ``jobs``) up to the first refusal this run
    does not give in the same words: a line refused under a cache of another size ('does not fit
    in the KV cache', ``--kv-blocks``) may fit this one. That row and those after it are dropped,
    to run again in the input's order, and a line on stderr says so."""
    if kept is None:
        return None
    for n, (row, job) in enumerate(zip(kept.rows, jobs, strict=False), 1):
        error = row.get("error")
        said = error.get("message") if isinstance(error, dict) else None
        if error is not None and said != llm.scoring_problem(
            job.context, job.candidates, add_special_tokens=job.add_special_tokens
        ):
            counts = f"{counted(n - 1, 'row')} kept, {counted(len(jobs) - n + 1, 'line')} to run"
            print(
                f"radixflow: row {n} of {kept.partial} is a refusal this run does not give: it and the "
                f"rows after it run again ({counts})",
                file=sys.stderr,
            )
            return kept.first(n - 1)
    return kept


def _print_finished(
    args: argparse.Namespace,
    console: Console,
    candidates: list[str],
    finished: dict[int, CandidateScore],
    stopped: BaseException,
) -> None:
    """The candidates a run ``stopped`` cut short (a Ctrl-C, a failed round) had scored, printed
    as a whole run prints them (in ``--json``'s list each at its place, null for the others; in
    the table ranked among themselves); ``stopped`` gets a note saying so, or why they could not be."""
    if not finished:
        return
    others = ", null for the others" if args.json else ""
    said = f"{len(finished)} of {counted(len(candidates), 'candidate')} scored, printed above{others}"
    scores = [finished[i] for i in sorted(finished)]
    show = functools.partial(_print_scores, args, console, candidates, scores)
    print_finished(stopped, show, f"{said} (the same command scores them all again)")


def _print_scores(
    args: argparse.Namespace, console: Console, candidates: list[str], scores: list[CandidateScore]
) -> None:
    """``scores`` (each candidate's, or those scored of a run cut short: null in ``--json``'s list
    for the others) as JSON in the candidates' order, or ranked in a table."""
    if args.json:
        by_place = {s.index: score_row(candidates[s.index], s) for s in scores}
        rows = [by_place.get(i) for i in range(len(candidates))]
        write_stdout(json.dumps(rows, indent=2, allow_nan=False) + "\n")
        return
    table = Table("rank", "candidate", "tokens", "total logprob", "mean", "greedy", "cached")
    ranked = sorted(scores, key=lambda s: getattr(s, args.rank_by or ORDERS[0]), reverse=True)
    for rank, s in enumerate(ranked, 1):
        text = Text(candidates[s.index])  # no markup or emoji code is read in it
        greedy = "yes" if s.greedy else ""
        figures = (len(s.token_ids), f"{s.total:.4f}", f"{s.mean:.4f}", greedy, s.cached_tokens)
        table.add_row(str(rank), text, *map(str, figures))
    console.print(table)
