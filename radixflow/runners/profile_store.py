"""Fitted round-time profiles on disk, found again by model and machine.

`radixflow calibrate` writes each model's own fit here; the torch runner reads it at startup as
its round predictor's prior. The store sits beside the zoo's models (`models.zoo.default_cache_dir`,
so ``$RADIXFLOW_CACHE`` moves both): ``<cache>/round_profiles/<machine>/<model>.json``. A file
names the machine it was measured on in full, with how the runner computed its rounds there (the
decode-step kernels and the CPU GEMM plan, as the runner resolved ``auto``: they change what a
round costs); one whose machine or settings differ is not used (a runner on ``--matmul auto``
runs the routes of its model's newest stored profile instead of measuring: `stored_routes`). A
file stored before the kernels and the plan joined the key sits under another directory name,
which no runner looks in.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radixflow.costmodel.hardware.profile_checks import ProfileError
from radixflow.costmodel.hardware.profile_files import profile_from_dict
from radixflow.costmodel.hardware.profiles import HardwareProfile
from radixflow.files import write_whole
from radixflow.jsonl import json_value

log = logging.getLogger("radixflow.predictor")

STORE_DIR = "round_profiles"
# a directory name's bytes kept whole in a stored file's name: with the config hash, the dtype and
# ".json" beside it, within the 255 bytes a file name may hold
NAME_BYTES = 200


@dataclass(frozen=True)
class RunnerSettings:
    """How the torch runner computes a round, ``auto`` resolved: the decode-step ``kernels``
    (``native`` or ``torch``) and the matmul plan's routes, as ``--matmul`` takes them
    (``single=mkl,decode=onednn,prefill=mkl``; None where no plan routes the matmuls: torch's own
    GEMM runs)."""

    kernels: str
    matmul: str | None


@dataclass(frozen=True)
class StoreKey:
    """Whose profile: the model (name, config hash, dtype) on the machine (CPU or GPU model,
    CPUs, torch threads, torch version, device, kernels, matmul plan)."""

    model: str
    machine: dict[str, Any]

    def path(self, root: Path | None = None) -> Path:
        from radixflow.models.zoo import default_cache_dir

        digest = hashlib.sha256(json.dumps(self.machine, sort_keys=True).encode()).hexdigest()[:16]
        return (root or default_cache_dir()) / STORE_DIR / digest / f"{self.model}.json"


def processor_name() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; what the platform says elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine_identity(device: str, threads: int, settings: RunnerSettings) -> dict[str, Any]:
    import torch

    dev = torch.device(device)
    accelerator = torch.cuda.get_device_name(dev) if dev.type == "cuda" else None
    return {
        "cpu": processor_name(),
        "cpus": os.cpu_count(),
        "threads": threads,
        "torch": torch.__version__,
        "device": dev.type,
        "accelerator": accelerator,
        "kernels": settings.kernels,
        "matmul": settings.matmul,
    }


def model_identity(checkpoint: str | Path, dtype: str) -> str:
    """``<directory name>-<config.json hash>-<dtype>``: a zoo model is its name (its config is
    fixed); a checkpoint directory is told apart from another of the same name by its config.
    The name is the absolute path's (``.`` has none), links not followed: one name per spelling."""
    path = Path(os.path.abspath(checkpoint))
    config = (path / "config.json").read_bytes()
    return f"{_short(path.name)}-{hashlib.sha256(config).hexdigest()[:12]}-{dtype}"


def _short(name: str) -> str:
    """``name`` as it is where the identity's file name fits a file system's 255 bytes; a longer
    one cut, with a hash of it whole (another long name of the same start is another model)."""
    raw = os.fsencode(name)
    if len(raw) <= NAME_BYTES:
        return name
    return f"{os.fsdecode(raw[: NAME_BYTES - 17])}-{hashlib.sha256(raw).hexdigest()[:16]}"


def stored_profiles(checkpoint: str | Path, root: Path | None = None) -> list[Path]:
    """Every profile stored for the checkpoint's model, on any machine and in any dtype: those a
    runner of it may start from (the machine's identity needs torch; this reads no more than files)."""
    from radixflow.models.zoo import default_cache_dir

    prefix = model_identity(checkpoint, "").removesuffix("-")  # <directory name>-<config.json hash>
    return sorted((root or default_cache_dir()).glob(f"{STORE_DIR}/*/{glob.escape(prefix)}-*.json"))


def stored_routes(
    checkpoint: str | Path, dtype: str, device: str, threads: int, kernels: str, root: Path | None = None
) -> str | None:
    """The matmul routes of the newest usable profile stored for the checkpoint's model in
    ``dtype`` on this machine at ``threads`` on ``kernels``, whatever routes it was timed on (None:
    none is stored). ``--matmul auto`` measures a plan at each start, and on a busy machine the
    measurement does not pick the same plan every time: a run on ``auto`` runs these routes, so it
    finds the profile calibrate stored. A file that cannot be read or used names nothing."""
    from radixflow.models.zoo import default_cache_dir

    model = model_identity(checkpoint, dtype)
    machine = machine_identity(device, threads, RunnerSettings(kernels, None))
    found = []
    for path in (root or default_cache_dir()).glob(f"{STORE_DIR}/*/{glob.escape(model)}.json"):
        try:
            routes, written = _routes_in(path, model, machine), path.stat().st_mtime_ns
        except (OSError, ProfileError):
            continue
        if routes is not None:
            found.append((written, str(path), routes))
    return max(found)[2] if found else None


def _routes_in(path: Path, model: str, machine: dict[str, Any]) -> str | None:
    """The matmul routes of the profile in ``path`` where it is ``model``'s on ``machine`` (its
    routes aside) and usable as `load_stored` reads it; else None."""
    data = _read_json(path)
    stored = data.get("machine") if isinstance(data, dict) else None
    if not isinstance(stored, dict) or data.get("model") != model or {**stored, "matmul": None} != machine:
        return None
    profile_from_dict(data.get("profile"), "under 'profile'")  # one `load_stored` refuses names nothing
    return stored["matmul"] if isinstance(stored["matmul"], str) else None


def store_key(
    checkpoint: str | Path, dtype: str, device: str, threads: int, settings: RunnerSettings
) -> StoreKey:
    return StoreKey(model_identity(checkpoint, dtype), machine_identity(device, threads, settings))


def save_stored(profile: HardwareProfile, key: StoreKey, root: Path | None = None) -> Path:
    """Write ``profile`` under ``key`` (atomically: a reader never sees half a file)."""
    path = key.path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"model": key.model, "machine": key.machine, "profile": profile.to_dict()}
    # a write cut short removes its temporary file: none is left behind per failed run
    write_whole(path, json.dumps(data, indent=2) + "\n")
    return path


def load_stored(key: StoreKey, root: Path | None = None) -> HardwareProfile | None:
    """The profile stored for ``key``; None when there is none, or (with a one-line warning
    worded as the command line's, `radixflow: warning:`, as a log line shows it bare) when the
    file cannot be used: a bad file in the store never stops a runner."""
    path = key.path(root)
    try:
        if not path.is_file():  # raises where the directory cannot be searched (another user's)
            return None
        data = _read_json(path)
        if not isinstance(data, dict) or data.get("model") != key.model or data.get("machine") != key.machine:
            raise ProfileError("it was measured for another model or machine, or on other kernels or routes")
        return profile_from_dict(data.get("profile"), "under 'profile'")  # the path is said once
    except (OSError, ProfileError) as e:
        log.warning(
            "radixflow: warning: ignoring the stored round profile %s: %s; the round predictor starts "
            "from the nominal prior",
            path,
            e,
        )
        return None


def _read_json(path: Path) -> Any:
    try:
        return json_value(path.read_text(encoding="utf-8"))
    except ValueError as e:  # bad UTF-8, bad JSON, 4300+ digit ints, nesting past the parser
        raise ProfileError(f"not valid JSON ({e})") from None
