"""What the files a cell names hold, for its result cache key: a profile file recalibrated, a
checkpoint's new weights or config, a model's round profiles stored anew at the same path make
another cell (`profile_digests`, `model_digests`, `stored_profile_digests`)."""

from __future__ import annotations

import glob
import hashlib
import json
from pathlib import Path
from typing import Any

from radixflow.costmodel.hardware.profiles import HARDWARE
from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS
from radixflow.experiments.config_paths import PROFILE_KEYS
from radixflow.models.zoo_catalogue import model_names

UNREADABLE = "unreadable"  # a file's digest where it cannot be read: the cell's run reports it


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
                digests[key] = UNREADABLE
    return digests


# A checkpoint's weights are read by neither the config check nor the key: gigabytes hashed on every
# load (cached cells' keys too) would cost more than many cells' runs. A weight file rewritten at the
# same path has another size or modification time (ns) in all but a copy that keeps both; the small
# files (config.json, the shard index, generation_config.json and the tokenizer's files: the torch
# runner's extra stop ids) are hashed whole.
CHECKPOINT_TEXTS = (
    "config.json",
    "model.safetensors.index.json",
    "generation_config.json",
    "tokenizer_config.json",
    "tokenizer.json",
)


def checkpoint_digest(directory: Path) -> str:
    """What the checkpoint in ``directory`` is, for a cell's key: its config, shard index,
    generation config and tokenizer files (a hash of each), and each weight file's name, size and
    modification time."""
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
        return {"model": UNREADABLE}


def stored_profile_digests(settings: dict[str, Any]) -> dict[str, str]:
    """A torch cell's stored round profiles (`runners.profile_store`: what `radixflow calibrate`
    stored for its model, its round predictor's prior, which the policies weigh rounds by), for its
    key: a model calibrated anew is another cell. Every machine's and dtype's, as the key cannot
    name the machine that runs the cell without torch; none stored: none, so the key stays."""
    model = settings.get("model")
    if settings.get("runner") != "torch" or not isinstance(model, str):
        return {}
    from radixflow.runners.profile_store import stored_profiles

    files: dict[str, bytes] = {}
    for checkpoint in _zoo_builds(model) if model in model_names() else [Path(model)]:
        try:
            files |= {str(p.relative_to(p.parents[1])): p.read_bytes() for p in stored_profiles(checkpoint)}
        except OSError:
            continue  # no config.json to name the model by: the cell's run reports it
    digest = hashlib.sha256()
    for name, text in sorted(files.items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(text).digest())
    return {"round_profiles": digest.hexdigest()[:16]} if files else {}


def _zoo_builds(name: str) -> list[Path]:
    """Every build of the zoo model ``name`` in the cache: ``<cache>/<name>``, and one built beside
    another radixflow version's there (``<name>.<digest>``, `models.zoo_store`), whose profiles
    calibrate and the runner use then. Which is this version's the zoo finds by reading the files
    whole, too slow for a key: each one's profiles count."""
    from radixflow.models.zoo import default_cache_dir

    root = default_cache_dir()
    return [root / name, *sorted(root.glob(f"{glob.escape(name)}.*"))]
