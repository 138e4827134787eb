"""The files an experiment config's cells name, read relative to the config: profile files
(`profile_path`, checked), checkpoint directories (`model_path`) and trace files (`output_path`),
as absolute paths, never the current directory's; a trace file one cell's alone and never a file
the cell reads (`trace_once`, `cell_reads`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radixflow.costmodel.hardware.profile_checks import ProfileError
from radixflow.costmodel.hardware.profile_files import names_file, resolve_hardware, unknown_hardware
from radixflow.costmodel.hardware.profiles import HARDWARE
from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS
from radixflow.experiments.config_checks import fail
from radixflow.models.zoo_catalogue import model_names
from radixflow.options.machine import path_length_problem
from radixflow.user_paths import STDOUT, expand_home, stdin_problem

PROFILE_KEYS = ("hardware", "cost_profile")  # a built-in profile's name, or a profile file's path


def trace_once(path: Any, origin: str, key: str, taken: dict[Path, str], reads: dict[Path, str]) -> None:
    """A trace file is one cell's (``trace_out``, one path a cell): every cell writes its trace
    whole, so a second cell writing the same file replaced the first's without a word. ``taken``
    maps the files seen so far to the key that set them and gains this one; ``reads`` maps the
    files the cell reads (`cell_reads`) to what names them, which its trace would replace. The
    file is opened (and removed again if new) so one that cannot be written is refused before
    any cell runs."""
    if not isinstance(path, str):
        return  # None: no trace (a wrong type is reported with the other checks)
    resolved = Path(path).resolve()
    if resolved in reads:
        raise fail(origin, key, f"cannot write {path}: the same file as {reads[resolved]}")
    if resolved in taken:
        why = f"{path!r} would hold the trace of more than one cell (also set by {taken[resolved]})"
        raise fail(origin, key, f"{why}, each replacing the last's: set it in a grid of one cell")
    taken[resolved] = key
    existed = resolved.exists()
    try:  # opened now, as bench opens its outputs before any work, and not left behind
        with open(resolved, "a"):
            pass
    except OSError as e:
        raise fail(origin, key, f"cannot write {path}: {e.strerror or e}") from None
    if not existed:
        resolved.unlink(missing_ok=True)


def traces_unread(
    traces: dict[Path, str], reads: dict[Path, str], model_dirs: dict[Path, str], origin: str
) -> None:
    """Refuse a trace file (``traces``: each to the key that set it) that another cell reads
    (``reads``: every cell's `cell_reads`, to where the config names it) or that lies in a cell's
    checkpoint directory (``model_dirs``, likewise: its config, weights and tokenizer are there):
    its trace would replace them, before or after that cell ran. A cell's own reads are
    `trace_once`'s."""
    for path, key in traces.items():
        if path in reads:
            why = f"the same file as {reads[path]}, which a cell reads"
            raise fail(origin, key, f"cannot write {path}: {why}")
        for folder, model in model_dirs.items():
            if path.is_relative_to(folder):
                raise fail(origin, key, f"cannot write {path}: inside the model directory of {model}")


def model_dir(model: Any) -> Path | None:
    """The checkpoint directory a checked cell's ``model`` names (`model_path` made it absolute),
    resolved; None for a sim shape or a zoo name."""
    if not isinstance(model, str) or not os.path.isdir(model):
        return None
    return Path(model).resolve()


def cell_reads(settings: dict[str, Any], origin: str) -> dict[Path, str]:
    """The files a checked cell reads, resolved, to what names them: the config (``origin``,
    where it is a file) and its profile files (`PROFILE_KEYS`, absolute by now)."""
    reads = {Path(origin).resolve(): "the config"} if Path(origin).is_file() else {}
    for key in PROFILE_KEYS:
        value = settings.get(key)
        if isinstance(value, str) and value not in HARDWARE:
            reads[Path(value).resolve()] = key
    return reads


def profile_path(value: Any, origin: str, key: str, base: Path) -> Any:
    """A profile file named relative to the config, as an absolute path (built-in names as they are)."""
    if not isinstance(value, str) or value in HARDWARE or not value.strip():
        return value  # a wrong type or an empty name is reported with the other checks
    if "\x00" in value:
        raise fail(origin, key, f"{value!r} contains a NUL character")
    if (why := stdin_problem(value)) is not None:  # as every door says it, not a file named -
        raise fail(origin, key, why)
    if (problem := path_length_problem(key, value)) is not None:  # before the os is asked of it
        raise fail(origin, key, problem.message)
    path = (base / expand_home(value)).resolve()  # "~/p.json", as a model path is read
    if not names_file(path):  # a mistyped name ("h10"): said as typed, as every door says it
        raise fail(origin, key, unknown_hardware(value))
    try:
        resolve_hardware(str(path))
    except ProfileError as e:
        raise fail(origin, key, str(e)) from None
    return str(path)


def output_path(value: Any, base: Path) -> Any:
    """A file a cell writes (``trace_out``) named relative to the config, as an absolute path, as
    the files it reads are (`profile_path`): not the current directory's, which changes with where
    the command runs. Joined, not resolved, so a trailing separator stays for the options' check
    to refuse; ``-`` and a wrong type or empty name as they are, for the same check."""
    if not isinstance(value, str) or not value.strip() or value == STDOUT:
        return value
    return os.path.join(os.path.abspath(base), expand_home(value))


def model_path(value: Any, base: Path) -> Any:
    """A checkpoint directory named relative to the config, as an absolute path, as a profile file
    is (zoo names and sim shapes as they are). A bare name that is a directory neither beside the
    config nor in the current one is kept: the model check says it names no model (and lists
    those that are); a path (``sub/ck``) is made absolute all the same, so that check names where
    it was looked for."""
    if not isinstance(value, str) or not value.strip() or "\x00" in value or _too_long(value):
        return value  # the model check reports it
    if value in SIM_MODELS or value in model_names():
        return value
    given = Path(expand_home(value))  # "~/ck", as the loader reads it
    bare = len(given.parts) == 1 and not value.startswith(".")
    if bare and not (base / given).exists() and not given.exists():
        return value
    return str((base / given).resolve())  # never the current directory's, where only it has one


def _too_long(value: str) -> bool:
    """A name no file system path holds: the options' check says so, where a look at it would raise."""
    return path_length_problem("path", value) is not None


@dataclass
class CellFiles:
    """Every checked cell's files, each to where the config names it: its trace (one cell's
    alone), the files it reads and its checkpoint directory, so that no trace is written over
    another cell's input (`check`, once every cell is noted)."""

    origin: str
    traces: dict[Path, str] = field(default_factory=dict)
    reads: dict[Path, str] = field(default_factory=dict)
    model_dirs: dict[Path, str] = field(default_factory=dict)

    def note(self, settings: dict[str, Any], loc: Callable[[str], str]) -> None:
        """A checked cell's files, ``loc`` naming the config key each came from (mutates this;
        `trace_once` refuses a trace another cell writes or this cell reads)."""
        reads = cell_reads(settings, self.origin)
        trace_once(settings["trace_out"], self.origin, loc("trace_out"), self.traces, reads)
        for path, what in reads.items():
            self.reads.setdefault(path, what if what == "the config" else loc(what))
        folder = model_dir(settings["model"])
        if folder is not None:
            self.model_dirs.setdefault(folder, loc("model"))

    def check(self) -> None:
        """Refuse a trace that another cell reads or that sits in a cell's checkpoint directory."""
        traces_unread(self.traces, self.reads, self.model_dirs, self.origin)
