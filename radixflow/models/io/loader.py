"""Load and save Hugging Face-layout checkpoints (config.json + safetensors, sharded or not)."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, cast

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from radixflow.models.device import check_device
from radixflow.models.io.convert import plan_conversion
from radixflow.models.layers import CausalLM, Config
from radixflow.models.registry import check_model_type, model_class


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded (missing files, tensors or fields)."""


def read_config(path: str | Path) -> Config:
    """The checkpoint's ``config.json``: a JSON object with a ``model_type`` and a ``vocab_size``."""
    cfg_path = Path(path) / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{path}: no config.json")
    data = _read_json(cfg_path)
    if not isinstance(data, dict):
        raise CheckpointError(f"{cfg_path}: expected a JSON object, got {type(data).__name__}")
    if "model_type" not in data:
        raise CheckpointError(f"{cfg_path}: no model_type field")
    if data["model_type"] == "qwen3_5" and isinstance(data.get("text_config"), dict):
        data = {**data["text_config"], "model_type": "qwen3_5_text"}
    check_model_type(data["model_type"])
    vocab = data.get("vocab_size")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
        raise CheckpointError(f"{cfg_path}: vocab_size must be a positive integer, got {vocab!r}")
    return Config(data)


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None


def _weight_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = _read_json(index)
        weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointError(f"{index}: no weight_map of tensor names to file names")
        return [path / n for n in sorted(set(weight_map.values()))]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{path}: no *.safetensors files")
    return files


def _open(stack: ExitStack, file: Path) -> Any:
    """An open safetensors file; a missing, truncated or garbled one is a `CheckpointError`."""
    try:
        return stack.enter_context(safe_open(str(file), framework="pt"))
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{file}: not a readable safetensors file ({e})") from None


def _build(config: Config, cfg_path: Path) -> nn.Module:
    """The family's model for ``config``; fields that are missing or of the wrong kind name the file."""
    cls = model_class(config.model_type)
    try:
        return cls(config)
    except (AttributeError, KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{cfg_path}: cannot build a {config.model_type} model from it ({e})") from None


def _tied(model: nn.Module) -> set[str]:
    """Parameter names that alias an earlier parameter (e.g. a tied lm_head)."""
    seen: set[int] = set()
    tied: set[str] = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if p.data_ptr() in seen:
            tied.add(name)
        seen.add(p.data_ptr())
    return tied


def load_model(path: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32) -> CausalLM:
    """Build the family's model from ``config.json`` and fill it from the safetensors files.

    Checkpoints in the Hub's on-disk layouts are converted as transformers 5.24 does (see
    `radixflow.models.io.convert`), one tensor at a time.
    """
    path = Path(path)
    check_device(device)  # before anything is built
    config = read_config(path)
    model = _build(config, path / "config.json")
    wanted = {k: v for k, v in model.state_dict(keep_vars=True).items() if k not in _tied(model)}
    with ExitStack() as stack:
        handles = {file: _open(stack, file) for file in _weight_files(path)}
        where = {key: file for file, f in handles.items() for key in f.keys()}  # noqa: SIM118 (not a dict)
        plan = plan_conversion(config.model_type, where, set(wanted))

        def read(key: str) -> torch.Tensor:
            return handles[where[key]].get_tensor(key)

        loaded: set[str] = set()
        for key, name in plan.direct.items():
            _copy(wanted[name], read(key), name, key, where[key])
            loaded.add(name)
        for name, (n_parts, pieces) in plan.merged.items():
            _merge(wanted[name].data, n_parts, pieces, read, name, where)
            loaded.add(name)
        for key, (head, part) in plan.split.items():
            tensor = read(key)
            for j in range(tensor.shape[0]):
                name = f"{head}.{j}.{part}.weight"
                if name not in wanted:
                    raise CheckpointError(
                        f"{where[key].name}: tensor {key} has {tensor.shape[0]} experts, the model has fewer"
                    )
                _copy(wanted[name], tensor[j], name, f"{key}[{j}]", where[key])
                loaded.add(name)
    missing = sorted(set(wanted) - loaded - _buffers(model))
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise CheckpointError(f"{path}: checkpoint is missing {len(missing)} tensor(s): {shown}")
    return cast(CausalLM, model.to(device=device, dtype=dtype).eval())


def _copy(dest: torch.Tensor, tensor: torch.Tensor, name: str, key: str, file: Path) -> None:
    if tensor.shape != dest.shape:
        what = key if key == name else f"{key} (for {name})"
        raise CheckpointError(
            f"{file.name}: tensor {what} has shape {tuple(tensor.shape)}, expected {tuple(dest.shape)}"
        )
    dest.data.copy_(tensor)


def _merge(
    dest: torch.Tensor,
    n_parts: int,
    pieces: list[tuple[str, int, int]],
    read: Callable[[str], torch.Tensor],
    name: str,
    where: dict[str, Path],
) -> None:
    """Write per-expert ``pieces`` (key, expert, part) into ``dest [E, n_parts * width, ...]`` slice by
    slice: the result equals stacking each part over the experts, then concatenating the parts on dim 1."""
    have = {(j, p) for _, j, p in pieces}
    need = {(j, p) for j in range(dest.shape[0]) for p in range(n_parts)}
    if have != need or len(pieces) != len(need):
        raise CheckpointError(
            f"{name}: the checkpoint's per-expert tensors cover (expert, part) {sorted(have)[:6]}..., "
            f"expected each of {n_parts} part(s) once for each of {dest.shape[0]} experts"
        )
    width = dest.shape[1] // n_parts
    for key, j, p in pieces:
        rows = slice(p * width, (p + 1) * width)
        _copy(dest[j, rows], read(key), f"{name}[{j}, {rows.start}:{rows.stop}]", key, where[key])


def _buffers(model: nn.Module) -> set[str]:
    return {name for name, _ in model.named_buffers()}


def save_model(model: nn.Module, path: str | Path) -> None:
    """Write ``config.json`` and ``model.safetensors`` (tied aliases omitted)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tied = _tied(model) | _buffers(model)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items() if k not in tied}
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    config: Config = model.config  # type: ignore[assignment]
    (path / "config.json").write_text(json.dumps(config.to_dict(), indent=2, sort_keys=True))
