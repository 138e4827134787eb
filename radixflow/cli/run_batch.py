"""`radixflow run-batch MODEL -i requests.jsonl -o results.jsonl`: an OpenAI batch file run
offline through the server's own routes (`radixflow.server.batch`), with the server's checks,
answers and thread plan, and no socket."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console

from radixflow.cli.args import (
    add_restart_flag,
    check_output_paths,
    engine_inputs,
    note_trace_kept,
    warn,
    warn_ineffective_for_model,
    warn_ineffective_options,
    warn_trace_unwritten,
    write_trace,
)
from radixflow.cli.command import ROUND_LEFT, UsageError, with_notes
from radixflow.cli.extras import require_torch_extra
from radixflow.cli.kept_rows import (
    ROW_LIMITS,
    ROW_OPTIONS,
    SERVER_ERRORS,
    KeptRows,
    go_on_from,
    kept_rows,
    row_limits,
    row_options,
    run_record,
    same_limits,
)
from radixflow.cli.lines_out import check_partial, claimed, output_path, read_input, write_lines
from radixflow.cli.serve_setup import (
    BATCH_EXTRA,
    refuse_setup,
    require_serve_extra,
    threads,
    warn_unused_lane,
)
from radixflow.options.engine_options import EngineOptions
from radixflow.options.flags import (
    add_engine_flags,
    add_option_flags,
    file_path_arg,
    flag_spellings,
    from_args,
    given_values,
    not_stdin,
)
from radixflow.options.machine import HTTP_SHARE, TOKENIZER_THREADS, cpu_count
from radixflow.options.spec import checked
from radixflow.progress import LoggedProgress, RequestBar
from radixflow.server.config import ServerConfig

if TYPE_CHECKING:  # fastapi and the app are imported when the command runs (the serve extra checked first)
    from fastapi import FastAPI

    from radixflow.server.batch import BatchLine, BatchTally


# run-batch runs with no drain: what --drain-timeout says here, and warns of where it is given
NO_DRAIN = (
    "no effect in run-batch: a run cut short aborts the requests in flight at once (an engine stuck "
    "in a round is left behind 5 s later)"
)
# where a server flag does something else here than in `serve` (server/batch.py); each says its
# default here, if it has one
BATCH_HELPS = {
    "max_pending": "engine requests in flight at a time (a scoring body's candidates, a completion's "
    "prompts times n); a body that finds them full is posted again once an answer has made room, "
    f"never answered 429 (default: {ServerConfig.max_pending})",
    "drain_s": NO_DRAIN,
    "tokenizer_threads": "threads that tokenize prompts and build answers beside the event loop "
    f"(default: the server's thread plan, {TOKENIZER_THREADS} up to "
    f"{(TOKENIZER_THREADS + 1) * HTTP_SHARE - 1} CPUs)",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_engine_flags(p, model_required=True)
    add_option_flags(p, ServerConfig, "server limits and threads (as radixflow serve)", BATCH_HELPS)
    g = p.add_argument_group("batch")
    g.add_argument(
        "-i",
        "--input",
        type=not_stdin,
        required=True,
        metavar="PATH",
        help='OpenAI batch JSONL: {"custom_id", "method": "POST", "url", "body"} per line, url one of '
        "/v1/completions, /v1/chat/completions, /v1/score",
    )
    g.add_argument(
        "-o",
        "--output",
        type=file_path_arg,
        metavar="PATH",
        help="where the answers go, one OpenAI batch output line each (default: stdout; - for stdout); "
        "they stream into PATH.partial, which replaces PATH only when every line is answered (a "
        "Ctrl-C or a failure leaves PATH as it was, and the same command goes on from the answers kept "
        "there); a device or a pipe (/dev/stdout) is written in place",
    )
    add_restart_flag(g)


def run(args: argparse.Namespace, console: Console) -> int:
    require_torch_extra("radixflow run-batch")
    require_serve_extra("radixflow run-batch", BATCH_EXTRA)
    from radixflow.generation.setup import load_model
    from radixflow.server.app import create_app
    from radixflow.server.batch import BatchInputError, EngineFailed, read_batch
    from radixflow.server.serve import server_state

    try:
        lines = read_batch(read_input(args.input))
    except BatchInputError as e:
        raise UsageError(f"--input {args.input}: {e}") from None
    options = from_args(args)
    config = checked(ServerConfig, given_values(args, ServerConfig))
    trace = None if options.trace_out is None else Path(options.trace_out)
    output = output_path(args.output)
    inputs = {"--input": args.input, **engine_inputs(options)}
    check_output_paths({"--output": output, "--trace-out": trace}, inputs)
    with claimed("--output", output):  # held to the end: another run for --output is refused
        check_partial("--output", output, inputs | {"--trace-out": trace})
        # asdict's fields (the partial's digest as before), the body uncopied: asdict recursed too deep
        answers = ({**vars(line)} for line in lines)
        record = run_record("run-batch", answers, _row_options(options, config), _row_limits(options, config))
        lines, kept = _go_on(output, args.restart, record, lines)
        options, config = _settled(args, options, config)
        model = load_model(options)
        warn_ineffective_for_model(args, model.setup.choice.has_recurrent)
        state = server_state(model, config)
        try:
            app = create_app(state)
            tally = _write_answers(app, lines, config.max_pending, output, kept, record, args.restart)
        except EngineFailed as e:  # a failure, said as score's: its notes say where the answers are
            print(f"radixflow: error: {with_notes(str(e), e)}", file=sys.stderr)
            warn_trace_unwritten(model.setup)  # the engine loop wrote it as it ended: after that line
            return 1
        except BaseException as e:
            # stuck past its grace, or a second Ctrl-C while the app's shutdown waited for it:
            # `main` ends the process after its line, not waiting on the engine thread
            if state.loop.abandoned or not state.loop.join(timeout=0):
                e.add_note(ROUND_LEFT)
            elif isinstance(e, KeyboardInterrupt):  # the engine loop wrote the trace as it ended
                note_trace_kept(model.setup, e)
            raise
        print(f"radixflow: {tally.line()}", file=sys.stderr)
        write_trace(model.setup)  # after the answers: a trace the disk refuses costs none of them
        # as score --input: a script can tell a file with failed lines
        return 1 if tally.failed or _failed(kept) else 0


def _settled(
    args: argparse.Namespace, options: EngineOptions, config: ServerConfig
) -> tuple[EngineOptions, ServerConfig]:
    """The options with the run's thread plan and its server config, after what the model's setup
    refuses and then the warnings (only a run that goes on is warned of)."""
    options, tokenizer_threads = threads(options, args.tokenizer_threads, cpu_count())
    refuse_setup(options)
    warn_ineffective_options(args, options)  # after the thread plan: the clock warning counts its threads
    warn_unused_lane(args, config)
    if args.drain_s is not None:
        warn(f"--drain-timeout has {NO_DRAIN}")
    # no drain: a run cut short has aborted its requests, so only a stuck engine would be
    # waited for, --drain-timeout (30 s) before its grace
    return options, replace(config, tokenizer_threads=tokenizer_threads, drain_s=0.0)


def _go_on(output: Path | None, restart: bool, record: str, lines: list) -> tuple[list, KeptRows | None]:
    """The lines still to post and the rows kept from a run cut short (None: none kept); a kept
    row the server failed is dropped and its line posted again, and so is a refusal (4xx) kept
    from a run under other `ROW_LIMITS`: a prompt that did not fit its cache may fit this one."""
    kept = kept_rows("--output", output, restart, record)
    if kept is None:
        return lines, None
    from radixflow.server.batch import left_to_run, server_failed, status_code

    again, what = server_failed, SERVER_ERRORS
    if not same_limits(kept):
        again, what = lambda row: (status_code(row) or 0) >= 400, OTHER_LIMITS
    errors = sum(map(again, kept.rows))
    failed = _failed(kept.only(lambda row: not again(row)))
    lines = go_on_from(output, kept, lambda: left_to_run(lines, kept.rows, again), failed, errors, what)
    return lines, kept.only(lambda row: not again(row))


# beside the engine's `ROW_LIMITS`, the server's limits that decide whether a body is run at all,
# never what its answer holds: a body of more engine requests than it queues is answered 400
# ('the server queues N'), one past the size it reads 413
ROW_SERVER_LIMITS = ("max_pending", "max_body_bytes")
# what `_go_on` says of the error answers it drops where they came from a run under other limits
_LIMIT_FLAGS = ", ".join(
    [flag_spellings(EngineOptions)[name] for name in ROW_LIMITS]
    + [flag_spellings(ServerConfig)[name] for name in ROW_SERVER_LIMITS]
)
OTHER_LIMITS = f"of an error (4xx or 5xx) under other {_LIMIT_FLAGS}"


def _row_limits(options: EngineOptions, config: ServerConfig) -> dict[str, Any]:
    """What decides whether a line fits (`run_record`'s ``limits``): `ROW_LIMITS` and
    `ROW_SERVER_LIMITS`, by flag."""
    spell = flag_spellings(ServerConfig)
    return row_limits(options) | {spell[name]: getattr(config, name) for name in ROW_SERVER_LIMITS}


# beside the engine's (`ROW_OPTIONS`), the server option that changes an answer: the max_tokens
# of a chat body without one
ROW_SERVER_OPTIONS = ("default_max_tokens",)


def _row_options(options: EngineOptions, config: ServerConfig) -> dict[str, Any]:
    """What changes an answer (`run_record`'s ``options``): the model, its numerics, the
    sampler's seed (for bodies without one) and `ROW_SERVER_OPTIONS`."""
    spell = flag_spellings(ServerConfig)
    server = {spell[name]: getattr(config, name) for name in ROW_SERVER_OPTIONS}
    return row_options(options, (*ROW_OPTIONS, "seed")) | server


def _failed(kept: KeptRows | None) -> int:
    """The kept answers with an error status (4xx: one of a server error, 5xx, is posted again)."""
    from radixflow.server.batch import SERVER_ERROR, status_code

    return 0 if kept is None else sum(400 <= (status_code(row) or 0) < SERVER_ERROR for row in kept.rows)


def _write_answers(
    app: FastAPI,
    lines: list[BatchLine],
    concurrency: int,
    output: Path | None,
    kept: KeptRows | None,
    record: str,
    restart: bool,
) -> BatchTally:
    """``lines`` answered through ``app``, each answer written where ``output`` says
    (`write_lines`), under a progress bar entered first: on a terminal rich's live bar takes
    standard output over, and answers written to the stream it put there go above the bar, where
    those written behind it began on the bar's line."""
    from radixflow.server.batch import run_batch

    with LoggedProgress(console=Console(stderr=True)) as progress:
        bar = RequestBar(progress, "requests")

        def answer(out: IO[str]) -> BatchTally:
            return asyncio.run(run_batch(app, lines, out, concurrency, bar.hear))

        return write_lines("--output", output, answer, kept, record, restart)
