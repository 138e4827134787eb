"""`radixflow calibrate`: arguments, progress, the error table and the profile file."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from radixflow.calibration.fit import FitError, ModelError, flat_fits
from radixflow.calibration.run import CalibrationPlan, calibrate, refit, total_batches
from radixflow.calibration.timing import KEPT, TimedBatch, default_clock
from radixflow.costmodel.hardware.profile_checks import ProfileError
from radixflow.costmodel.hardware.profile_files import save_profile
from radixflow.costmodel.hardware.profiles import HARDWARE, HardwareProfile
from radixflow.costmodel.shape.model_shape import ModelShape
from radixflow.engine.clocks import ROUND_CLOCKS
from radixflow.options.flags import file_path_arg, not_stdout, parse_int
from radixflow.options.model_arg import model_spelling
from radixflow.problems import warn
from radixflow.progress import LoggedProgress

ACCEPTABLE = 0.15  # median absolute error on held-out rounds that the issue accepts
# flag -> (least, most): past these a typo would time for hours; 256 tokens hold the fit grid
LIMITS = {"repeats": (1, 100), "held_out": (1, 1000), "max_tokens": (256, 65536)}


class CalibrationUsageError(ValueError):
    """A user mistake in the calibrate arguments (one line)."""


def _range(flag: str) -> str:
    """``flag``'s accepted values, as its help states them (`_plan` refuses the rest)."""
    low, high = LIMITS[flag]
    return f"{low} to {high}"


def add_arguments(c: argparse.ArgumentParser) -> None:
    """calibrate's own flags; its MODEL, argument or flag, is every command's (`add_model_argument`)."""
    c.add_argument(
        "--out",
        type=not_stdout(file_path_arg, "the profile: it is a file for --hardware to read"),
        help="profile file to write (default: profile-DEVICE.json, the device's colon dropped: "
        "profile-cpu.json, profile-cuda0.json for cuda:0)",
    )
    c.add_argument("--name", help="profile name (default: <device>-calibrated)")
    c.add_argument(
        "--repeats",
        type=parse_int,
        default=5,
        help=f"timings per batch shape (see --keep), {_range('repeats')}",
    )
    c.add_argument(
        "--keep",
        choices=sorted(KEPT),
        default=CalibrationPlan.kept,
        help="which of a shape's timings the fit takes: min, the undisturbed cost (default); median, "
        "the typical round (the profile also records the σ of the repeats: calibration.round_noise_sigma)",
    )
    c.add_argument(
        "--held-out",
        type=parse_int,
        default=12,
        help=f"held-out batch shapes per model, {_range('held_out')}",
    )
    c.add_argument(
        "--max-tokens",
        type=parse_int,
        default=CalibrationPlan.max_tokens,
        help=f"largest batch timed, in tokens, {_range('max_tokens')} "
        "(default: the scheduler's round budget, %(default)s)",
    )
    c.add_argument(
        "--clock",
        choices=sorted(ROUND_CLOCKS),
        help="cpu: CPU time of the thread running the worker call, as the engine's --clock cpu (one "
        "thread: the undisturbed wall time, even on a busy machine; a CPU device only); wall: "
        "wall-clock time (default: cpu on cpu, wall on other devices)",
    )


def default_out(device: str) -> Path:
    """The profile file written without ``--out``."""
    return Path(f"profile-{device.replace(':', '')}.json")


def _plan(args: argparse.Namespace) -> CalibrationPlan:
    for flag, (low, high) in LIMITS.items():
        value = getattr(args, flag)
        if not low <= value <= high:
            name = "--" + flag.replace("_", "-")
            raise CalibrationUsageError(f"{name}: must be from {low} to {high}, got {value}")
    if args.clock == "cpu" and default_clock(args.device) != "cpu":  # as timing.py says of a GPU
        raise CalibrationUsageError(
            f"--clock cpu on --device {args.device}: the CPU clock leaves out the device's work a "
            "round waits for; use --clock wall (the default there)"
        )
    if (args.clock or default_clock(args.device)) == "cpu" and args.threads != 1:
        default = "" if args.clock else " (the default on a CPU)"
        raise CalibrationUsageError(
            f"--torch-threads {args.threads} with --clock cpu{default}: the CPU clock times one "
            "thread; use --torch-threads 1, or --clock wall"
        )
    return CalibrationPlan(
        _distinct_models(args.model, model_spelling(args)),
        args.device,
        args.max_tokens,
        args.held_out,
        args.repeats,
        args.threads,
        args.clock or default_clock(args.device),
        kept=args.keep,
        dtype=args.dtype,
        kernels=args.kernels,
        matmul=args.matmul,
    )


def _distinct_models(names: list[str], said: str) -> tuple[str, ...]:
    """Each model once (``said``: how the user gave them, MODEL or ``--model``): a name given
    twice is one model; one checkpoint under two spellings (``ck``, ``./ck``, a link to it) is
    refused, as it would be timed as two models whose own fits are stored under one key, the
    second overwriting the first."""
    from radixflow.models.zoo import model_key

    seen: dict[str, str] = {}  # model_key -> the name as first given
    for name in dict.fromkeys(names):
        key = model_key(name)
        if key in seen:
            raise CalibrationUsageError(
                f"{said}: {seen[key]!r} and {name!r} are the same checkpoint ({key}); give it once"
            )
        seen[key] = name
    return tuple(seen.values())


def _own_fits(
    timed: list[TimedBatch], profile_models: list[str], plan: CalibrationPlan
) -> dict[str, HardwareProfile]:
    """Each model fitted on its own rounds alone (shown beside the joint fit; what the torch
    runner's round predictor starts from)."""
    return {model: _own_fit(model, [t for t in timed if t.model == model], plan) for model in profile_models}


def _median_error(profile: HardwareProfile) -> float:
    return float((profile.calibration or {})["errors"][0]["median_abs_error"])


def _own_fit(model: str, timed: list[TimedBatch], plan: CalibrationPlan) -> HardwareProfile:
    from radixflow.calibration.run import model_shape

    return refit(model, timed, {model: model_shape(model)}, plan.device, plan.dtype)[0]


def _store_own_fits(
    own: dict[str, HardwareProfile], plan: CalibrationPlan, console: Console, runners: dict[str, dict]
) -> None:
    """Each model's own fit where the torch runner finds it again (`runners.profile_store`):
    keyed by the model and this machine, with the threads, kernels and matmul routes the timing
    used (``runners``: each model's, as `calibrate` records them)."""
    from radixflow.models.zoo import ensure_model
    from radixflow.runners.profile_store import RunnerSettings, save_stored, store_key

    for model, profile in own.items():
        settings = RunnerSettings(**runners[model])
        key = store_key(ensure_model(model), plan.dtype, plan.device, plan.threads, settings)
        try:
            path = save_stored(profile, key)
        except OSError as e:
            warn(f"{model}'s round profile not stored: {e.strerror or e}")  # the run's results stand
            continue
        threads = f"{plan.threads} torch thread{'s' if plan.threads != 1 else ''}"
        # a run on --matmul auto runs the stored routes (`TorchRunner._route_matmuls`)
        matmul = f"--matmul {settings.matmul} or auto" if settings.matmul else "torch's own matmul"
        console.print(
            f"{model}: round predictor profile stored in {path}; the torch runner starts from it on "
            f"this machine for this model in {plan.dtype} on {plan.device} with {threads}, the "
            f"{settings.kernels} kernels and {matmul} (other runs "
            "start from the nominal prior)",
            markup=False,  # a model may be a directory, named as given
            soft_wrap=True,  # the path whole, to paste (a narrow terminal cut it in two)
        )


def render(errors: list[ModelError], own: dict[str, float], console: Console) -> None:
    table = Table(title="held-out worker-call time: |predicted − measured| / measured")
    # a model name is never cut: it is what the figures are about
    table.add_column("model", no_wrap=True, min_width=max(len(e.model) for e in errors))
    for col in ("fit", "held out", "median error", "max error", *(("own fit: median",) if own else ())):
        table.add_column(col, justify="right")
    for e in errors:
        row = [
            e.model,
            str(e.fit_rounds),
            str(e.held_out_rounds),
            f"{e.median_abs_error:.1%}",
            f"{e.max_abs_error:.1%}",
        ]
        if own:
            row.append(f"{own[e.model]:.1%}")
        table.add_row(*map(Text, row))  # a model as given (a directory), never read as markup
    console.print(table)


def _check_models(plan: CalibrationPlan) -> dict[str, ModelShape]:
    """Resolve (and build, for zoo names) every model and check its checkpoint (config, tensor
    names and shapes; values are read when timing starts) and that its context holds the rounds
    to time, before any timing starts: each model's shape."""
    from radixflow.calibration.run import design, model_shape
    from radixflow.models.io.loader import check_checkpoint
    from radixflow.models.zoo import ensure_model

    shapes = {}
    for model in plan.models:
        try:
            check_checkpoint(ensure_model(model))
            shapes[model] = model_shape(model)
            design(plan, shapes[model])
        except (ValueError, OSError, RuntimeError) as e:  # unknown name, bad checkpoint, unknown model_type
            raise CalibrationUsageError(f"cannot calibrate on {model!r}: {e}") from None
    return shapes


def run(args: argparse.Namespace, console: Console) -> int:
    plan = _plan(args)
    shapes = _check_models(plan)
    out = args.out or default_out(plan.device)
    if out.is_dir() or not out.resolve().parent.is_dir():
        raise CalibrationUsageError(f"cannot write {out}: not a file in an existing directory")
    try:
        profile, errors, own_fits = _time_and_fit(args, plan, shapes)
    except KeyboardInterrupt as e:  # a Ctrl-C, or a SIGTERM taken as one: --out is written only at the end
        kept = f" ({out} is as it was)" if out.exists() else ""
        e.add_note(f"no profile written{kept}: the same command times every batch again")
        raise
    own = {m: _median_error(p) for m, p in own_fits.items()} if len(plan.models) > 1 else {}
    if profile.calibration is not None:
        profile.calibration["own_fit_median_abs_error"] = own
        profile.calibration["threads"] = plan.threads
        profile.calibration["clock"] = plan.clock
        profile.calibration["dtype"] = plan.dtype
    try:
        save_profile(profile, out)
    except OSError as e:  # a disk that filled while timing: one line, as bench says it
        raise CalibrationUsageError(f"cannot write --out {out}: {e.strerror or e}") from None
    _store_own_fits(own_fits, plan, console, (profile.calibration or {}).get("runners", {}))
    timed = [TimedBatch.from_dict(r) for r in (profile.calibration or {}).get("rounds", [])]
    for line in flat_fits(profile, timed, shapes):  # a held-out error of 0% says nothing there
        warn(line)
    render(errors, own, console)
    worst = max(e.median_abs_error for e in errors)
    verdict = "within" if worst <= ACCEPTABLE else "OVER"
    # the path as given, never read as markup (--out "p[red].json" was shown as p.json), on one line
    plain = {"markup": False, "soft_wrap": True}
    console.print(
        f"worst median error {worst:.1%} ({verdict} the {ACCEPTABLE:.0%} target); profile written to {out}",
        **plain,
    )
    # quoted as a shell reads it, so the command runs as pasted ("my p.json", "p[1].json")
    console.print(
        f"use it with: radixflow bench --runner sim --hardware {shlex.quote(hardware_arg(out))}", **plain
    )
    return 0


def hardware_arg(out: Path) -> str:
    """``out`` as ``--hardware`` reads it as this file: a built-in profile's name (``--out h100``)
    would be read as that profile, so it is spelled as a path (``./h100``)."""
    return f"./{out}" if str(out) in HARDWARE else str(out)


def _time_and_fit(
    args: argparse.Namespace, plan: CalibrationPlan, shapes: dict[str, ModelShape]
) -> tuple[HardwareProfile, list[ModelError], dict[str, HardwareProfile]]:
    """Time every batch and fit the profile, and each model's own fit; nothing is written."""
    from radixflow.models.io.loader import CheckpointError  # torch, imported only to calibrate

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with LoggedProgress(*columns, console=Console(stderr=True)) as progress:
        task = progress.add_task("timing worker calls", total=total_batches(plan, shapes))
        try:
            profile, errors = calibrate(
                plan, args.name or f"{plan.device}-calibrated", lambda: progress.advance(task)
            )
        except CheckpointError as e:  # a tensor's values (NaN, infinity) are read only now
            raise CalibrationUsageError(f"cannot calibrate: {e}") from None
        except (ProfileError, FitError) as e:  # figures outside a profile's bounds; rounds timed at 0 s
            raise CalibrationUsageError(f"the timings fit no usable profile: {e}") from None
    timed = [TimedBatch.from_dict(r) for r in (profile.calibration or {}).get("rounds", [])]
    return profile, errors, _own_fits(timed, list(plan.models), plan)
