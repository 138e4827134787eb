"""`radixflow cost`: the predicted time of one worker call of a sim model, term by term."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from radixflow.cli.args import int_arg
from radixflow.cli.command import UsageError, write_stdout
from radixflow.costmodel.hardware.profile_files import resolve_hardware
from radixflow.costmodel.round_cost.breakdown import RoundBreakdown
from radixflow.costmodel.round_cost.by_profile import round_cost_model
from radixflow.costmodel.round_cost.tensor_parallel import uneven_split
from radixflow.costmodel.shape.chunk import ChunkShape
from radixflow.costmodel.shape.model_shape import ModelShape
from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS
from radixflow.options.engine_options import option_problem
from radixflow.options.flag_warnings import unmodelled_scheduler, unread_flops
from radixflow.options.flags import add_engine_flags, from_args, given
from radixflow.options.model_arg import add_model_argument
from radixflow.options.sim_choice import sim_hardware
from radixflow.options.sim_shape import sim_shape
from radixflow.problems import ProblemError, counted, flag

# the engine options that change one worker call's cost, declared and checked as every command does
ENGINE_OPTIONS = (
    "hardware",
    "fixed_cost_ms",
    "decode_fixed_cost_ms",
    "per_request_ms",
    "scheduler_time",
    "tflops",
)
DEFAULT_PREFILL = 512
MAX_DECODE = 1 << 16  # sequences in one decode batch


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_argument(
        p,
        f"a sim shape ({', '.join(SIM_MODELS)}), a zoo model (see `radixflow models`) or a "
        "checkpoint directory, costed by its config",
    )
    p.add_argument(
        "--prefill",
        type=int_arg(positive=True),
        metavar="TOKENS",
        help=f"one prefill chunk of TOKENS new tokens after --context cached ones, sampled at its end "
        f"(default: {DEFAULT_PREFILL} when --decode is not given)",
    )
    p.add_argument(
        "--context",
        type=int_arg(),
        default=0,
        metavar="C",
        help="tokens cached before the prefill chunk (a hybrid model restores its state there) and "
        "before each decode step's one new token",
    )
    p.add_argument(
        "--decode",
        type=int_arg(positive=True, high=MAX_DECODE),
        metavar="BATCH",
        help="BATCH sequences of one decode step each (with --prefill: a mixed round)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='print {"seconds", "tp", "fits", "terms": {name: {"seconds", "flops", "bytes", "source"}}} '
        "(fits: false where the model does not fit even on tp GPUs)",
    )
    add_engine_flags(p, only=ENGINE_OPTIONS)


def round_chunks(
    shape: ModelShape, prefill: int | None, context: int, decode: int | None
) -> list[ChunkShape]:
    """The chunks of the round the flags describe (a user mistake is a `UsageError`)."""
    given = "--prefill"
    if prefill is None and decode is None:
        prefill, given = DEFAULT_PREFILL, "the default --prefill"  # not a value the user typed
    end = context + max(prefill or 0, 1)
    if end > shape.max_context:
        what = f"--context {context} plus {given} {prefill}" if prefill else f"--context {context}"
        raise UsageError(f"{what} reaches past {shape.name}'s context of {shape.max_context} tokens")
    chunks = []
    if prefill:
        restores = context > 0 and shape.has_recurrent
        chunks.append(ChunkShape(context, prefill, sample=True, restores=restores))
    chunks += [ChunkShape(context, 1, sample=True)] * (decode or 0)
    return chunks


def run(args: argparse.Namespace, console: Console) -> int:
    options = from_args(args, only=ENGINE_OPTIONS)
    # the name's own check first (empty, a NUL), in the words every door says it in
    if (problem := option_problem("model", args.model)) is not None:
        raise ProblemError(problem)
    shape = sim_shape(args.model)  # a `ProblemError` on model for a name that is none of them
    chunks = round_chunks(shape, args.prefill, args.context, args.decode)
    hardware = sim_hardware(options)
    for name, reason in (("tflops", unread_flops), ("scheduler_time", unmodelled_scheduler)):
        if name in given(args, ENGINE_OPTIONS) and (why := reason(options.hardware)):
            print(f"radixflow: warning: {flag(name)} has no effect {why}", file=sys.stderr)
    for message in other_call_warnings(given(args, ENGINE_OPTIONS), chunks, options.hardware):
        print(f"radixflow: warning: {message}", file=sys.stderr)
    cost = round_cost_model(shape, hardware).breakdown(chunks)
    if not cost.fits:
        print(
            f"radixflow: warning: {shape.name} does not fit even on {cost.tp} GPUs of {hardware.name}",
            file=sys.stderr,
        )
    if cost.tp > 1 and (uneven := uneven_split(shape, cost.tp)) is not None:
        print(
            f"radixflow: warning: {shape.name} on {cost.tp} GPUs of {hardware.name}: {uneven} (vLLM "
            "refuses such a split); each GPU is priced at its rounded-up share",
            file=sys.stderr,
        )
    if args.json:
        write_stdout(json.dumps(cost.to_json(), allow_nan=False) + "\n")
    else:
        _print(
            cost,
            f"{shape.name} on {hardware.name}",
            _describe(chunks, prefill=args.prefill is not None or args.decode is None),
            console,
        )
    return 0


def other_call_warnings(given_names: list[str], chunks: list[ChunkShape], hardware: str) -> list[str]:
    """Warnings for a fixed cost given for the other kind of call than this one: a decode-only
    call's for a call with a prefill, or a call with prefill's where the profile prices a
    decode-only call by its own figure and has no per-layer part that ``--fixed-cost-ms`` drops."""
    decode_only = all(c.decode_step for c in chunks)
    out = []
    if "decode_fixed_cost_ms" in given_names and not decode_only:
        out.append("--decode-fixed-cost-ms has no effect: this call has a prefill, priced by --fixed-cost-ms")
    profile = resolve_hardware(hardware)  # read once already: the options were checked
    own = profile.decode_overhead_s is not None or "decode_fixed_cost_ms" in given_names
    if "fixed_cost_ms" in given_names and decode_only and own and not profile.layer_overhead_s:
        out.append("--fixed-cost-ms has no effect: a decode-only call is priced by --decode-fixed-cost-ms")
    return out


def _describe(chunks: list[ChunkShape], prefill: bool) -> str:
    """The round as the flags asked for it: ``prefill``, its first chunk is the prefill (of one
    token, a chunk the cost model prices as a decode step, as the sim does: said so)."""
    parts = []
    if prefill:
        first, *chunks = chunks
        as_decode = " (one new position: priced as a decode step)" if first.decode else ""
        parts.append(f"prefill {counted(first.length, 'token')} after {first.start} cached{as_decode}")
    if chunks:
        parts.append(f"{counted(len(chunks), 'decode step')} after {chunks[-1].start} cached")
    return ", ".join(parts)


def _rate(amount: float, seconds: float, scale: float) -> str:
    return f"{amount / seconds / scale:,.1f}" if amount and seconds > 0 else ""


def _print(cost: RoundBreakdown, what: str, round_: str, console: Console) -> None:
    total = cost.seconds
    line = f"{what} (tp {cost.tp}): {round_}: {total * 1e3:.3f} ms"  # a checkpoint's name is not markup
    console.print(line, soft_wrap=True, highlight=False, markup=False)
    table = Table()
    for column in ("term", "ms", "share", "TFLOP/s", "GB/s"):
        table.add_column(column, justify="left" if column == "term" else "right")
    for name, t in cost.terms.items():
        share = f"{t.seconds / total:.1%}" if total > 0 else ""
        flops, bandwidth = _rate(t.flops, t.seconds, 1e12), _rate(t.bytes, t.seconds, 1e9)
        table.add_row(name, f"{t.seconds * 1e3:.3f}", share, flops, bandwidth)
    console.print(table)
    for name, t in cost.terms.items():
        console.print(f"[bold]{name}[/bold]: {escape(t.source)}", highlight=False)
