"""`--runner sim --model` takes any model the torch runner loads (zoo name, checkpoint directory)."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from radixflow.cli import main
from radixflow.costmodel.shape.mixer_shapes import Attention
from radixflow.costmodel.shape.model_shape import ModelShape
from radixflow.options import EngineOptions, plan_engine
from radixflow.problems import ProblemError
from radixflow.scheduler.config import SchedulerConfig

CPU_PROFILE = str(Path(__file__).resolve().parents[2] / "experiments" / "profiles" / "cpu.json")
FAMILIES = ["qwen3_5", "qwen3_next", "lfm2", "nemotron_h", "falcon_h1", "qwen3"]
SMALL = [f"{family}-small" for family in FAMILIES]


def sim_spec(model: str, hardware: str = "h200") -> ModelShape:
    """The shape the sim runner built through the options costs."""
    plan = plan_engine(EngineOptions(runner="sim", model=model, hardware=hardware))
    return plan.choice.build(SchedulerConfig()).spec  # type: ignore[attr-defined]


def torch_model(config: dict):  # type: ignore[no-untyped-def]
    """The torch runner's model for ``config``, on the meta device (no weights)."""
    torch = pytest.importorskip("torch")
    from radixflow.models.layers import Config
    from radixflow.models.registry import model_class

    with torch.device("meta"):
        return model_class(config["model_type"])(Config(config))


def assert_matches_torch_model(spec: ModelShape, config: dict) -> None:
    """Same layers, attention heads and head dims, recurrent state sizes, vocabulary and weights."""
    model = torch_model(config)
    attention = {
        i: (m.kv_heads, m.head_dim)
        for i, layer in enumerate(spec.layers)
        for m in layer.mixers
        if isinstance(m, Attention)
    }
    assert attention == model.kv_layout()
    state = {i: sum(m.state_bytes() for m in layer.mixers) // 4 for i, layer in enumerate(spec.layers)}
    torch_state = {i: sum(math.prod(s) for s in shapes) for i, shapes in model.state_layout().items()}
    assert {i: n for i, n in state.items() if n} == torch_state
    assert spec.vocab_size == int(config["vocab_size"])
    params = sum(p.numel() for p in model.parameters())
    assert spec.total_params() == pytest.approx(params, rel=0.02)  # norms and biases are not costed


@pytest.mark.parametrize("name", SMALL)
def test_a_zoo_name_gives_the_torch_models_shape(name):
    from radixflow.models.zoo_catalogue import preset_config

    spec = sim_spec(name, CPU_PROFILE)
    assert spec.name == name
    assert_matches_torch_model(spec, preset_config(name))


@pytest.mark.parametrize("name", ["qwen3_5-tiny", "lfm2-tiny", "llama-tiny"])
def test_a_zoo_names_cache_entries_weigh_what_the_torch_runners_pools_hold(name):
    """The torch runner keeps each cached position's final hidden state beside its KV (prompt
    logprobs of a reused prefix need it): the sim charged a KV block without it, so a
    ``--cache-memory`` budget held half as many blocks again as on the torch runner."""
    torch = pytest.importorskip("torch")
    from radixflow.models.batch import StatePool
    from radixflow.models.kv_pool import KVPool
    from radixflow.models.zoo_catalogue import preset_config

    config = preset_config(name)
    model = torch_model(config)
    kv = KVPool(model.kv_layout(), 1, 16, torch.float32, "meta", hidden_size=config["hidden_size"])
    state = StatePool(model.state_layout(), 1, torch.float32, "meta")
    block = sum(t.numel() * t.element_size() for t in [*kv.k.values(), *kv.v.values(), kv.hidden])
    slot = sum(t.numel() * t.element_size() for ts in state.tensors.values() for t in ts)
    plan = plan_engine(EngineOptions(runner="sim", model=name, hardware=CPU_PROFILE))  # float32
    entry = plan.choice.entry_bytes(16)
    assert (entry.block, entry.slot) == (block, slot)
    runner = plan.choice.build(SchedulerConfig())
    assert runner.model.kv_bytes_per_token * 16 == block  # what the engine charges the cache


def test_a_checkpoint_directory_gives_its_configs_shape(tmp_path):
    from radixflow.models.zoo_catalogue import preset_config

    config = preset_config("qwen3_5-tiny")  # a config no preset has: other widths, vocabulary, layers
    config.update(hidden_size=96, vocab_size=300, intermediate_size=200, linear_num_value_heads=6)
    config["layer_types"] = ["linear_attention", "linear_attention", "full_attention"]
    config["num_hidden_layers"] = 3
    config.pop("max_position_embeddings", None)
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = sim_spec(str(tmp_path))
    assert spec.vocab_size == 300 and spec.hidden == 96
    assert spec.max_context == 4096  # what the torch runner allows when config.json names none
    assert_matches_torch_model(spec, config)


def test_a_qwen3_5_multimodal_directory_gives_its_language_models_shape(tmp_path):
    from radixflow.models.zoo_catalogue import preset_config

    text = {**preset_config("qwen3_5-tiny"), "max_position_embeddings": 1000}
    wrapped = {"model_type": "qwen3_5", "text_config": {**text, "model_type": "qwen3_5_text"}}
    (tmp_path / "config.json").write_text(json.dumps(wrapped))
    spec = sim_spec(str(tmp_path))
    assert spec.max_context == 1000  # the language model's, as the torch runner reads it
    assert_matches_torch_model(spec, text)


def test_a_qwen3_5_moe_checkpoint_directory_gives_the_catalogues_moe_shape(tmp_path, capsys):
    """A Qwen3.5-MoE ``config.json`` as transformers writes it (``qwen3_5_moe``, the text model
    under ``text_config``) was refused: "no cost-model reader for model_type 'qwen3_5_moe'"."""
    from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS

    transformers = pytest.importorskip("transformers")
    transformers.Qwen3_5MoeConfig().save_pretrained(tmp_path)
    spec = sim_spec(str(tmp_path))
    want = SIM_MODELS["qwen3_5-35b-a3b"]
    assert spec.layers == want.layers and spec.max_context == 32768  # transformers' default
    assert main(["cost", str(tmp_path)]) == 0
    assert "qwen3_5_moe" not in capsys.readouterr().err


@pytest.mark.parametrize("config_class", ["Qwen3_5MoeConfig", "Qwen3_5MoeTextConfig"])
def test_the_torch_runner_refuses_a_qwen3_5_moe_checkpoint_in_one_line_naming_its_type(
    tmp_path, capsys, config_class
):
    """The sim costs a Qwen3.5-MoE checkpoint (multimodal or text-only); the torch runner has no
    MoE Qwen3.5 family."""
    transformers = pytest.importorskip("transformers")
    config = getattr(transformers, config_class)()
    config.save_pretrained(tmp_path)
    assert sim_spec(str(tmp_path)).layers == sim_spec("qwen3_5-35b-a3b").layers
    assert main(["bench", "--runner", "torch", "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("radixflow: error: --model: "), err
    assert f"unsupported model_type {config.model_type!r}" in err[0]


def test_a_zoo_name_on_the_sim_builds_no_model(tmp_path, monkeypatch):
    monkeypatch.setenv("RADIXFLOW_CACHE", str(tmp_path))
    sim_spec("lfm2-small")
    assert list(tmp_path.iterdir()) == []  # nothing materialised: the preset config is enough


def test_a_zoo_name_on_the_sim_needs_no_torch():
    code = (
        "import sys; from radixflow.options import EngineOptions, plan_engine; "
        "from radixflow.scheduler.config import SchedulerConfig; "
        "plan = plan_engine(EngineOptions(runner='sim', model='nemotron_h-small')); "
        "plan.choice.build(SchedulerConfig()); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


NO_HOME = "~radixflow-no-such-user/ck"  # a home directory no user has


def test_an_unknown_sim_model_is_one_line_naming_model_and_what_is_known(capsys):
    with pytest.raises(ProblemError) as info:
        plan_engine(EngineOptions(runner="sim", model="gpt-9"))
    problem = info.value.problem
    assert problem.param == "model" and "\n" not in problem.message
    for known in ("sim shapes: qwen3_5-2b", "zoo names: ", "qwen3_5-small", "checkpoint directory"):
        assert known in problem.message
    assert main(["bench", "--runner", "sim", "--model", "gpt-9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("radixflow: error: --model: unknown sim model 'gpt-9'")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["cost", NO_HOME], f"radixflow: error: model: unknown sim model '{NO_HOME}'"),
        (
            ["bench", "--runner", "sim", "--model", NO_HOME],
            f"radixflow: error: --model: unknown sim model '{NO_HOME}'",
        ),
        (
            ["bench", "--runner", "torch", "--model", NO_HOME],
            f"radixflow: error: --model: unknown torch model '{NO_HOME}'",
        ),
    ],
)
def test_a_model_under_a_users_home_that_does_not_exist_is_one_line(capsys, argv, says):
    """``~user/ck`` of no such user: pathlib's expanduser raised RuntimeError, a traceback, where
    the shell and os.path leave the name as it is."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(says), err


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"model_type": "mystery"}, "no cost-model reader for model_type 'mystery'"),
        ({"model_type": "llama"}, "config.json has no 'hidden_size'"),
        ([1, 2], "does not hold a JSON object"),
        # json.loads' ValueError for an integer of over 4300 digits is no JSONDecodeError
        ({"model_type": "llama", "vocab_size": "HUGE"}, "cannot read"),
    ],
)
def test_an_unreadable_checkpoint_config_is_a_problem_on_model(tmp_path, config, words):
    text = json.dumps(config).replace('"HUGE"', "1" + "0" * 5000)
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ProblemError) as info:
        plan_engine(EngineOptions(runner="sim", model=str(tmp_path)))
    assert info.value.problem.param == "model" and words in info.value.problem.message


def test_a_checkpoint_config_nested_too_deeply_is_a_problem_on_model(tmp_path):
    # json.loads raised RecursionError: `bench --runner sim --model DIR` ended in a traceback
    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ProblemError) as info:
        plan_engine(EngineOptions(runner="sim", model=str(tmp_path)))
    assert info.value.problem.param == "model"
    assert info.value.problem.message == f"cannot read {tmp_path / 'config.json'}: nested too deeply"


LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "vocab_size": 100,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
}


# A checkpoint's sizes reached the cost arithmetic unchecked: 0 heads was a ZeroDivisionError,
# 10**400 an OverflowError (tracebacks from `radixflow cost`), a negative vocabulary or a width
# of 0 was costed without a word, and 10**12 layers were built one by one (a hang).
@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("hidden_size", 0, "hidden_size 0 (must be 1 to"),
        ("hidden_size", -4, "hidden_size -4 (must be 1 to"),
        ("hidden_size", "HUGE", "hidden_size 1000"),
        ("vocab_size", -4, "vocab_size -4 (must be 1 to"),
        ("vocab_size", "HUGE", "vocab_size 1000"),
        ("num_hidden_layers", 0, "num_hidden_layers must be at least 1, got 0"),
        ("num_hidden_layers", 10**12, "num_hidden_layers must be at most 65536"),
        ("num_hidden_layers", "1000000000000", "num_hidden_layers must be at most 65536"),  # int() reads it
        ("num_attention_heads", 0, "(num_attention_heads must be at least 1, got 0)"),
        ("num_key_value_heads", -2, "attention kv_heads -2"),
        ("intermediate_size", 0, "layer 0's MLP intermediate 0"),
        ("intermediate_size", "INF", "cannot be read as a shape"),
        ("max_position_embeddings", "HUGE", "max_position_embeddings 1000"),
    ],
)
def test_a_checkpoint_size_out_of_range_is_a_problem_on_model(tmp_path, capsys, key, value, words):
    text = json.dumps({**LLAMA, key: value}).replace('"HUGE"', "1" + "0" * 400).replace('"INF"', "Infinity")
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ProblemError) as info:
        plan_engine(EngineOptions(runner="sim", model=str(tmp_path)))
    assert info.value.problem.param == "model" and words in info.value.problem.message
    assert main(["cost", str(tmp_path)]) == 2  # the door that costed it with no engine at all
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("radixflow: error: model: ") and words in err[0], err


def test_an_lfm2_config_with_no_feed_forward_width_names_the_key_not_its_older_spelling(tmp_path, capsys):
    """It said "config.json has no 'block_ff_dim'", the older name the torch loader takes too."""
    from radixflow.models.zoo_catalogue import preset_config

    config = {k: v for k, v in preset_config("lfm2-tiny").items() if k != "intermediate_size"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["cost", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("config.json has no 'intermediate_size'"), err


@pytest.mark.parametrize("key", ["intermediate_size", "hidden_size", "num_attention_heads"])
def test_a_required_size_given_as_null_is_missing(tmp_path, capsys, key):
    """A null reads as absent (as the torch loader reads it): it was "cannot be read as a shape
    (int() argument must be a string, a bytes-like object or a real number, not 'NoneType')"."""
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA, key: None}))
    assert main(["cost", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"config.json has no {key!r}"), err


def test_a_checkpoint_routing_to_more_experts_than_it_has_is_a_problem_on_model(tmp_path, capsys):
    from radixflow.models.zoo_catalogue import preset_config

    config = {**preset_config("qwen3_next-tiny"), "num_experts": 1}  # top k is 2
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["cost", str(tmp_path)]) == 2  # was "ValueError: moe: topk 2 > experts 1"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "MLP top_k 2 (must be 1 to 1)" in err[0], err


def test_a_qwen3_5_moe_checkpoint_with_no_experts_is_a_problem_on_model(tmp_path, capsys):
    """Every Qwen3.5-MoE layer routes to its experts; with ``num_experts`` 0 it was costed
    silently as a dense MLP of the expert width."""
    transformers = pytest.importorskip("transformers")
    transformers.Qwen3_5MoeConfig(text_config={"num_experts": 0}).save_pretrained(tmp_path)
    assert main(["cost", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "layer 0's MLP experts 0 (must be 1 to" in err[0], err


@pytest.mark.parametrize("text", [None, "x", [1]])
@pytest.mark.parametrize("wrapper", ["qwen3_5", "qwen3_5_moe"])
def test_a_multimodal_qwen3_5_config_with_no_text_config_says_so(tmp_path, capsys, wrapper, text):
    """It said "no cost-model reader for model_type 'qwen3_5_moe'", a type the sim reads."""
    config = {"model_type": wrapper} if text is None else {"model_type": wrapper, "text_config": text}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["cost", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "under text_config: none here" in err[0], err
    assert "no cost-model reader" not in err[0]


def test_a_qwen3_5_moe_checkpoint_whose_layer_types_miscount_its_layers_is_a_problem(tmp_path, capsys):
    """transformers refuses such a config; the sim costed one layer per ``layer_types`` entry."""
    transformers = pytest.importorskip("transformers")
    transformers.Qwen3_5MoeConfig().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["text_config"]["num_hidden_layers"] = 2  # layer_types still has 40 entries
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["cost", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "layer_types has 40 entries, but num_hidden_layers is 2" in err[0], err


def test_a_qwen3_5_moe_checkpoint_with_an_unknown_layer_type_is_a_problem(tmp_path, capsys):
    """transformers refuses such a config; the sim costed any layer type but full_attention as DeltaNet."""
    transformers = pytest.importorskip("transformers")
    transformers.Qwen3_5MoeConfig().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["text_config"]["layer_types"][5] = "sliding_attention"
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["cost", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "layer_types[5] is 'sliding_attention'" in err[0], err


@pytest.mark.parametrize(
    ("name", "edits", "words"),
    [
        (
            "lfm2-tiny",
            {"layer_types": ["conv", "bogus", "conv", "conv", "conv"]},
            "layer_types[1] is 'bogus'",
        ),
        ("lfm2-tiny", {"layer_types": ["conv"]}, "layer_types has 1 entries, but num_hidden_layers is 5"),
        (
            "nemotron_h-tiny",
            {"layers_block_type": ["mamba", "foo"], "num_hidden_layers": 2},
            "layers_block_type[1] is 'foo'",
        ),
        (
            "nemotron_h-tiny",
            {"layers_block_type": None, "hybrid_override_pattern": "M*Q", "num_hidden_layers": 3},
            "hybrid_override_pattern[2] is 'Q'",
        ),
        (
            "nemotron_h-tiny",
            {"num_hidden_layers": 2},
            "layers_block_type has 7 entries, but num_hidden_layers is 2",
        ),
    ],
)
def test_an_lfm2_or_nemotron_h_layer_pattern_the_torch_runner_refuses_is_a_problem(
    tmp_path, capsys, name, edits, words
):
    """The sim costed an unknown LFM2 layer type as short conv and one layer per ``layer_types``
    entry whatever the layer count; an unknown Nemotron-H code or kind was "config.json has no 'Q'"."""
    from radixflow.models.zoo_catalogue import preset_config

    (tmp_path / "config.json").write_text(json.dumps({**preset_config(name), **edits}))
    assert main(["cost", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("radixflow: error: model: ") and words in err[0], err


def test_every_catalogue_and_zoo_shape_is_within_the_limits():
    from radixflow.costmodel.shape.limits import shape_problem
    from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS
    from radixflow.options.sim_shape import sim_shape, zoo_names

    for name in [*SIM_MODELS, *zoo_names()]:
        assert shape_problem(sim_shape(name)) is None, name


def test_the_sim_on_a_zoo_shape_is_deterministic(tmp_path):
    args = ["bench", "--runner", "sim", "--model", "qwen3_5-small", "--hardware", CPU_PROFILE]
    args += ["--groups", "2", "--candidates", "4", "--context-len", "512", "--candidate-len", "32"]
    runs = []
    for i in range(2):
        out = tmp_path / f"{i}.json"
        assert main([*args, "--json", str(out)]) == 0
        runs.append(json.loads(out.read_text()))
    for run in runs:  # the machine's load average beside the run, not the run: it moves between them
        run.pop("load_1min")
    # what produced each: the same but for its own --json path
    assert runs[0].pop("run")["command"][:-1] == runs[1].pop("run")["command"][:-1]
    assert runs[0] == runs[1]
    native, flow, _ = runs[0]["results"]
    assert runs[0]["config"]["model"] == "qwen3_5-small"
    assert native["outputs_sha256"] == flow["outputs_sha256"] and flow["rounds"] < native["rounds"]


def test_a_bare_zoo_name_beside_a_checkpoint_directory_of_that_name_is_refused_as_torch_refuses_it(
    tmp_path, monkeypatch, capsys
):
    """The sim costed the zoo's preset where the torch runner refuses the name ("write ./NAME")."""
    (tmp_path / "lfm2-tiny").mkdir()
    (tmp_path / "lfm2-tiny" / "config.json").write_text(json.dumps(LLAMA))
    monkeypatch.chdir(tmp_path)
    assert main(["cost", "lfm2-tiny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a zoo model and a checkpoint directory here" in err[0], err
    assert err[0].endswith("write ./lfm2-tiny for the directory, or rename it"), err
    assert sim_spec("./lfm2-tiny").layers == sim_spec(str(tmp_path / "lfm2-tiny")).layers


# The cost model's readers take "64" and 64.0 for 64, where the torch loader's schema refuses them:
# the sim costed a checkpoint the torch runner will not load.
@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("hidden_size", "64", 'hidden_size: must be an integer, got "64"'),
        ("hidden_size", 64.0, "hidden_size: must be an integer, got 64.0"),
        ("intermediate_size", "128", 'intermediate_size: must be an integer, got "128"'),
    ],
)
def test_a_checkpoint_config_the_torch_loader_refuses_is_refused_in_its_words(
    tmp_path, capsys, key, value, words
):
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA, key: value}))
    assert main(["cost", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"radixflow: error: model: {tmp_path / 'config.json'}: {words}"]
    if importlib.util.find_spec("torch") is not None:  # the torch loader's own words
        from radixflow.models.io.loader import CheckpointError, read_config

        said = f"{tmp_path / 'config.json'}: {words}"
        with pytest.raises(CheckpointError, match="^" + re.escape(said) + "$"):
            read_config(tmp_path)


def test_a_checkpoint_on_the_sim_needs_no_torch(tmp_path):
    """Its config is checked against the torch loader's schema, which is pure Python."""
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    code = (
        "import sys; from radixflow.options import EngineOptions, plan_engine; "
        "from radixflow.scheduler.config import SchedulerConfig; "
        f"plan = plan_engine(EngineOptions(runner='sim', model={str(tmp_path)!r})); "
        "plan.choice.build(SchedulerConfig()); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_torch_free_schema_table_is_the_families_own():
    pytest.importorskip("torch")
    from radixflow.models.config_view import ACTIVATION_NAMES
    from radixflow.models.families.config_check import SCHEMAS
    from radixflow.models.layers import ACTIVATIONS
    from radixflow.models.registry import FAMILIES, model_class

    assert set(SCHEMAS) == set(FAMILIES)
    for model_type, (schema, defaults) in SCHEMAS.items():
        family = model_class(model_type)
        assert (family.config_schema, family.config_defaults) == (schema, defaults), model_type
    assert tuple(ACTIVATIONS) == ACTIVATION_NAMES


def test_a_quantized_checkpoint_the_torch_loader_refuses_is_refused_in_its_words(tmp_path, capsys):
    """The sim costed it at full width; the torch loader refuses any quantization_config."""
    (tmp_path / "config.json").write_text(
        json.dumps({**LLAMA, "quantization_config": {"quant_method": "awq"}})
    )
    assert main(["cost", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    words = 'quantization_config: quantized checkpoints are not supported (quant_method "awq")'
    words += "; use unquantized weights"
    assert err == [f"radixflow: error: model: {tmp_path / 'config.json'}: {words}"]
