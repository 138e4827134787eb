"""Hardware profiles by name or file: a built-in profile (`HARDWARE`) or a JSON file, read with
every key checked (`load_profile`, `profile_from_dict`), and written whole (`save_profile`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from radixflow.costmodel.hardware.profile_checks import (
    CHECKS,
    ProfileError,
    Range,
    as_written,
    profile_error,
    profile_problems,
    show,
    unread_figures,
    with_fixed_figures,
)
from radixflow.costmodel.hardware.profiles import HARDWARE, HardwareProfile
from radixflow.files import write_whole
from radixflow.jsonl import KeyTwice, json_value, read_text

# The keys of a file in the torch runner's store of fitted round profiles (`runners.profile_store`)
STORED_KEYS = {"model", "machine", "profile"}


def profile_from_dict(data: Any, origin: str = "profile") -> HardwareProfile:
    """A profile from parsed JSON, every key checked (`profile_problems`); ``origin`` names it in errors."""
    if not isinstance(data, dict):
        raise ProfileError(f"{origin}: a profile must be a JSON object, got {show(data)}")
    if set(data) == STORED_KEYS:  # what calibrate says it stored, given where a profile goes
        raise ProfileError(
            f"{origin}: a round profile of the torch runner's store (a model's own fit under 'profile', "
            "with the model and machine it was timed on), not a hardware profile: give the file "
            "`radixflow calibrate` wrote to --out"
        )
    data = with_fixed_figures(data)
    if problems := profile_problems(data) or unread_figures(data):
        raise profile_error(origin, problems[0])
    present = {k: float(v) if isinstance(CHECKS[k], Range) else v for k, v in data.items() if v is not None}
    return HardwareProfile(**{"name": Path(origin).stem, "bandwidth": None, **present})


def load_profile(path: str | Path) -> HardwareProfile:
    """Read a profile JSON file (as written by `radixflow calibrate`)."""
    path = Path(path)
    if path.exists() and not (path.is_file() or path.is_dir()):  # a directory: read_text says so
        # a profile is read more than once (checked with the options, then by the runner): a
        # pipe (`<(...)`) is empty the second time, and one no one writes would be waited on forever
        raise ProfileError(f"hardware profile {path} is not a regular file (a pipe or a device): give a file")
    try:
        text = read_text(path)  # UTF-8, a byte order mark dropped (an editor's), a bad byte named
    except OSError as e:
        raise ProfileError(f"cannot read hardware profile {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise ProfileError(f"hardware profile {path}: {e}") from None
    try:
        data = json_value(text, unique=True, parse_float=as_written)
    except KeyTwice as e:  # JSON keeps the last value: one of two edits would run unsaid
        raise ProfileError(f"hardware profile {path}: key {e.args[0]!r} given twice") from None
    except ValueError as e:  # JSONDecodeError, 4300+ digit ints, nesting
        raise ProfileError(f"hardware profile {path} is not valid JSON: {e}") from None
    return profile_from_dict(data, str(path))


def save_profile(profile: HardwareProfile, path: str | Path) -> None:
    write_whole(path, json.dumps(profile.to_dict(), indent=2) + "\n")


def resolve_hardware(name_or_path: str) -> HardwareProfile:
    """A built-in profile by name, or a profile file by path."""
    if name_or_path in HARDWARE:
        return HARDWARE[name_or_path]
    path = Path(name_or_path)
    if names_file(path):
        return load_profile(path)
    raise ProfileError(unknown_hardware(name_or_path))


def names_file(path: Path) -> bool:
    """Whether ``path`` (no built-in name) is read as a profile file: a ``.json`` name, or a file
    that is there; else it is an unknown name (`unknown_hardware`)."""
    return path.suffix == ".json" or path.exists()


def unknown_hardware(name: str) -> str:
    """What a name that is no built-in profile and names no file is told (as typed)."""
    return f"unknown hardware {name!r}: not one of {', '.join(HARDWARE)} and not a profile file"
