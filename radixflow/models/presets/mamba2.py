"""Config fields every Mamba2-hybrid preset (Nemotron-H, Falcon-H1) starts from."""

from __future__ import annotations

from typing import Any


def common_config(model_type: str, arch: str) -> dict[str, Any]:
    """Config fields every Mamba2-hybrid preset starts from."""
    return {
        "model_type": model_type,
        "architectures": [arch],
        "torch_dtype": "float32",
        "initializer_range": 0.02,
        "use_cache": True,
        # Special ids follow the zoo tokenizer (radixflow.models.io.tokenizer): 0 is <|endoftext|>.
        "bos_token_id": 0,
        "eos_token_id": 0,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
    }
