"""load_model on the Hub's on-disk layouts (sharded, per-expert MoE, Qwen3.5 multimodal) and its errors."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from model_utils import TOL, ZOO_TINY, Pools, prompt, reference
from safetensors.torch import load_file, save_file

from radixflow.models.io.convert import plan_conversion
from radixflow.models.io.loader import CheckpointError, check_checkpoint, load_model, read_config, save_model
from radixflow.models.layers import Config
from radixflow.models.registry import UnknownModelError, model_class
from radixflow.models.seq_spec import SeqSpec
from radixflow.models.zoo_catalogue import preset_config

EXACT = 1e-5
Rename = Callable[[str, torch.Tensor], dict[str, torch.Tensor]]


def tiny(module_name: str, cls_name: str, presets: str = "PRESETS") -> torch.nn.Module:
    module = pytest.importorskip(module_name)
    torch.manual_seed(0)
    model = getattr(module, cls_name)(Config(getattr(module, presets)["tiny"]))
    module.init_weights(model, torch.Generator().manual_seed(7))
    return model.eval()


def logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    pools = Pools(model)
    (out,) = pools.run(model, [(ids, SeqSpec(0, len(ids), pools.blocks(len(ids))))])
    return out


def rewrite(src: Path, dst: Path, rename: Rename, config: dict | None = None) -> None:
    """Copy a checkpoint with its tensors renamed/split by ``rename(key, tensor) -> {key: tensor}``."""
    dst.mkdir(parents=True, exist_ok=True)
    out: dict[str, torch.Tensor] = {}
    for key, tensor in load_file(str(src / "model.safetensors")).items():
        out.update(rename(key, tensor))
    save_file({k: v.contiguous() for k, v in out.items()}, str(dst / "model.safetensors"), {"format": "pt"})
    cfg = config if config is not None else json.loads((src / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps(cfg))


# --------------------------------------------------------------------------- (a) sharded


def test_sharded_checkpoint_loads_like_the_single_file(tmp_path: Path) -> None:
    model = tiny("radixflow.models.families.lfm2", "Lfm2ForCausalLM")
    save_model(model, tmp_path / "single")
    state = load_file(str(tmp_path / "single" / "model.safetensors"))
    keys = sorted(state)
    shards = [keys[: len(keys) // 3], keys[len(keys) // 3 : 2 * len(keys) // 3], keys[2 * len(keys) // 3 :]]
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    weight_map = {}
    for i, part in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({k: state[k] for k in part}, str(sharded / name), {"format": "pt"})
        weight_map.update(dict.fromkeys(part, name))
    (sharded / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    (sharded / "config.json").write_text((tmp_path / "single" / "config.json").read_text())
    a, b = load_model(tmp_path / "single"), load_model(sharded)
    assert a.state_dict().keys() == b.state_dict().keys()
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
    ids = prompt(1, 20)
    assert torch.equal(logits(a, ids), logits(b, ids))


# --------------------------------------------------------------------------- (b) Qwen3-Next per-expert


def per_expert(key: str, tensor: torch.Tensor) -> dict[str, torch.Tensor]:
    """Inverse of transformers' qwen2_moe merge: fused experts -> ``experts.{j}.{proj}.weight``."""
    m = re.fullmatch(r"(.*\.mlp\.experts)\.(gate_up_proj|down_proj)", key)
    if m is None:
        return {key: tensor}
    if m[2] == "down_proj":
        return {f"{m[1]}.{j}.down_proj.weight": t for j, t in enumerate(tensor)}
    out = {}
    for j, t in enumerate(tensor):
        gate, up = t.chunk(2, dim=0)  # gate rows first (Concatenate(dim=1) order)
        out[f"{m[1]}.{j}.gate_proj.weight"] = gate
        out[f"{m[1]}.{j}.up_proj.weight"] = up
    return out


def test_qwen3_next_per_expert_checkpoint(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    model = tiny("radixflow.models.families.qwen3_next", "Qwen3NextForCausalLM")
    save_model(model, tmp_path / "ours")
    rewrite(tmp_path / "ours", tmp_path / "hub", per_expert)
    hub_keys = load_file(str(tmp_path / "hub" / "model.safetensors")).keys()
    assert "model.layers.0.mlp.experts.3.up_proj.weight" in hub_keys
    assert not any(k.endswith("gate_up_proj") for k in hub_keys)

    ids = prompt(2, 24)
    expected = logits(model, ids)
    ours = load_model(tmp_path / "hub")
    assert (logits(ours, ids) - expected).abs().max().item() <= EXACT

    def hf(path: Path) -> torch.nn.Module:
        ref, info = transformers.AutoModelForCausalLM.from_pretrained(
            str(path), dtype=torch.float32, output_loading_info=True
        )
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        return ref.eval()

    from_hub, from_ours = reference(hf(tmp_path / "hub"), ids), reference(hf(tmp_path / "ours"), ids)
    assert (from_hub - from_ours).abs().max().item() <= EXACT  # transformers reads both layouts alike
    assert (from_hub - expected).abs().max().item() <= TOL  # and agrees with our model


# --------------------------------------------------------------------------- (c) Qwen3.5 multimodal


def test_qwen3_5_multimodal_checkpoint(tmp_path: Path) -> None:
    model = tiny("radixflow.models.families.qwen3_5", "Qwen35ForCausalLM")
    save_model(model, tmp_path / "ours")
    text = json.loads((tmp_path / "ours" / "config.json").read_text())
    config = {
        "model_type": "qwen3_5",
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "text_config": {**text, "model_type": "qwen3_5_text"},
        "vision_config": {"model_type": "qwen3_5_vision", "depth": 1, "hidden_size": 32},
        "tie_word_embeddings": text["tie_word_embeddings"],
    }

    def multimodal(key: str, tensor: torch.Tensor) -> dict[str, torch.Tensor]:
        out = {re.sub(r"^model\.", "model.language_model.", key): tensor}
        if key == "model.norm.weight":
            out["model.visual.patch_embed.proj.weight"] = torch.ones(32, 3, 2, 16, 16)
            out["mtp.fc.weight"] = torch.ones(4, 4)
        return out

    rewrite(tmp_path / "ours", tmp_path / "hub", multimodal, config)
    assert all(
        k.startswith(("model.language_model.", "model.visual.", "mtp.", "lm_head."))
        for k in load_file(str(tmp_path / "hub" / "model.safetensors"))
    )
    ids = prompt(3, 24)
    expected = logits(model, ids)
    ours = load_model(tmp_path / "hub")
    assert type(ours) is type(model)
    assert (logits(ours, ids) - expected).abs().max().item() <= EXACT

    transformers = pytest.importorskip("transformers")
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "hub"), dtype=torch.float32).eval()
    assert (reference(ref, ids) - expected).abs().max().item() <= TOL


@pytest.mark.parametrize("text_config", ["absent", None, [1, 2], "qwen3_5_text"])
def test_a_qwen3_5_config_without_a_text_config_object_names_the_field(tmp_path: Path, text_config) -> None:
    config = {"model_type": "qwen3_5", "vision_config": {"model_type": "qwen3_5_vision"}}
    if text_config != "absent":
        config["text_config"] = text_config
    (tmp_path / "config.json").write_text(json.dumps(config))
    refused = r"config\.json: text_config: .*object holding the language model's fields"
    with pytest.raises(CheckpointError, match=refused) as err:
        load_model(tmp_path)
    assert err.value.problem.param == "text_config"


# --------------------------------------------------------------------------- Nemotron-H both ways


def test_nemotron_h_in_memory_layout(tmp_path: Path) -> None:
    """Ours keeps the on-disk names; transformers' in-memory layout (model.*, fused experts) loads too."""
    model = tiny("radixflow.models.families.nemotron_h", "NemotronHForCausalLM")
    save_model(model, tmp_path / "ours")
    state = load_file(str(tmp_path / "ours" / "model.safetensors"))
    fused: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        key = re.sub(r"^backbone\.", "model.", key)
        m = re.fullmatch(r"(.*\.mixer\.experts)\.(\d+)\.(up_proj|down_proj)\.weight", key)
        if m is None:
            fused[key] = tensor
            continue
        stack = [state[f"backbone{m[1][len('model') :]}.{j}.{m[3]}.weight"] for j in range(int(m[2]) + 1)]
        fused[f"{m[1]}.{m[3]}"] = torch.stack(stack)  # rebuilt each time; the last j has them all
    assert any(k.endswith("mixer.experts.up_proj") for k in fused), "preset has no MoE layer"
    (tmp_path / "mem").mkdir()
    save_file(fused, str(tmp_path / "mem" / "model.safetensors"), {"format": "pt"})
    (tmp_path / "mem" / "config.json").write_text((tmp_path / "ours" / "config.json").read_text())
    ids = prompt(4, 20)
    assert (logits(load_model(tmp_path / "mem"), ids) - logits(model, ids)).abs().max().item() <= EXACT


def test_our_layout_maps_onto_itself() -> None:
    keys = {"model.embed_tokens.weight", "model.layers.0.mlp.experts.gate_up_proj"}
    plan = plan_conversion("qwen3_next", keys, keys)
    assert plan.direct == {k: k for k in keys} and not plan.merged and not plan.split


# --------------------------------------------------------------------------- (d) errors


def test_missing_config(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"no config\.json"):
        load_model(tmp_path)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json"])
def test_json_nested_past_the_parsers_depth_is_not_valid_json_naming_the_file(tmp_path: Path, name) -> None:
    save_model(tiny("radixflow.models.families.lfm2", "Lfm2ForCausalLM"), tmp_path)
    if name != "config.json":
        (tmp_path / "model.safetensors").rename(tmp_path / "model-00001-of-00001.safetensors")
    (tmp_path / name).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match=rf"{re.escape(name)}: not valid JSON \(nested too deeply\)"):
        load_model(tmp_path)


def test_a_model_safetensors_is_read_alone_as_transformers_reads_it(tmp_path: Path) -> None:
    model = tiny("radixflow.models.families.llama", "LlamaForCausalLM")
    save_model(model, tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    save_file({k: v + 1 for k, v in state.items()}, str(tmp_path / "zz-old-copy.safetensors"))
    ids = prompt(0, 12)
    assert torch.equal(logits(load_model(tmp_path), ids), logits(model, ids))  # not the copy's values


def shard(path: Path, state: dict[str, torch.Tensor]) -> None:
    """Write ``state`` as a two-shard checkpoint with its index into ``path``."""
    keys = sorted(state)
    weight_map = {}
    for i, part in enumerate((keys[: len(keys) // 2], keys[len(keys) // 2 :])):
        name = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({k: state[k] for k in part}, str(path / name), {"format": "pt"})
        weight_map.update(dict.fromkeys(part, name))
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def test_a_stale_index_beside_model_safetensors_is_not_read(tmp_path: Path) -> None:
    """transformers' save_pretrained, saving one file over a sharded save, removes the shards but
    leaves their index; transformers then reads model.safetensors, and so do we (the index's
    missing shards once failed the load)."""
    model = tiny("radixflow.models.families.llama", "LlamaForCausalLM")
    save_model(model, tmp_path)
    shard(tmp_path, {k: v + 1 for k, v in load_file(str(tmp_path / "model.safetensors")).items()})
    for old in tmp_path.glob("model-*.safetensors"):
        old.unlink()
    ids = prompt(0, 12)
    assert torch.equal(logits(load_model(tmp_path), ids), logits(model, ids))


def test_a_shard_the_index_names_that_is_not_there_is_refused_naming_the_index_and_shard(
    tmp_path: Path,
) -> None:
    model = tiny("radixflow.models.families.llama", "LlamaForCausalLM")
    save_model(model, tmp_path)
    shard(tmp_path, load_file(str(tmp_path / "model.safetensors")))
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "model-00002-of-00002.safetensors").unlink()  # a download cut short
    index = tmp_path / "model.safetensors.index.json"
    gone = r"model-00002-of-00002\.safetensors$"
    refused = rf"^{re.escape(str(index))}: names 1 shard\(s\) that are not there: {gone}"
    for load in (check_checkpoint, load_model):
        with pytest.raises(CheckpointError, match=refused):
            load(tmp_path)


def test_model_safetensors_beside_a_complete_sharded_checkpoint_is_refused(tmp_path: Path) -> None:
    """Both a single file and every shard of an index: one is an old save (save_pretrained,
    sharding over a single-file save, keeps model.safetensors), and which is old cannot be told.
    transformers reads the single file; loading either could be the stale weights."""
    model = tiny("radixflow.models.families.llama", "LlamaForCausalLM")
    save_model(model, tmp_path)
    shard(tmp_path, {k: v + 1 for k, v in load_file(str(tmp_path / "model.safetensors")).items()})
    with pytest.raises(CheckpointError) as info:
        load_model(tmp_path)
    text = str(info.value)
    assert "\n" not in text and "model.safetensors.index.json" in text and "remove" in text, text


def test_a_tensor_in_two_unindexed_files_is_refused(tmp_path: Path) -> None:
    """Without model.safetensors or an index every *.safetensors file is read: an old copy beside
    the weights (renamed, not removed) holds every tensor again, and which one filled a parameter
    was the later file's in name order, silently. Refused, naming both files and a tensor."""
    model = tiny("radixflow.models.families.llama", "LlamaForCausalLM")
    save_model(model, tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    (tmp_path / "model.safetensors").rename(tmp_path / "weights.safetensors")
    save_file({k: v + 1 for k, v in state.items()}, str(tmp_path / "old.safetensors"), {"format": "pt"})
    with pytest.raises(CheckpointError) as info:
        load_model(tmp_path)
    text = str(info.value)
    assert "\n" not in text and "old.safetensors" in text and "weights.safetensors" in text, text
    assert re.search(r"tensor [\w.]+ is stored in both", text), text


@pytest.mark.parametrize(
    ("family", "cls", "alias"),
    [
        ("llama", "LlamaForCausalLM", lambda k: k.removeprefix("model.")),  # the base-model prefix rule
        ("qwen3_5", "Qwen35ForCausalLM", lambda k: k.replace("model.", "model.language_model.", 1)),
    ],
)
def test_two_tensors_filling_one_parameter_are_refused(
    tmp_path: Path, family: str, cls: str, alias: Callable[[str], str]
) -> None:
    """``model.norm.weight`` beside ``norm.weight`` (or Qwen3.5's ``model.language_model.norm.weight``)
    both map onto one parameter: the later one in the file silently won, and transformers, picking
    the other, gave other logits. Refused, naming both tensors and the parameter."""
    model = tiny(f"radixflow.models.families.{family}", cls)
    save_model(model, tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    state[alias("model.norm.weight")] = state["model.norm.weight"] * 3
    save_file(state, str(tmp_path / "model.safetensors"), {"format": "pt"})
    for load in (load_model, check_checkpoint):
        with pytest.raises(CheckpointError) as info:
            load(tmp_path)
        text = str(info.value)
        assert "\n" not in text and alias("model.norm.weight") in text, text
        assert "both fill model.norm.weight" in text, text


def test_no_safetensors(tmp_path: Path) -> None:
    model = tiny("radixflow.models.families.lfm2", "Lfm2ForCausalLM")
    save_model(model, tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"no \*\.safetensors files$"):
        load_model(tmp_path)


@pytest.mark.parametrize("weights", ["pytorch_model.bin", "model.gguf", "consolidated.00.pth"])
def test_weights_in_a_format_not_read_are_named(tmp_path: Path, weights: str) -> None:
    # was "no *.safetensors files" alone, beside a pytorch_model.bin transformers would read
    save_model(tiny("radixflow.models.families.lfm2", "Lfm2ForCausalLM"), tmp_path)
    (tmp_path / "model.safetensors").rename(tmp_path / weights)
    said = f"{tmp_path}: no *.safetensors files ({weights}: not read, convert to safetensors)"
    with pytest.raises(CheckpointError, match=rf"^{re.escape(said)}$"):
        load_model(tmp_path)


def test_wrong_shape_names_the_tensor_and_both_shapes(tmp_path: Path) -> None:
    model = tiny("radixflow.models.families.lfm2", "Lfm2ForCausalLM")
    save_model(model, tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    key = "model.embed_tokens.weight"
    good = tuple(state[key].shape)
    state[key] = state[key][:, :-1].contiguous()
    save_file(state, str(tmp_path / "model.safetensors"), {"format": "pt"})
    bad = (good[0], good[1] - 1)
    with pytest.raises(CheckpointError, match=re.escape(f"tensor {key} has shape {bad}, expected {good}")):
        load_model(tmp_path)


def test_wrong_expert_shape_names_the_per_expert_tensor(tmp_path: Path) -> None:
    model = tiny("radixflow.models.families.qwen3_next", "Qwen3NextForCausalLM")
    save_model(model, tmp_path / "ours")

    def bad(key: str, tensor: torch.Tensor) -> dict[str, torch.Tensor]:
        out = per_expert(key, tensor)
        name = "model.layers.0.mlp.experts.1.up_proj.weight"
        if name in out:
            out[name] = out[name][:-1]
        return out

    rewrite(tmp_path / "ours", tmp_path / "hub", bad)
    with pytest.raises(
        CheckpointError, match=r"experts\.1\.up_proj\.weight .*has shape \(63, 64\), expected \(64, 64\)"
    ):
        load_model(tmp_path / "hub")


EXPERT = "model.layers.0.mlp.experts"


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ({f"{EXPERT}.2.gate_proj.weight": None}, r"missing \(expert, part\) \[\(2, 0\)\]"),
        ({f"{EXPERT}.9.gate_proj.weight": f"{EXPERT}.0.gate_proj.weight"}, r"takes \['\S*experts\.9\."),
    ],
    ids=["missing", "past the last expert"],
)
def test_per_expert_tensors_that_do_not_cover_the_experts_are_named(tmp_path: Path, edit, said) -> None:
    """The loader named the first six (expert, part) pairs it found, cut off with "...": a missing
    pair could be anywhere in the list, and a tensor of an expert the model lacks (9 of 4) was
    never shown. It names what is missing and the tensors no expert takes."""
    model = tiny("radixflow.models.families.qwen3_next", "Qwen3NextForCausalLM")
    save_model(model, tmp_path / "ours")

    def edited(key: str, tensor: torch.Tensor) -> dict[str, torch.Tensor]:
        out = per_expert(key, tensor)
        for name, source in edit.items():
            if source is None:
                out.pop(name, None)
            elif source in out:
                out[name] = out[source].clone()
        return out

    rewrite(tmp_path / "ours", tmp_path / "hub", edited)
    with pytest.raises(CheckpointError, match=said):
        load_model(tmp_path / "hub")


def test_missing_tensor(tmp_path: Path) -> None:
    model = tiny("radixflow.models.families.lfm2", "Lfm2ForCausalLM")
    save_model(model, tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    del state["model.embed_tokens.weight"]
    save_file(state, str(tmp_path / "model.safetensors"), {"format": "pt"})
    with pytest.raises(CheckpointError, match=r"missing 1 tensor.*model\.embed_tokens\.weight"):
        load_model(tmp_path)


@pytest.mark.parametrize("model_type", ["gpt2", 5])
def test_unknown_model_type_names_the_file_and_lists_supported(tmp_path: Path, model_type: object) -> None:
    # the file was not named: "unsupported model_type 'gpt2'" alone, unlike every other config fault
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    said = rf"^{re.escape(str(tmp_path / 'config.json'))}: unsupported model_type {model_type!r}"
    for read in (load_model, check_checkpoint, read_config):
        with pytest.raises(UnknownModelError, match=rf"{said} \(supported: .*llama.*qwen3_next"):
            read(tmp_path)


def test_unreadable_safetensors_names_the_file(tmp_path: Path) -> None:
    model = tiny("radixflow.models.families.lfm2", "Lfm2ForCausalLM")
    save_model(model, tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: not a readable safetensors file"):
        load_model(tmp_path)


def test_config_the_family_cannot_build_names_the_file(tmp_path: Path) -> None:
    model = tiny("radixflow.models.families.lfm2", "Lfm2ForCausalLM")
    save_model(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["num_hidden_layers"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError, match=r"config\.json: num_hidden_layers: missing \(must be a positive"
    ):
        load_model(tmp_path)


def test_a_config_torch_cannot_build_is_one_line_naming_the_file(tmp_path: Path) -> None:
    model = tiny("radixflow.models.families.lfm2", "Lfm2ForCausalLM")
    save_model(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["vocab_size"] = 10**30  # a positive integer, past what a tensor's size can hold
    (tmp_path / "config.json").write_text(json.dumps(config))
    for load in (check_checkpoint, load_model):
        with pytest.raises(CheckpointError, match=r"config\.json: cannot build a lfm2 model from it") as err:
            load(tmp_path)
        assert "\n" not in str(err.value)


def test_a_layer_count_past_the_checkpoints_tensors_is_refused_before_the_model_is_built(
    tmp_path: Path,
) -> None:
    # a mistyped layer count (under the 65536 layers any config may have): every layer holds
    # tensors, so 50000 layers in a checkpoint of 21 tensors cannot be it; the model of that many
    # layers was built first (minutes, and all the memory there is for a real model) only to list
    # its missing tensors
    path = saved(tmp_path, "radixflow.models.families.llama", "LlamaForCausalLM")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 50_000}))
    said = "num_hidden_layers: is 50000, but the checkpoint holds only 21 tensor(s)"
    for load in (check_checkpoint, load_model):
        with pytest.raises(CheckpointError, match=rf"config\.json: {re.escape(said)}") as err:
            load(path)
        assert err.value.problem.param == "num_hidden_layers"


@pytest.mark.parametrize("empty", ["index", "file"])
def test_a_checkpoint_without_tensors_says_so_not_that_its_layer_count_is_wrong(
    tmp_path: Path, empty: str
) -> None:
    # was "config.json: num_hidden_layers: is 2, but the checkpoint holds only 0 tensor(s)"
    path = saved(tmp_path, "radixflow.models.families.llama", "LlamaForCausalLM")
    if empty == "index":
        (path / "model.safetensors").unlink()
        (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
        said = f"{path / 'model.safetensors.index.json'}: its weight_map names no tensors"
    else:
        save_file({}, str(path / "model.safetensors"))
        said = f"{path}: model.safetensors holds no tensors"
    for load in (check_checkpoint, load_model):
        with pytest.raises(CheckpointError, match=rf"^{re.escape(said)}$"):
            load(path)


@pytest.mark.parametrize("pattern", ["layers_block_type", "hybrid_override_pattern"])
def test_a_layer_pattern_past_the_checkpoints_tensors_is_refused_before_the_model_is_built(
    tmp_path: Path, pattern: str
) -> None:
    # Nemotron-H counts its layers by its pattern, num_hidden_layers optional: a garbled pattern
    # of 20000 layers was built (45 s on the meta device, before any door allocated) to list
    # the tensors it did not find
    path = saved(tmp_path, "radixflow.models.families.nemotron_h", "NemotronHForCausalLM")
    config = json.loads((path / "config.json").read_text())
    config = {k: v for k, v in config.items() if k not in ("num_hidden_layers", "layers_block_type")}
    config[pattern] = ["mlp"] * 20_000 if pattern == "layers_block_type" else "-" * 20_000
    (path / "config.json").write_text(json.dumps(config))
    said = f"{pattern}: gives 20000 layers, but the checkpoint holds only "
    for load in (check_checkpoint, load_model):
        with pytest.raises(CheckpointError, match=rf"config\.json: {re.escape(said)}\d+ tensor\(s\)$") as err:
            load(path)
        assert err.value.problem.param == pattern


def test_an_unusable_device_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    from radixflow.models.device import DeviceError

    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        load_model(tmp_path, device="tpu")  # not even a config.json here


# --------------------------------------------------------------------------- (e) tensors checked on load


def saved(
    tmp_path: Path, module: str = "radixflow.models.families.lfm2", cls: str = "Lfm2ForCausalLM"
) -> Path:
    save_model(tiny(module, cls), tmp_path)
    return tmp_path


def edit_tensors(path: Path, edit: Callable[[dict[str, torch.Tensor]], None]) -> None:
    state = load_file(str(path / "model.safetensors"))
    edit(state)
    save_file(state, str(path / "model.safetensors"), {"format": "pt"})


def test_a_config_that_fails_its_schema_is_refused_before_any_tensor_is_read(tmp_path: Path) -> None:
    path = saved(tmp_path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "layer_types": config["layer_types"][:-1]}))
    (path / "model.safetensors").write_bytes(b"never read")
    with pytest.raises(
        CheckpointError, match=r"config\.json: layer_types: has 4 entries, but num_hidden_layers is 5"
    ):
        load_model(path)


def test_a_quantized_checkpoint_is_refused_naming_its_quantization(tmp_path: Path) -> None:
    """Its scale tensors were refused one by one as tensors no parameter takes, as if the
    checkpoint were broken; the weights in it are not the model's values without them."""
    path = saved(tmp_path)
    config = json.loads((path / "config.json").read_text())
    quantization = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    (path / "config.json").write_text(json.dumps({**config, "quantization_config": quantization}))
    edit_tensors(path, lambda s: s.update({"model.layers.0.mlp.down_proj.weight_scale_inv": torch.ones(1)}))
    refused = (
        r'config\.json: quantization_config: quantized checkpoints are not supported \(quant_method "fp8"\)'
    )
    with pytest.raises(CheckpointError, match=refused) as caught:
        load_model(path)
    assert caught.value.problem.param == "quantization_config"


def test_an_unexpected_tensor_is_refused_by_name(tmp_path: Path) -> None:
    path = saved(tmp_path)
    edit_tensors(path, lambda s: s.update({"model.layers.0.extra.weight": torch.ones(2)}))
    with pytest.raises(
        CheckpointError, match=r"1 tensor\(s\) the lfm2 model has no parameter for: model\.layers\.0\.extra"
    ):
        load_model(path)


def test_many_unexpected_tensors_are_listed_first_few_and_counted(tmp_path: Path) -> None:
    path = saved(tmp_path)
    edit_tensors(path, lambda s: s.update({f"junk.{i}": torch.ones(1) for i in range(8)}))
    with pytest.raises(CheckpointError) as info:
        load_model(path)
    assert "8 tensor(s)" in str(info.value) and "junk.0, junk.1, junk.2, junk.3, junk.4 ... (3 more)" in str(
        info.value
    )


def test_tensors_transformers_ignores_still_load(tmp_path: Path) -> None:
    """Multi-token-prediction heads, stale rotary buffers and a stored copy of a tied lm_head."""
    model = tiny("radixflow.models.families.llama", "Qwen3ForCausalLM", "PRESETS_QWEN3")
    assert model.lm_head.weight is model.model.embed_tokens.weight  # the qwen3 tiny preset is tied
    save_model(model, tmp_path)

    def extras(state: dict[str, torch.Tensor]) -> None:
        state["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
        state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()

    edit_tensors(tmp_path, extras)
    ids = prompt(5, 12)
    assert torch.equal(logits(load_model(tmp_path), ids), logits(model, ids))
    next_path = saved(tmp_path / "next", "radixflow.models.families.qwen3_next", "Qwen3NextForCausalLM")
    edit_tensors(next_path, lambda s: s.update({"mtp.fc.weight": torch.ones(4, 4)}))
    load_model(next_path)


def test_a_tied_checkpoint_storing_only_the_lm_head_fills_the_embeddings_from_it(tmp_path: Path) -> None:
    """transformers ties symmetrically: a tied checkpoint holding lm_head.weight but not the
    embeddings loads, the embeddings taken from it (it was refused as missing them)."""
    model = tiny("radixflow.models.families.llama", "Qwen3ForCausalLM", "PRESETS_QWEN3")
    save_model(model, tmp_path)
    edit_tensors(tmp_path, lambda s: s.update({"lm_head.weight": s.pop("model.embed_tokens.weight")}))
    assert check_checkpoint(tmp_path).tie_word_embeddings
    ids = prompt(6, 12)
    expected = logits(model, ids)
    assert torch.equal(logits(load_model(tmp_path), ids), expected)
    transformers = pytest.importorskip("transformers")
    ref, info = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path), dtype=torch.float32, output_loading_info=True
    )
    assert not any(info.values()), info
    assert (reference(ref.eval(), ids) - expected).abs().max().item() <= TOL


def test_a_stored_tied_lm_head_with_other_values_is_refused(tmp_path: Path) -> None:
    """config.json ties lm_head to the embeddings, but the file stores an lm_head of its own:
    transformers then leaves them untied and uses it; dropping it would give other logits."""
    save_model(tiny("radixflow.models.families.llama", "Qwen3ForCausalLM", "PRESETS_QWEN3"), tmp_path)
    embed = load_file(str(tmp_path / "model.safetensors"))["model.embed_tokens.weight"]
    edit_tensors(tmp_path, lambda s: s.update({"lm_head.weight": embed + 1}))
    with pytest.raises(
        CheckpointError,
        match=r"model\.safetensors: tensor lm_head\.weight differs from model\.embed_tokens\.weight.*"
        r"tie_word_embeddings",
    ):
        load_model(tmp_path)
    edit_tensors(tmp_path, lambda s: s.update({"lm_head.weight": embed.bfloat16()}))
    with pytest.raises(CheckpointError, match=r"lm_head\.weight differs"):  # rounded: differs too
        load_model(tmp_path)


def test_a_weight_beyond_the_load_dtypes_range_is_refused_naming_it(tmp_path: Path) -> None:
    """1e5 is finite in the file but infinite in float16 (largest 65504): NaN logits otherwise."""
    path = saved(tmp_path)
    key = "model.layers.0.operator_norm.weight"
    state = load_file(str(path / "model.safetensors"))
    assert key in state
    state[key][3] = -1e5
    save_file(state, str(path / "model.safetensors"), {"format": "pt"})
    load_model(path, dtype=torch.bfloat16)  # in range there
    refused = rf"^{re.escape(str(path))}: tensor {re.escape(key)} holds 1 value\(s\) beyond float16's range"
    with pytest.raises(CheckpointError, match=refused):
        load_model(path, dtype=torch.float16)


def test_a_float64_weight_beyond_float32s_range_is_refused_naming_it(tmp_path: Path) -> None:
    """1e300 is finite in a float64 file but infinite once copied into the float32 model: it
    loaded silently (the range was checked only for a load dtype narrower than float32)."""
    path = saved(tmp_path)
    key = "model.layers.0.operator_norm.weight"

    def widen(state: dict[str, torch.Tensor]) -> None:
        state[key] = state[key].double()
        state[key][3] = -1e300

    edit_tensors(path, widen)
    said = f"model.safetensors: tensor {key} holds 1 value(s) beyond float32's range"
    with pytest.raises(CheckpointError, match=rf"^{re.escape(str(path))}: {re.escape(said)}"):
        load_model(path)


def test_a_float64_per_expert_weight_beyond_float32s_range_is_refused(tmp_path: Path) -> None:
    model = tiny("radixflow.models.families.qwen3_next", "Qwen3NextForCausalLM")
    save_model(model, tmp_path / "ours")
    name = "model.layers.1.mlp.experts.2.down_proj.weight"

    def widened(key: str, tensor: torch.Tensor) -> dict[str, torch.Tensor]:
        out = per_expert(key, tensor)
        if name in out:
            out[name] = out[name].double()
            out[name][0, 0] = 1e300
        return out

    rewrite(tmp_path / "ours", tmp_path / "hub", widened)
    with pytest.raises(
        CheckpointError, match=rf"tensor {re.escape(name)} holds 1 value\(s\) beyond float32's"
    ):
        load_model(tmp_path / "hub")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn], ids=str)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_weight_is_refused_naming_the_tensor(tmp_path: Path, value: float, dtype) -> None:
    if dtype == torch.float8_e4m3fn and math.isinf(value):
        pytest.skip("float8_e4m3fn has no infinity")
    path = saved(tmp_path)
    key = "model.layers.1.feed_forward.w1.weight"

    def poison(state: dict[str, torch.Tensor]) -> None:
        state[key] = state[key].clone()
        state[key][3, 5] = value
        state[key] = state[key].to(dtype)

    edit_tensors(path, poison)
    what = "NaN" if value != value else "infinite"
    with pytest.raises(CheckpointError, match=rf"tensor {re.escape(key)} holds 1 {what} value\(s\)"):
        load_model(path)


def test_a_non_finite_per_expert_tensor_is_refused(tmp_path: Path) -> None:
    model = tiny("radixflow.models.families.qwen3_next", "Qwen3NextForCausalLM")
    save_model(model, tmp_path / "ours")

    def poisoned(key: str, tensor: torch.Tensor) -> dict[str, torch.Tensor]:
        out = per_expert(key, tensor)
        name = "model.layers.1.mlp.experts.2.down_proj.weight"
        if name in out:
            out[name] = out[name].clone()
            out[name][0, 0] = float("nan")
        return out

    rewrite(tmp_path / "ours", tmp_path / "hub", poisoned)
    with pytest.raises(CheckpointError, match=r"experts\.2\.down_proj\.weight holds 1 NaN"):
        load_model(tmp_path / "hub")


def test_check_checkpoint_finds_names_and_shapes_without_reading_values(tmp_path: Path) -> None:
    path = saved(tmp_path)
    assert check_checkpoint(path).model_type == "lfm2"
    edit_tensors(
        path, lambda s: s.__setitem__("model.embed_tokens.weight", torch.full((512, 64), float("nan")))
    )
    check_checkpoint(path)  # values are not read: a NaN weight shows only on load
    edit_tensors(path, lambda s: s.__setitem__("model.embed_tokens.weight", torch.zeros(512, 63)))
    with pytest.raises(
        CheckpointError, match=r"model\.embed_tokens\.weight has shape \(512, 63\), expected \(512, 64\)"
    ):
        check_checkpoint(path)


@pytest.mark.parametrize(
    "module, cls",
    [
        ("radixflow.models.families.qwen3_next", "Qwen3NextForCausalLM"),
        ("radixflow.models.families.nemotron_h", "NemotronHForCausalLM"),
        ("radixflow.models.families.falcon_h1", "FalconH1ForCausalLM"),
    ],
)
def test_check_checkpoint_builds_every_family_on_the_meta_device(
    tmp_path: Path, module: str, cls: str
) -> None:
    assert check_checkpoint(saved(tmp_path, module, cls)).model_type


@pytest.mark.parametrize("preset", ZOO_TINY)
def test_kv_heads_and_head_dim_left_out_default_as_in_transformers(tmp_path: Path, preset: str) -> None:
    """Where config.json leaves them out, transformers' config class of the family fills
    num_key_value_heads and head_dim with its own defaults (Qwen3: 32 KV heads of 128, Qwen3.5:
    4 of 256, ...), not every head its own KV head of hidden_size / heads."""
    transformers = pytest.importorskip("transformers")
    config = {k: v for k, v in preset_config(preset).items() if k not in ("num_key_value_heads", "head_dim")}
    config["num_attention_heads"] = 32  # every family's default KV head count divides it
    (tmp_path / "config.json").write_text(json.dumps(config))
    with torch.device("meta"):
        ours = model_class(config["model_type"])(read_config(tmp_path))
        ref = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))

    def projections(model: torch.nn.Module) -> list[tuple[int, ...]]:  # Nemotron-H's names differ
        ends = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")
        return sorted(tuple(p.shape) for name, p in model.named_parameters() if name.endswith(ends))

    assert projections(ours) == projections(ref) != []


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (a device that is always full)")
def test_save_model_on_a_full_disk_raises_the_oserror_naming_it(tmp_path: Path) -> None:
    import errno

    model = tiny("radixflow.models.families.lfm2", "Lfm2ForCausalLM")
    tmp_path.joinpath("model.safetensors").symlink_to("/dev/full")  # every write: no space left
    with pytest.raises(OSError) as err:
        save_model(model, tmp_path)
    assert err.value.errno == errno.ENOSPC
