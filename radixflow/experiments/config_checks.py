"""Checks of an experiment config's single values, names and lists, before any cell is expanded.

The experiment's name becomes a directory (``results/<name>``), so only a plain file name passes;
grid names label the report, so each is one printable line and no two grids share one; no list
(policies, seeds, a swept key's values) names the same thing twice; and the grid's size is known
from its lists' lengths, so a grid too large to run by accident is refused before it is expanded.
Also here: `--seeds` as the command line gives it, a workload value, a profile named by path."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from radixflow.costmodel.hardware.profile_checks import ProfileError
from radixflow.costmodel.hardware.profile_files import resolve_hardware
from radixflow.costmodel.hardware.profiles import HARDWARE
from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS
from radixflow.models.zoo_catalogue import model_names
from radixflow.user_paths import STDOUT, expand_home

MAX_CELLS = 10_000  # cells one config may expand to unless `--max-cells` says more
MAX_SEEDS = 1000  # seeds one `--seeds` may name: a grid times more is not a run to start by accident
MAX_NAME = 100  # characters in an experiment or grid name
SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
SAFE_HELP = "ASCII letters, digits, '-', '_' and '.' (not first): it names the directory results/<name>"


class ExperimentConfigError(ValueError):
    """A config mistake, reported as one line naming the key."""


def fail(origin: str, key: str, why: str) -> ExperimentConfigError:
    return ExperimentConfigError(f"{origin}: {key}: {why}")


def experiment_name(data: dict[str, Any], origin: str) -> str:
    """The ``name`` key, else the config file's stem; either way a plain directory name."""
    if "name" not in data:
        stem = Path(origin).stem
        if not _safe(stem):
            raise fail(origin, "name", f"not given, and the file's name {stem!r} is not one ({SAFE_HELP})")
        return stem
    name = data["name"]
    if not isinstance(name, str):
        raise fail(origin, "name", f"must be a string, got {name!r}")
    if not name:
        raise fail(origin, "name", "must not be empty")
    if not _safe(name):
        raise fail(origin, "name", f"{name!r} is not a plain name ({SAFE_HELP})")
    return name


def _safe(name: str) -> bool:
    return len(name) <= MAX_NAME and SAFE_NAME.fullmatch(name) is not None


def description(data: dict[str, Any], origin: str) -> str:
    text = data.get("description", "")
    if not isinstance(text, str):
        raise fail(origin, "description", f"must be a string, got {text!r}")
    return text


def grid_name(grid: dict[str, Any], where: str, origin: str, taken: dict[str, str]) -> str:
    """The grid's ``name`` (default: ``where``), one printable line no earlier grid has; ``taken``
    maps the names seen so far to their grids and gains this one."""
    name = grid.get("name", where)
    key = f"{where}.name"
    if not isinstance(name, str):
        raise fail(origin, key, f"must be a string, got {name!r}")
    if not name.strip():
        raise fail(origin, key, "must not be empty")
    if not name.isprintable() or len(name) > MAX_NAME:
        raise fail(origin, key, f"must be one line of at most {MAX_NAME} printable characters, got {name!r}")
    if name in taken:
        raise fail(origin, key, f"{name!r} is already the name of {taken[name]}")
    taken[name] = where
    return name


def no_repeats(values: list[Any], origin: str, key: str) -> None:
    """Refuse a list that names one value twice (1 and 1.0 are one value; true and 1 are not)."""
    seen: set[Hashable] = set()
    for value in values:
        identity = _identity(value)
        if identity in seen:
            raise fail(origin, key, f"{value!r} is listed twice")
        seen.add(identity)


def _identity(value: Any) -> Hashable:
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float | str):
        return ("value", value)
    return ("other", repr(value))  # a table or an array: refused later as the wrong type


def seeds(value: Any, origin: str, key: str) -> list[int]:
    if not isinstance(value, list) or not value or any(type(s) is not int or s < 0 for s in value):
        raise fail(origin, key, "must be a non-empty list of integers >= 0")
    no_repeats(value, origin, key)
    return value


def seeded_size(cells: int, seeds: int, limit: int) -> None:
    """Refuse ``cells`` distinct cells on ``seeds`` seeds each (`--seeds`) if more than ``limit``."""
    total = cells * seeds
    if total > limit:
        raise ExperimentConfigError(
            f"--seeds: {total:,} cells ({cells:,} × {seeds:,} seeds), above the limit of {limit:,}; "
            f"pass --max-cells {total} to run them anyway"
        )


def grid_size(lists: list[list[Any]]) -> int:
    """Cells a grid expands to: the product of its lists' lengths."""
    return math.prod(len(values) for values in lists)


def grid_sizes(sizes: dict[str, int], limit: int, origin: str) -> None:
    """Refuse grids of more than ``limit`` cells in all (``sizes``: cells per grid): a run that
    large is asked for by name (`--max-cells`), not started by a slip of a list."""
    total = sum(sizes.values())
    if total <= limit:
        return
    largest = max(sizes, key=lambda where: sizes[where])
    raise fail(
        origin,
        "grid",
        f"expands to {total:,} cells ({largest}: {sizes[largest]:,}), above the limit of {limit:,}; "
        f"pass --max-cells {total} to run them anyway",
    )


def parse_seeds(text: str) -> list[int]:
    """``"3-9"``, ``"0,4,7"`` or both (``"0,3-5"``) as a list of distinct seeds, in order; raises
    ValueError with a one-line reason."""
    seeds: dict[int, None] = {}  # ordered and distinct
    for part in (p.strip() for p in text.split(",")):
        lo, sep, hi = part.partition("-")
        if not _digits(lo) or (sep and not _digits(hi)):
            raise ValueError(f"--seeds: {text!r} is not a list like 3-9 or 0,4,7 of integers >= 0")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"--seeds: the range {part!r} runs backwards")
        if last - first >= MAX_SEEDS:  # refused before a range of billions is spelled out
            raise ValueError(f"--seeds: more than {MAX_SEEDS} seeds")
        seeds.update(dict.fromkeys(range(first, last + 1)))
        if len(seeds) > MAX_SEEDS:  # counted once spelled out: overlapping ranges name a seed once
            raise ValueError(f"--seeds: more than {MAX_SEEDS} seeds")
    return list(seeds)


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


TYPE_WORDS = {int: "an integer", str: "a string", float: "a number"}  # "an integer", as engine options say


def workload_value(origin: str, key: str, value: Any, kind: type | tuple[type, ...]) -> None:
    """A workload value: the type of its default, finite, not negative."""
    if isinstance(value, bool) or not isinstance(value, kind):
        name = TYPE_WORDS.get(kind, "a number") if isinstance(kind, type) else "a number"
        raise fail(origin, key, f"must be {name}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise fail(origin, key, f"must be finite, got {value!r}")
    if isinstance(value, int | float) and value < 0:
        raise fail(origin, key, f"must be >= 0, got {value!r}")


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
    path = (base / expand_home(value)).resolve()  # "~/p.json", as a model path is read
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
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        return value  # the model check reports it
    if value in SIM_MODELS or value in model_names():
        return value
    given = Path(value).expanduser()  # "~/ck", as the loader reads it
    bare = len(given.parts) == 1 and not value.startswith(".")
    if bare and not (base / given).exists() and not given.exists():
        return value
    return str((base / given).resolve())  # never the current directory's, where only it has one


PROFILE_KEYS = ("hardware", "cost_profile")  # a built-in profile's name, or a profile file's path


def profile_digests(settings: dict[str, Any]) -> dict[str, str]:
    """What each profile file a cell names holds (a hash), for its result cache key: a profile
    recalibrated at the same path is another cell. Built-in names are not files: none."""
    digests = {}
    for key in PROFILE_KEYS:
        value = settings.get(key)
        if isinstance(value, str) and value not in HARDWARE:
            try:
                digests[key] = hashlib.sha256(Path(value).read_bytes()).hexdigest()[:16]
            except OSError:
                digests[key] = "unreadable"  # the cell's run reports it
    return digests


# A checkpoint's weights are read by neither the config check nor the key: gigabytes hashed on every
# load (cached cells' keys too) would cost more than many cells' runs. A weight file rewritten at the
# same path has another size or modification time (ns) in all but a copy that keeps both; the small
# files (config.json, the shard index, generation_config.json: the torch runner's extra stop ids)
# are hashed whole.
CHECKPOINT_TEXTS = ("config.json", "model.safetensors.index.json", "generation_config.json")


def checkpoint_digest(directory: Path) -> str:
    """What the checkpoint in ``directory`` is, for a cell's key: its config, shard index and
    generation config (a hash of each), and each weight file's name, size and modification time."""
    files: dict[str, Any] = {}
    for name in CHECKPOINT_TEXTS:
        if (directory / name).is_file():
            files[name] = hashlib.sha256((directory / name).read_bytes()).hexdigest()
    for weights in sorted(directory.glob("*.safetensors")):
        stat = weights.stat()
        files[weights.name] = [stat.st_size, stat.st_mtime_ns]
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


def model_digests(settings: dict[str, Any]) -> dict[str, str]:
    """A cell's checkpoint directory (``model``) for its result cache key: new weights or config at
    the same path are another cell. Zoo names and sim shapes are no directory: none, so their
    cells keep their keys (a zoo build is fixed by its name, `models.zoo.build_digest`)."""
    value = settings.get("model")
    if not isinstance(value, str) or value in SIM_MODELS or value in model_names():
        return {}
    try:
        return {"model": checkpoint_digest(Path(value))}
    except OSError:
        return {"model": "unreadable"}  # the cell's run reports it


def stored_profile_digests(settings: dict[str, Any]) -> dict[str, str]:
    """A torch cell's stored round profiles (`runners.profile_store`: what `radixflow calibrate`
    stored for its model, its round predictor's prior, which the policies weigh rounds by), for its
    key: a model calibrated anew is another cell. Every machine's and dtype's, as the key cannot
    name the machine that runs the cell without torch; none stored: none, so the key stays."""
    model = settings.get("model")
    if settings.get("runner") != "torch" or not isinstance(model, str):
        return {}
    from radixflow.models.zoo import default_cache_dir
    from radixflow.runners.profile_store import stored_profiles

    checkpoint = default_cache_dir() / model if model in model_names() else Path(model)
    try:
        files = {str(p.relative_to(p.parents[1])): p.read_bytes() for p in stored_profiles(checkpoint)}
    except OSError:
        return {}  # no config.json to name the model by: the cell's run reports it
    digest = hashlib.sha256()
    for name, text in sorted(files.items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(text).digest())
    return {"round_profiles": digest.hexdigest()[:16]} if files else {}
