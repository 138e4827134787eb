"""Load and save Hugging Face-layout checkpoints (config.json + safetensors, sharded or not)."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import cast

import torch
from safetensors.torch import save
from torch import nn

from radixflow.models.config_schema import validate_config
from radixflow.models.config_types import show
from radixflow.models.device import check_device
from radixflow.models.families.config_check import quantized_problem
from radixflow.models.io.convert import Plan
from radixflow.models.io.tensors import Checkpoint, TensorError, listing, non_finite
from radixflow.models.layers import CausalLM, Config
from radixflow.models.registry import UnknownModelError, check_model_type, model_class
from radixflow.problems import Problem

MULTIMODAL_QWEN3_5 = "qwen3_5"  # a model_type whose language model is its text_config


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded (missing files, tensors or fields; bad values).

    ``problem`` is the same as data: its ``param`` is the config field at fault when one is (the
    key as config.json spells it), else None; the message names the file.
    """

    def __init__(self, message: str, problem: Problem | None = None) -> None:
        super().__init__(message)
        self.problem = problem if problem is not None else Problem(None, message)

    @classmethod
    def in_file(cls, file: Path, problem: Problem) -> CheckpointError:
        return cls(f"{file}: {problem}", problem)


def read_config(path: str | Path) -> Config:
    """The checkpoint's ``config.json``, checked against its family's schema (`config_schema`):
    every field the family reads has its type and range, and the fields agree with each other."""
    cfg_path = Path(path) / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{path}: no config.json")
    data = _read_json(cfg_path)
    if not isinstance(data, dict):
        raise CheckpointError(f"{cfg_path}: expected a JSON object, got {type(data).__name__}")
    if "model_type" not in data:
        raise CheckpointError.in_file(cfg_path, Problem("model_type", "missing"))
    if data.get("quantization_config") is not None:  # at the top level of a multimodal config too
        raise CheckpointError.in_file(cfg_path, quantized_problem(data["quantization_config"]))
    if data["model_type"] == MULTIMODAL_QWEN3_5:
        data = _language_model(cfg_path, data)
    try:
        family = model_class(check_model_type(data["model_type"]))
    except UnknownModelError as e:  # named as every other fault of the file is
        raise UnknownModelError(f"{cfg_path}: {e}") from None
    # a key left out means what transformers' config class fills in, where the family's differs
    # from what the code derives (`schemas.QWEN3_DEFAULTS`, ...); a null stays null
    problems = validate_config(family.config_schema, data, family.config_defaults)
    if problems:
        raise CheckpointError.in_file(cfg_path, problems[0])
    return Config({**family.config_defaults, **data})


def _language_model(cfg_path: Path, data: dict[str, object]) -> dict[str, object]:
    """A multimodal Qwen3.5 config's language model, read from its ``text_config`` as a
    qwen3_5_text config (what transformers' AutoModelForCausalLM builds from it)."""
    text = data.get("text_config")
    if not isinstance(text, dict):
        got = "it is missing" if "text_config" not in data else f"got {show(text)}"
        what = (
            "must be an object holding the language model's fields "
            f"(a {MULTIMODAL_QWEN3_5} config is read through it), {got}"
        )
        raise CheckpointError.in_file(cfg_path, Problem("text_config", what))
    return {**text, "model_type": "qwen3_5_text"}


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:  # the parser recurses per bracket: a garbled or hostile file
        raise CheckpointError(f"{path}: not valid JSON (nested too deeply)") from None


def _weight_files(path: Path) -> list[Path]:
    """The checkpoint's safetensors files, chosen as transformers chooses them: model.safetensors
    alone, else the shards model.safetensors.index.json names, else every *.safetensors file."""
    index, single = path / "model.safetensors.index.json", path / "model.safetensors"
    if single.is_file():  # another file beside it (an adapter, an old copy) is not these weights
        # save_pretrained leaves the other layout's model.safetensors or index behind when it
        # saves over a checkpoint: an index whose shards are gone is that; both whole is not
        # decidable (transformers reads the single file, perhaps the old one)
        if index.is_file() and _whole(index):
            raise CheckpointError(
                f"{path}: holds both model.safetensors and every shard model.safetensors.index.json names, "
                "one of them an older save (transformers reads model.safetensors): remove the stale one"
            )
        return [single]
    if index.is_file():
        return _present(_shards(index), index)
    files = sorted(path.glob("*.safetensors"))
    if not files:
        # weights in a format transformers (or llama.cpp) reads and this loader does not
        others = sorted(f.name for f in path.iterdir() if f.suffix in (".bin", ".pt", ".pth", ".gguf"))
        unread = f" ({listing(others)}: not read, convert to safetensors)" if others else ""
        raise CheckpointError(f"{path}: no *.safetensors files{unread}")
    return files


def _shards(index: Path) -> list[Path]:
    """The files ``index`` (model.safetensors.index.json) maps the tensors to."""
    weight_map = _read_json(index)
    weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index}: no weight_map of tensor names to file names")
    if not weight_map:  # else blamed on the layer count: every layer holds tensors
        raise CheckpointError(f"{index}: its weight_map names no tensors")
    return [index.parent / n for n in sorted(set(weight_map.values()))]


def _present(shards: list[Path], index: Path) -> list[Path]:
    """``shards``, once each is there: one that is not (a download cut short) is refused naming
    the index, not as a file that cannot be read."""
    gone = [f.name for f in shards if not f.is_file()]
    if gone:
        raise CheckpointError(f"{index}: names {len(gone)} shard(s) that are not there: {listing(gone)}")
    return shards


def _whole(index: Path) -> bool:
    """Whether ``index`` is readable and every shard it names is there."""
    try:
        return all(f.is_file() for f in _shards(index))
    except CheckpointError:
        return False


def _build(config: Config, cfg_path: Path) -> nn.Module:
    """The family's model for ``config``; fields that are missing or of the wrong kind name the file."""
    cls = model_class(config.model_type)
    try:
        return cls(config)
    except (AttributeError, KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:
        # torch's own errors can run on with a C++ backtrace: the first line says what went wrong
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        what = f"cannot build a {config.model_type} model from it"
        raise CheckpointError(f"{cfg_path}: {what} ({why})") from None


def _tied(model: nn.Module) -> dict[str, str]:
    """Parameter names that alias an earlier parameter (e.g. a tied lm_head) -> that parameter's
    name. By identity, so it also holds on the meta device, where every tensor has the same (null)
    data pointer."""
    first: dict[int, str] = {}
    tied: dict[str, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            tied[name] = first[id(p)]
        first.setdefault(id(p), name)
    return tied


Matched = tuple[Plan, dict[str, torch.Tensor]]


def _open(path: Path, config: Config, stack: ExitStack) -> Checkpoint:
    """The checkpoint's files opened (their headers read), before the model is built. Every layer
    holds tensors, so a layer count past the number of tensors (a mistyped config.json; a garbled
    layer pattern where the family counts by it) is refused here: that model would otherwise be
    built first, taking minutes and all the memory there is, only to have its missing tensors
    listed."""
    files = _weight_files(path)
    try:
        checkpoint = Checkpoint.open(stack, files)
    except TensorError as e:
        raise CheckpointError(f"{path}: {e}") from None
    if not checkpoint.where:  # a file saved from an empty state dict
        held = "holds" if len(files) == 1 else "hold"
        raise CheckpointError(f"{path}: {listing([f.name for f in files])} {held} no tensors")
    key, held = _layer_key(config), len(checkpoint.where)
    said = config.get(key) if key is not None else None  # a count, or a pattern: a list or string
    layers = said if isinstance(said, int) else len(said or ())
    if layers > held:
        says = f"is {said}" if isinstance(said, int) else f"gives {layers} layers"
        what = f"{says}, but the checkpoint holds only {held} tensor(s)"
        raise CheckpointError.in_file(path / "config.json", Problem(key, what))
    return checkpoint


# where a config spells out one entry per layer, in the order a family without num_hidden_layers
# reads them (Nemotron-H's pattern: `layer_patterns.nemotron_kinds`)
_LAYER_PATTERNS = ("layer_types", "layers_block_type", "hybrid_override_pattern")


def _layer_key(config: Config) -> str | None:
    """The key that says how many layers ``config`` builds: num_hidden_layers, else its pattern."""
    if isinstance(config.get("num_hidden_layers"), int):
        return "num_hidden_layers"
    return next((k for k in _LAYER_PATTERNS if config.get(k)), None)


def _match(path: Path, model: nn.Module, checkpoint: Checkpoint) -> Matched:
    """The checkpoint's tensors matched to ``model``'s parameters by name and shape."""
    config: Config = model.config  # type: ignore[assignment]
    tied = _tied(model)
    wanted = {k: v for k, v in model.state_dict(keep_vars=True).items() if k not in tied}
    try:
        return checkpoint.check(config.model_type, wanted, tied, _buffers(model)), wanted
    except TensorError as e:
        raise CheckpointError(f"{path}: {e}") from None


def check_checkpoint(path: str | Path) -> Config:
    """Everything `load_model` checks except the tensors' values, without reading them: the config,
    and every tensor's name and shape (the model is built on the meta device). Cheap: for a
    pre-flight check before anything is allocated or timed."""
    path = Path(path)
    config = read_config(path)
    with ExitStack() as stack:
        checkpoint = _open(path, config, stack)
        with torch.device("meta"):
            model = _build(config, path / "config.json")
        _match(path, model, checkpoint)
    return config


def load_model(path: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32) -> CausalLM:
    """Build the family's model from ``config.json`` and fill it from the safetensors files.

    Checkpoints in the Hub's on-disk layouts are converted as transformers 5.24 does (see
    `radixflow.models.io.convert`), one tensor at a time. Every tensor must fill a parameter,
    every parameter must be filled, shapes must match, and values must be finite (in ``dtype`` too).
    """
    path = Path(path)
    check_device(device)  # before anything is built
    config = read_config(path)
    with ExitStack() as stack:
        checkpoint = _open(path, config, stack)
        model = _build(config, path / "config.json")
        plan, wanted = _match(path, model, checkpoint)
        try:
            checkpoint.fill(plan, wanted)
        except TensorError as e:
            raise CheckpointError(f"{path}: {e}") from None
    model = model.to(device=device, dtype=dtype)
    _check_range(model, dtype, path)
    return cast(CausalLM, model.eval())


def _check_range(model: nn.Module, dtype: torch.dtype, path: Path) -> None:
    """Every weight is still finite in ``dtype``: a value past its largest (65504 in float16)
    turns into infinity on the cast, and the logits into NaN. The stored values were found
    finite (`Checkpoint.read`), and in the float32 model (`Checkpoint._copy`), so only a
    narrower dtype than float32 is looked at."""
    if not dtype.is_floating_point or torch.finfo(dtype).max >= torch.finfo(torch.float32).max:
        return
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and non_finite(tensor) is not None:
            n, largest = int(torch.isinf(tensor).sum()), torch.finfo(dtype).max
            what = (
                f"holds {n} value(s) beyond {str(dtype).removeprefix('torch.')}'s range (largest {largest:g})"
            )
            raise CheckpointError(f"{path}: tensor {name} {what}; load it in a wider dtype")


def _buffers(model: nn.Module) -> set[str]:
    return {name for name, _ in model.named_buffers()}


def save_model(model: nn.Module, path: str | Path) -> None:
    """Write ``config.json`` and ``model.safetensors`` (tied aliases omitted). A write that fails
    (a full disk, a read-only directory) raises its OSError."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tied = set(_tied(model)) | _buffers(model)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items() if k not in tied}
    # written here, not by safetensors' save_file: a write that fails (a full disk) is then the
    # OSError every other file's is, not a SafetensorError that no caller expects
    (path / "model.safetensors").write_bytes(save(state, metadata={"format": "pt"}))
    config: Config = model.config  # type: ignore[assignment]
    (path / "config.json").write_text(json.dumps(config.to_dict(), indent=2, sort_keys=True))
