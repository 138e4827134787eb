"""The engine flags: declared once, the same at every command; read once into EngineOptions."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math

import pytest

from radixflow.cli import build_parser, main
from radixflow.cli.app import FLAGS
from radixflow.experiments.config import CELL_KEYS
from radixflow.options import EngineOptions, option_fields
from radixflow.options.engine_options import spec_of
from radixflow.options.flag_warnings import clock_warnings, dtype_warnings, ineffective, ineffective_for_model
from radixflow.options.flags import POLICY_HELP, add_engine_flags, flag_spellings, from_args, policies
from radixflow.options.model_arg import MODEL_ARG_HELP
from radixflow.options.spec import checked
from radixflow.problems import ProblemError
from radixflow.server.config import Listen, ServerConfig

ENGINE_COMMANDS = ("bench", "generate", "serve")


def _command(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sub.choices[name]


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions}


@pytest.mark.parametrize("command", ENGINE_COMMANDS)
def test_every_engine_option_is_a_flag_of_every_engine_command_with_one_help(command):
    actions = _actions(_command(command))
    for f in option_fields():
        action = actions[f.name]
        assert action.default is None, f"{command} {f.name}: a default must mean 'not given'"
        if f.name == "policy":
            assert action.help == POLICY_HELP
        elif f.name == "model":  # MODEL, an argument (or --model) of every command that takes one
            assert action.help == (spec_of(f).help if command == "bench" else MODEL_ARG_HELP)
        else:
            shown = "" if f.default is None else f" (default: {f.default})"
            assert action.help == spec_of(f).help + shown, f"{command} {f.name}"


@pytest.mark.parametrize(
    ("command", "names"), [("calibrate", ("device", "torch_threads", "dtype")), ("experiment", ("device",))]
)
def test_commands_that_take_a_few_engine_options_show_them_as_the_others_do(command, names):
    from radixflow.experiments.command import OVERRIDE_HELPS

    bench, other = _actions(_command("bench")), _actions(_command(command))
    for name in names:
        # but experiment's --device, which replaces its cells' own devices: bench's said "(default: cpu)"
        own = OVERRIDE_HELPS.get(name) if command == "experiment" else None
        assert other[name].help == (own or bench[name].help)
        assert other[name].option_strings == bench[name].option_strings


def test_experiment_cells_take_every_engine_option_but_the_policy():
    # the policies of an experiment are its variants, the columns it compares
    assert {f.name for f in option_fields()} - set(CELL_KEYS) == {"policy"}
    for f in option_fields():
        if f.name != "policy":
            assert CELL_KEYS[f.name] == f.default


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_engine_flags(parser)
    return parser.parse_args(argv)


def test_from_args_gives_the_options_of_the_given_flags_and_defaults_for_the_rest():
    args = _parse(["--kv-blocks", "64", "--fixed-cost-ms", "2.5", "--policy", "native"])
    assert from_args(args) == EngineOptions(kv_blocks=64, fixed_cost_ms=2.5, policy="native")
    assert from_args(_parse([])) == EngineOptions()


def test_a_model_given_by_the_flag_reaches_the_options_through_any_parser():
    """``--model`` is held apart until the CLI's parser settles it against MODEL; a plain
    argparse parser (a script reusing `add_engine_flags`) never settled it, and from_args took
    the default model without a word."""
    assert from_args(_parse(["--model", "qwen3-tiny"])).model == "qwen3-tiny"
    assert from_args(_parse(["qwen3-tiny"])).model == "qwen3-tiny"
    with pytest.raises(ProblemError, match="MODEL 'a' and --model 'b' name two models"):
        from_args(_parse(["a", "--model", "b"]))


def test_policy_repeats_only_where_a_command_compares_policies():
    args = _parse(["--policy", "native", "--policy", "radixflow", "--policy", "native"])
    assert policies(args) == ["native", "radixflow"]
    assert from_args(args, one_policy=False).policy == "native"
    with pytest.raises(ProblemError, match="policy: given 2 times: this command runs one engine"):
        from_args(args)


def test_ranges_are_checked_by_validate_not_by_argparse():
    with pytest.raises(ProblemError) as info:
        from_args(_parse(["--kv-blocks", "0"]))
    assert info.value.problem.param == "kv_blocks"
    with pytest.raises(ProblemError, match=r"kv_blocks: must be an integer, got '4\.5'"):
        from_args(_parse(["--kv-blocks", "4.5"]))  # refused by the one check, as at every door


def test_given_options_that_cannot_change_the_run_are_named():
    sim = EngineOptions(model="qwen3_5-2b", device="cuda")
    assert ineffective(sim, ["device"]) == ["--device has no effect with the sim runner"]
    torch = EngineOptions(model="qwen3_5-tiny", tflops=3.0)
    (warning,) = ineffective(torch, ["model", "tflops"])
    assert warning.startswith("--tflops has no effect with the torch runner")
    assert ineffective(EngineOptions(), []) == []


def test_tflops_with_a_profile_of_measured_kernels_is_named(tmp_path):
    """The h100/h200 profiles time measured kernels: --tflops cannot change their run, and no
    warning said so (docs/usage.md: a given flag that cannot change the run draws one)."""
    (warning,) = ineffective(EngineOptions(hardware="h200", tflops=100.0), ["hardware", "tflops"])
    assert warning.startswith("--tflops has no effect with hardware 'h200': its kernel times are measured")
    assert ineffective(EngineOptions(hardware="cpu", tflops=100.0), ["tflops"]) == []
    assert ineffective(EngineOptions(hardware="h200"), ["hardware"]) == []
    roofline = tmp_path / "r.json"
    roofline.write_text('{"flops": 1e15, "bandwidth": 3e12, "round_overhead_s": 0, "per_request_s": 0, '
                        '"kernels": "roofline"}')  # fmt: skip
    assert ineffective(EngineOptions(hardware=str(roofline), tflops=100.0), ["tflops"]) == []


def test_scheduler_time_with_a_profile_that_models_no_scheduler_time_is_named(tmp_path, capsys):
    """The cpu profile and calibrate's fitted ones model no scheduler time: --scheduler-time
    overlap|serial changed nothing on them, and no warning said so (it does on h100/h200)."""
    (warning,) = ineffective(EngineOptions(hardware="cpu", scheduler_time="serial"), ["scheduler_time"])
    assert warning.startswith("--scheduler-time has no effect with hardware 'cpu': it models no scheduler")
    assert ineffective(EngineOptions(hardware="h200", scheduler_time="serial"), ["scheduler_time"]) == []
    assert main(["cost", "qwen3-4b", "--hardware", "cpu", "--scheduler-time", "serial", "--json"]) == 0
    assert "--scheduler-time has no effect with hardware 'cpu'" in capsys.readouterr().err


def test_the_cpu_clock_with_spinning_torch_threads_is_warned_about(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert ineffective(EngineOptions(model="qwen3_5-2b"), ["clock"]) == [
        "--clock has no effect with the sim runner"
    ]
    torch = EngineOptions(model="qwen3_5-tiny", clock="cpu")
    assert clock_warnings(torch.replace(torch_threads=1)) == []
    assert clock_warnings(torch.replace(clock="wall", torch_threads=2)) == []
    (warning,) = clock_warnings(torch.replace(torch_threads=2))
    assert "OMP_WAIT_POLICY=passive" in warning and "--torch-threads 1" in warning
    assert clock_warnings(EngineOptions(model="qwen3_5-2b", clock="cpu", torch_threads=2)) == []


def test_the_cpu_clock_off_a_cpu_is_warned_about(monkeypatch):
    # a round on a GPU waits for the device; the host thread's CPU time leaves that wait out (or
    # counts a spinning sync), so the clock read something other than the GPU's work, silently
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    torch = EngineOptions(model="qwen3_5-tiny", clock="cpu", torch_threads=1)
    assert clock_warnings(torch.replace(device="cpu")) == []
    assert clock_warnings(torch.replace(device="cuda:0", clock="wall")) == []
    (warning,) = clock_warnings(torch.replace(device="cuda:0"))
    assert warning.startswith("clock cpu on device cuda:0 reads the host thread's CPU time"), warning
    assert "wall" in warning


# A flag's bad value was argparse's words ("argument --dtype: invalid choice: 'x' (choose from
# ...)", "argument --seed: not a valid integer: 'x'", "argument --fixed-cost-ms/--round-overhead-ms:
# ..."), where a TOML cell and LLM(...) say "dtype: unknown dtype 'x' (known: ...)": one option,
# two texts. Now the flag's text reaches the one check, which the command line spells with its flag.
@pytest.mark.parametrize(
    ("flag", "text", "name", "value"),
    [
        ("--dtype", "bogus", "dtype", "bogus"),
        ("--runner", "gpu", "runner", "gpu"),
        ("--policy", "greedy", "policy", "greedy"),
        ("--scheduler-time", "async", "scheduler_time", "async"),
        ("--eviction", "", "eviction", ""),
        ("--seed", "abc", "seed", "abc"),
        ("--kv-blocks", "4.5", "kv_blocks", "4.5"),
        ("--fixed-cost-ms", "abc", "fixed_cost_ms", "abc"),
        ("--round-overhead-ms", "nan", "fixed_cost_ms", math.nan),
        ("--tflops", "inf", "tflops", math.inf),
        ("--kv-blocks", "\u0661\u0662", "kv_blocks", "\u0661\u0662"),  # Python's int() reads it as 12
        ("--tflops", "\uff11\uff12", "tflops", "\uff11\uff12"),
    ],
)
def test_a_bad_flag_is_refused_in_the_words_of_every_other_door(capsys, flag, text, name, value):
    with pytest.raises(ProblemError) as info:
        EngineOptions.from_mapping({name: value})
    expected = info.value.problem.render(FLAGS.get)  # --fixed-cost-ms/--round-overhead-ms
    assert main(["bench", flag, text]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"radixflow: error: {expected}"]


def test_every_policy_given_is_checked_not_only_the_first(capsys):
    assert main(["bench", "--policy", "native", "--policy", "greedy"]) == 2
    err = capsys.readouterr().err
    assert "radixflow: error: --policy: unknown policy 'greedy' (known: adaptive, native, radixflow)" in err


@pytest.mark.parametrize("command", ENGINE_COMMANDS)
def test_the_help_still_lists_each_choice(command):
    actions = _actions(_command(command))
    assert actions["dtype"].metavar == "{auto,float32,bfloat16,float16}"
    assert actions["policy"].metavar == "{adaptive,native,radixflow}"


def test_the_torch_threads_help_names_each_command_with_a_default_of_its_own():
    # run-batch takes the server's thread plan and a --replicas fleet one thread per replica
    # (cli/run_batch.py, cli/serve.py); the help named serve's plan alone
    text = _actions(_command("run-batch"))["torch_threads"].help
    assert "serve and run-batch: the server's thread plan" in text and "--replicas: 1" in text
    # calibrate times one thread unless told (cli/calibrate.py); its help said torch's default
    assert "calibrate: 1" in _actions(_command("calibrate"))["torch_threads"].help


def test_run_batchs_server_flags_say_what_they_do_there():
    # run-batch posts a body that finds the queue full again once an answer has made room, never
    # answering 429 (server/batch.py, docs/serving.md), and cancels what is in flight when cut
    # short; its help was serve's: "--max-pending: ... before new ones get 429", a drain on
    # shutdown, and a --tokenizer-threads default "with --replicas", a flag run-batch lacks
    actions = _actions(_command("run-batch"))
    pending = actions["max_pending"].help
    assert "new ones get 429" not in pending and "posted again" in pending
    assert "--replicas" not in actions["tokenizer_threads"].help
    assert "no effect" in actions["drain_s"].help
    serve = _actions(_command("serve"))  # serve's own help unchanged
    assert "429" in serve["max_pending"].help and "--replicas" in serve["tokenizer_threads"].help


def test_the_default_max_tokens_help_names_both_caps():
    # a chat request's default max_tokens is capped to what fits beside its prompt in the context
    # and in the KV cache (docs/serving.md, `Backend.room`); the help named the context alone
    for command in ("serve", "run-batch"):
        text = _actions(_command(command))["default_max_tokens"].help
        assert "context" in text and "cache" in text


def test_a_dtype_below_float32_is_warned_about_since_outputs_are_no_longer_exact():
    cpu = EngineOptions(model="qwen3_5-tiny")
    assert dtype_warnings(cpu) == dtype_warnings(cpu.replace(dtype="float32")) == []
    (warning,) = dtype_warnings(cpu.replace(dtype="bfloat16"))
    assert "bfloat16" in warning and "no-cache" in warning and "\n" not in warning
    assert len(dtype_warnings(cpu.replace(device="cuda"))) == 1  # auto: bfloat16 or float16 there
    assert dtype_warnings(cpu.replace(device="cuda", dtype="float32")) == []
    assert dtype_warnings(EngineOptions(model="qwen3_5-2b", dtype="bfloat16")) == []  # the sim


@pytest.mark.parametrize("command", ("generate", "score", "serve", "run-batch"))
def test_a_commands_model_argument_is_said_to_need_weights_and_has_no_default(command):
    # these commands refuse the sim runner and take MODEL as a required argument: bench's words
    # (a sim shape, costed with no weights read; a default model) would tell of neither
    text = _actions(_command(command))["model"].help
    assert "default" not in text
    assert "sim shape" not in text
    assert "zoo model" in text and "checkpoint directory" in text


def test_the_model_flag_names_the_sim_shapes_it_points_to():
    # it said "a sim shape (see `radixflow bench --help`)", in bench's own help, which lists none
    from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS

    text = _actions(_command("bench"))["model"].help
    assert "see `radixflow bench --help`" not in text
    assert all(name in text for name in SIM_MODELS)


def test_admission_on_a_full_attention_model_is_warned_about_as_placement_is():
    # admission only decides which checkpoint saves may evict: a model without recurrent state
    # saves none, so `--admission likely` on qwen3-4b changed nothing, without a word
    warned = ineffective_for_model(["admission", "placement"], has_recurrent=False)
    why = "have no effect on a full-attention model: it has no recurrent state"
    assert warned == [f"--placement, --admission {why}"]
    assert ineffective_for_model(["admission"], has_recurrent=True) == []


def test_placement_and_admission_with_no_state_slots_are_warned_about(capsys):
    # with --state-slots 0 no checkpoint is ever saved (placement's positions find no slot, and
    # admission only picks which saves may evict one), so `--state-slots 0 --placement lone
    # --admission likely` ran exactly as without either flag, without a word
    warned = ineffective_for_model(["placement", "admission", "state_slots"], True, state_slots=0)
    assert warned == ["--placement, --admission have no effect with --state-slots 0: no checkpoint is kept"]
    assert ineffective_for_model(["placement"], True, state_slots=1) == []
    assert ineffective_for_model(["state_slots"], True, state_slots=0) == []
    tiny = ["--groups", "1", "--candidates", "2", "--context-len", "32", "--candidate-len", "16"]
    assert main(["bench", "--runner", "sim", *tiny, "--state-slots", "0", "--placement", "lone"]) == 0
    assert "radixflow: warning: --placement has no effect with --state-slots 0" in capsys.readouterr().err


# the workload keys `experiments.ineffective` reads (54210d73 made it read groups: KeyError here)
WORKLOAD = {"arrival": "batch", "groups": 4}


def test_a_decode_fixed_cost_on_a_sim_run_is_warned_about(capsys):
    # a sim run's requests (bench's generated or traced workload, an experiment cell's) generate
    # one token each, sampled at their prefill's end: no worker call is ever decode-only, so
    # `bench --decode-fixed-cost-ms 100` printed the very figures of a run without it, silently
    tiny = ["--groups", "1", "--candidates", "2", "--context-len", "32", "--candidate-len", "16"]
    assert main(["bench", "--runner", "sim", *tiny, "--decode-fixed-cost-ms", "100"]) == 0
    assert (
        "radixflow: warning: --decode-fixed-cost-ms has no effect on the sim runner"
        in capsys.readouterr().err
    )
    from radixflow.experiments.ineffective import ineffective as cell_ineffective

    settings = {**CELL_KEYS, "runner": "sim"}
    assert "one token" in cell_ineffective(settings, WORKLOAD, True, {})["decode_fixed_cost_ms"]


def test_one_sim_option_on_the_torch_runner_is_told_it_sets_the_cost_model_in_the_singular():
    # "--tflops has no effect with the torch runner (they set the sim cost model)"
    torch = EngineOptions(model="qwen3_5-tiny")
    assert ineffective(torch, ["tflops"]) == [
        "--tflops has no effect with the torch runner (it sets the sim cost model)"
    ]
    (two,) = ineffective(torch, ["hardware", "tflops"])
    assert two == "--hardware, --tflops have no effect with the torch runner (they set the sim cost model)"


def test_a_toml_cell_with_no_state_slots_warns_of_its_placement_and_admission():
    from radixflow.experiments.ineffective import ineffective as cell_ineffective

    settings = {**CELL_KEYS, "runner": "sim", "state_slots": 0}
    workload = WORKLOAD
    idle = cell_ineffective(settings, workload, True, {})
    assert "state_slots = 0" in idle["placement"] and "state_slots = 0" in idle["admission"]
    # a capacity replaces the slots given: the placement then matters again
    assert "placement" not in cell_ineffective({**settings, "capacity": 0.5}, workload, True, {})


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--json"],
        ["bench", "--round-trace"],
        ["run-batch", "qwen3_5-tiny", "-i", "in.jsonl", "--output"],
        ["calibrate", "--model", "qwen3_5-tiny", "--out"],
    ],
)
def test_an_output_path_too_long_for_a_file_system_is_one_line(argv, capsys, tmp_path, monkeypatch):
    # "OSError: [Errno 36] File name too long" and a traceback, from the first look at the path
    monkeypatch.chdir(tmp_path)
    line = {"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "hi"}}
    (tmp_path / "in.jsonl").write_text(json.dumps(line) + "\n")
    assert main([*argv, "a" * 300]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("radixflow: error: ") and argv[-1] in line, line
    assert "must be a path of parts up to 255 bytes" in line, line


def test_the_cpu_clock_warning_counts_torchs_default_threads_as_torch_does(monkeypatch):
    # torch's default is one thread per CPU of the affinity mask (`taskset -c 0`: one), but the
    # warning counted every CPU of the host: "clock cpu with 8 torch threads" over one thread
    import os

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    torch = EngineOptions(model="qwen3_5-tiny", clock="cpu")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert clock_warnings(torch) == []
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    (warning,) = clock_warnings(torch)
    assert warning.startswith("clock cpu with 3 torch threads"), warning


@pytest.mark.parametrize("command", ["serve", "run-batch"])
def test_a_size_flags_default_is_shown_as_a_size(command):
    """--max-body-bytes and --long-body-bytes, whose help speaks in sizes (8MiB, 64KiB), showed
    their defaults in bytes: "(default: 4194304)", "(default: 65536)"; docs/serving.md says 4 MiB
    and 64 KiB. A default is shown as the flag takes it, in a unit that holds it exactly."""
    actions = _actions(_command(command))
    assert actions["max_body_bytes"].help.endswith("(default: 4MiB)")
    assert actions["long_body_bytes"].help.endswith("(default: 64KiB)")


NUMBER_OPTIONS = [f.name for f in option_fields() if spec_of(f).kind in (int, float)]
# text a user may type for a number, each with the value LLM(...) or a TOML cell would be given
TYPED = ["-1", "0", "1", "2.5", "2.0", "1e400", "nan", "-inf", "1_0", "\u0661\u0662", "9" * 5000, "x"]


def _as_python(text: str) -> object:
    """``text`` as the number a Python or TOML user writes for it (the text itself where none)."""
    if text == "9" * len(text):  # past the 4300 digits int() reads
        return 10 ** len(text) - 1
    for read in (int, float):
        try:
            return read(text) if text.isascii() else text
        except ValueError:
            continue
    return text


def _core(message: str) -> str:
    return message.rpartition(", got ")[0] or message


@pytest.mark.parametrize("name", NUMBER_OPTIONS)
def test_every_number_option_takes_or_refuses_a_typed_value_as_the_mapping_door_does(name):
    """Each engine option's flag against `EngineOptions.from_mapping` (LLM(...), a TOML cell),
    fed the same numbers: both take a value (the same one) or both refuse it in the same words."""
    flag_name = spec_of(next(f for f in option_fields() if f.name == name)).flag or "--" + name.replace(
        "_", "-"
    )
    for text in TYPED:
        try:
            want: object = getattr(EngineOptions.from_mapping({name: _as_python(text)}), name)
        except ProblemError as e:
            want = _core(e.problem.message)
        try:
            got: object = getattr(from_args(_command("bench").parse_args([f"{flag_name}={text}"])), name)
        except ProblemError as e:
            got = _core(e.problem.message)
        assert got == want, (name, text[:20], got, want)


SERVER_NUMBERS = [
    (cls, f.name)
    for cls in (ServerConfig, Listen)
    for f in dataclasses.fields(cls)
    if spec_of(f).kind in (int, float)
]


@pytest.mark.parametrize(("cls", "name"), SERVER_NUMBERS, ids=[name for _, name in SERVER_NUMBERS])
def test_every_server_number_takes_or_refuses_a_typed_value_as_the_mapping_door_does(cls, name):
    """`radixflow serve`'s limits against `checked` (the fleet's `ServerConfig(...)`), as above."""
    from radixflow.cli.serve_setup import server_settings

    flag_name = flag_spellings(cls)[name].split("/")[0]
    for text in TYPED:
        try:
            want: object = getattr(checked(cls, {name: _as_python(text)}), name)
        except ProblemError as e:
            want = _core(e.problem.message)
        try:
            settings = server_settings(_command("serve").parse_args(["m", f"{flag_name}={text}"]))
            got: object = getattr(settings[0] if cls is Listen else settings[1], name)
        except ProblemError as e:
            got = _core(e.problem.message)
        assert got == want, (name, text[:20], got, want)
