"""Load and save Hugging Face-layout checkpoints (config.json + safetensors, sharded or not)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from radixflow.models.layers import Config
from radixflow.models.registry import model_class


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded (missing files, tensors or fields)."""


def read_config(path: str | Path) -> Config:
    cfg_path = Path(path) / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{path}: no config.json")
    data = json.loads(cfg_path.read_text())
    if "model_type" not in data:
        raise CheckpointError(f"{cfg_path}: no model_type field")
    if data["model_type"] == "qwen3_5" and "text_config" in data:
        data = {**data["text_config"], "model_type": "qwen3_5_text"}
    return Config(data)


def _weight_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [path / n for n in names]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{path}: no *.safetensors files")
    return files


def _tied(model: nn.Module) -> set[str]:
    """Parameter names that alias an earlier parameter (e.g. a tied lm_head)."""
    seen: set[int] = set()
    tied: set[str] = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if p.data_ptr() in seen:
            tied.add(name)
        seen.add(p.data_ptr())
    return tied


def load_model(path: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32) -> nn.Module:
    """Build the family's model from ``config.json`` and fill it from the safetensors files."""
    path = Path(path)
    config = read_config(path)
    model = model_class(config.model_type)(config)
    wanted = {k: v for k, v in model.state_dict(keep_vars=True).items() if k not in _tied(model)}
    loaded: set[str] = set()
    for file in _weight_files(path):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                if key not in wanted:
                    continue  # extra tensors (e.g. vision towers) are ignored
                tensor = f.get_tensor(key)
                if tensor.shape != wanted[key].shape:
                    raise CheckpointError(
                        f"{file.name}: tensor {key} has shape {tuple(tensor.shape)}, "
                        f"expected {tuple(wanted[key].shape)}"
                    )
                wanted[key].data.copy_(tensor)
                loaded.add(key)
    missing = sorted(set(wanted) - loaded - _buffers(model))
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise CheckpointError(f"{path}: checkpoint is missing {len(missing)} tensor(s): {shown}")
    return model.to(device=device, dtype=dtype).eval()


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
