"""`radixflow cost`: one worker call's predicted time and its terms, as a table or as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from radixflow.cli import main
from radixflow.cli.app import build_parser
from radixflow.costmodel.hardware.gpu_figures import DENSE_BF16_FLOPS

TERM_KEYS = {"seconds", "flops", "bytes", "source"}


def cost(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["cost", *argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


def test_json_is_exactly_seconds_tp_and_terms_that_sum_to_it(capsys):
    report = cost(
        capsys, "qwen3_5-2b", "--hardware", "h200", "--prefill", "300", "--decode", "4", "--context", "64"
    )
    assert set(report) == {"seconds", "tp", "fits", "terms"}
    assert isinstance(report["seconds"], float) and report["tp"] == 1 and report["fits"] is True
    for name, term in report["terms"].items():
        assert set(term) == TERM_KEYS, name
        assert all(isinstance(term[k], float | int) for k in ("seconds", "flops", "bytes"))
        assert isinstance(term["source"], str) and term["source"], name
    assert report["seconds"] == pytest.approx(sum(t["seconds"] for t in report["terms"].values()))
    assert {"fixed", "matmul", "attention", "gdn", "lm_head", "state_copy"} <= set(report["terms"])


def test_acceptance_figures(capsys):
    prefill = cost(capsys, "qwen3-4b", "--hardware", "h200", "--prefill", "512")
    assert 5e-3 <= prefill["seconds"] <= 30e-3
    decode = cost(capsys, "qwen3-4b", "--hardware", "h200", "--decode", "1", "--context", "2048")
    assert 1.5e-3 <= decode["seconds"] <= 6e-3
    big = cost(capsys, "qwen3_next-80b-a3b", "--hardware", "h200")
    assert big["tp"] >= 2 and big["terms"]["allreduce"]["seconds"] > 0
    long = cost(capsys, "qwen3_5-2b", "--hardware", "h200", "--prefill", "8192")
    matmul = long["terms"]["matmul"]
    assert matmul["flops"] / matmul["seconds"] <= 0.9 * DENSE_BF16_FLOPS


def test_no_round_given_is_a_512_token_prefill(capsys):
    assert cost(capsys, "qwen3-4b") == cost(capsys, "qwen3-4b", "--prefill", "512")


def test_the_engine_flags_set_the_fixed_costs_and_the_scheduler_mode(capsys):
    fixed = cost(capsys, "qwen3-4b", "--round-overhead-ms", "10")["terms"]["fixed"]["seconds"]
    assert fixed == pytest.approx(10e-3)
    decode = cost(capsys, "qwen3-4b", "--decode", "2", "--decode-fixed-cost-ms", "1")
    assert decode["terms"]["fixed"]["seconds"] == pytest.approx(1e-3)
    serial = cost(capsys, "qwen3-4b", "--scheduler-time", "serial")["terms"]["scheduler"]["seconds"]
    assert serial == pytest.approx(0.1e-3 + 50e-6)


@pytest.mark.parametrize(
    ("argv", "term", "flag"),
    [
        (["--fixed-cost-ms", "7"], "fixed", "fixed_cost_ms = 7"),
        (["--decode", "2", "--decode-fixed-cost-ms", "1.5"], "fixed", "decode_fixed_cost_ms = 1.5"),
        (["--hardware", "cpu", "--per-request-ms", "4"], "sequences", "per_request_ms = 4"),
        (["--hardware", "cpu", "--tflops", "0.5"], "matmul", "tflops = 0.5"),
    ],
)
def test_a_figure_set_by_an_option_is_sourced_to_the_option(capsys, argv, term, flag):
    """``--fixed-cost-ms 7`` charged 7 ms and sourced it to the profile's "central 3 ms, band
    1-10 ms": the figure and its stated source disagreed."""
    source = cost(capsys, "qwen3-4b", *argv)["terms"][term]["source"]
    assert flag in source and "central 3 ms" not in source and "rough figures" not in source, source


def test_tflops_on_measured_kernels_is_warned_about(capsys):
    assert main(["cost", "qwen3-4b", "--hardware", "h100", "--tflops", "100", "--json"]) == 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("radixflow: warning: --tflops has no effect with hardware 'h100': ")
    assert "kernel times are measured" in err and "\n" not in err
    assert main(["cost", "qwen3-4b", "--hardware", "cpu", "--tflops", "100", "--json"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("argv", "warning"),
    [
        (["--decode-fixed-cost-ms", "50"], "--decode-fixed-cost-ms has no effect: this call has a prefill"),
        (["--prefill", "8", "--decode", "2", "--decode-fixed-cost-ms", "50"], "--decode-fixed-cost-ms has"),
        (["--decode", "2", "--fixed-cost-ms", "50"], "--fixed-cost-ms has no effect: a decode-only call"),
    ],
)
def test_a_fixed_cost_of_the_other_kind_of_call_is_warned_about(capsys, argv, warning):
    # `cost qwen3-4b --decode-fixed-cost-ms 50` printed the 512-token prefill's 3 ms fixed cost and
    # `--decode 2 --fixed-cost-ms 50` the decode call's 0.4 ms: the flag changed nothing, silently
    plain = [a for a, before in zip(argv, ["", *argv[:-1]], strict=True) if "fixed" not in a + before]
    assert main(["cost", "qwen3-4b", *argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith(f"radixflow: warning: {warning}") and err.count("\n") == 1, err
    assert json.loads(out) == cost(capsys, "qwen3-4b", *plain)  # what it warns of: the same call
    assert cost(capsys, "qwen3-4b", "--decode", "2", "--decode-fixed-cost-ms", "50")  # no warning there
    assert cost(capsys, "qwen3-4b", "--prefill", "8", "--fixed-cost-ms", "50")


def test_a_fitted_profile_is_costed_by_its_rates(capsys):
    report = cost(capsys, "qwen3-4b", "--hardware", "cpu")
    assert report["tp"] == 1 and "memory" in report["terms"] and "scheduler" not in report["terms"]


def test_the_table_names_every_term_and_the_total(capsys):
    assert (
        main(["cost", "qwen3_next-80b-a3b", "--hardware", "h100", "--decode", "8", "--context", "100"]) == 0
    )
    out = capsys.readouterr().out
    assert "qwen3_next-80b-a3b on h100 (tp 4)" in out and "8 decode steps after 100 cached" in out
    for term in ("fixed", "matmul", "moe", "allreduce", "lm_head"):
        assert f"{term}: " in out


def test_the_round_is_said_with_the_context_the_help_gives_it(capsys):
    # the help calls --context C each decode step's context, and the output said "at context
    # C + 1" (and "1 decode steps"): both now count C as the tokens cached before the step
    assert main(["cost", "qwen3_5-2b", "--decode", "1", "--context", "2048"]) == 0
    assert ": 1 decode step after 2048 cached: " in capsys.readouterr().out
    assert main(["cost", "qwen3_5-2b", "--decode", "2", "--prefill", "8", "--context", "64"]) == 0
    assert ": prefill 8 tokens after 64 cached, 2 decode steps after 64 cached: " in capsys.readouterr().out
    help_text = " ".join(build_parser()._subparsers._group_actions[0].choices["cost"].format_help().split())
    assert "tokens cached before the prefill chunk" in help_text and "before each decode step" in help_text


def test_a_one_token_prefill_is_said_as_asked_and_priced_as_the_sim_prices_it(capsys):
    """--prefill 1 was said as "1 decode step" (with a state restore no decode step has): the
    chunk is the prefill asked for; one new position is priced as a decode step, and that is said."""
    assert main(["cost", "qwen3_5-2b", "--prefill", "1", "--context", "100"]) == 0
    out = capsys.readouterr().out
    assert ": prefill 1 token after 100 cached (one new position: priced as a decode step): " in out
    assert "state_copy" in out  # the restore at the cached prefix, which the prefill asked for
    assert main(["cost", "qwen3_5-2b", "--prefill", "1", "--decode", "2"]) == 0
    assert ": prefill 1 token after 0 cached (one new position: priced as a decode step), 2 decode steps" in (
        capsys.readouterr().out
    )


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["gpt-17"], "model: unknown sim model 'gpt-17'"),
        # "unknown sim model ''" and "unknown sim model 'a\\x00b' (sim shapes: ...)": bench, generate,
        # LLM(...) and a TOML cell say what is wrong with the name itself
        ([""], "model: must not be empty"),
        (["a\x00b"], "model: 'a\\x00b' contains a NUL character"),
        (["qwen3-4b", "--context", "-1"], "--context: must be at least 0, got -1"),
        (["qwen3-4b", "--prefill", "0"], "--prefill: must be positive, got 0"),
        (["qwen3-4b", "--decode", "0"], "--decode: must be positive, got 0"),
        (["qwen3-4b", "--decode", "70000"], "--decode: must be at most 65536"),
        (["qwen3-4b", "--prefill", "x"], "--prefill: must be an integer, got 'x'"),
        (["qwen3-4b", "--prefill", "40000", "--context", "1000"], "reaches past qwen3-4b's context of 40960"),
        (["qwen3-4b", "--decode", "1", "--context", "40960"], "--context 40960 reaches past"),
        # it read "--context 40900 plus --prefill 512", a flag value the command line never gave
        (["qwen3-4b", "--context", "40900"], "--context 40900 plus the default --prefill 512 reaches past"),
        (["qwen3-4b", "--hardware", "tpu"], "--hardware: unknown hardware 'tpu'"),
        (["qwen3-4b", "--fixed-cost-ms", "nan"], "must be a finite number, got nan"),
        (["qwen3-4b", "--decode-fixed-cost-ms", "-1"], "--decode-fixed-cost-ms: must be at least 0, got -1"),
        (["qwen3-4b", "--scheduler-time", "async"], "unknown scheduler_time 'async'"),
        (["qwen3-4b", "--kv-blocks", "4"], "unrecognized arguments: --kv-blocks"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, says):
    assert main(["cost", *argv]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith("radixflow: error: "), err
    assert says in lines[0], lines[0]


def test_a_model_split_over_gpus_that_do_not_divide_its_heads_is_warned_about(tmp_path, capsys):
    """A model too large for one GPU was priced on 16 GPUs with 6 query heads, each GPU at a
    rounded-up share of one head: a split no engine runs, without a word."""
    config = {
        "model_type": "qwen3",
        "hidden_size": 16384,
        "num_hidden_layers": 120,
        "num_attention_heads": 6,
        "num_key_value_heads": 3,
        "head_dim": 128,
        "intermediate_size": 65536,
        "vocab_size": 151936,
        "max_position_embeddings": 4096,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["cost", str(tmp_path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["tp"] == 16
    assert err == (
        f"radixflow: warning: {tmp_path} on 16 GPUs of h100: layer 0's attention heads 6 do not "
        "split over 16 GPUs (vLLM refuses such a split); each GPU is priced at its rounded-up share\n"
    )


def test_a_zoo_name_is_costed_as_calibrate_fitted_it(capsys):
    """`cost <zoo name>` on the calibrated CPU profile predicts the profile's own held-out rounds
    of that model within the error `radixflow calibrate` recorded for it: the shape read from the
    zoo's preset is the one the profile was fitted on."""
    path = Path(__file__).resolve().parents[2] / "experiments" / "profiles" / "cpu.json"
    calibration = json.loads(path.read_text())["calibration"]
    worst = {e["model"]: e["max_abs_error"] for e in calibration["errors"]}
    single = [r for r in calibration["rounds"] if r["split"] == "held_out" and len(r["chunks"]) == 1]
    assert {r["model"] for r in single} == set(worst)
    for r in single:
        start, length = r["chunks"][0][:2]
        argv = [r["model"], "--hardware", str(path), "--prefill", str(length), "--context", str(start)]
        predicted = cost(capsys, *argv)["seconds"]
        assert abs(predicted / r["seconds"] - 1) <= worst[r["model"]] + 1e-3, (r, predicted)


def test_a_checkpoint_directory_is_named_as_given_never_read_as_markup(tmp_path, capsys, zoo):
    """The first line read the model's name as rich markup: a directory `m[red]` showed as `m`."""
    from radixflow.models.zoo import ensure_model

    model = tmp_path / "m[red]"
    model.mkdir()
    (model / "config.json").write_text((ensure_model("qwen3_5-tiny") / "config.json").read_text())
    assert main(["cost", str(model), "--prefill", "16"]) == 0
    assert "m[red]" in capsys.readouterr().out


def test_a_model_name_too_long_for_a_path_is_one_line(capsys):
    # "OSError: [Errno 36] File name too long" and a traceback, as `bench --model` gave
    assert main(["cost", "a" * 300]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("radixflow: error: model: must be a path of parts up to 255 bytes"), line


@pytest.mark.parametrize("command", [["cost"], ["bench", "--runner", "sim"]])
def test_a_checkpoints_config_file_given_for_its_directory_is_named_as_such(tmp_path, capsys, command):
    """`cost ck/config.json` said "unknown sim model 'ck/config.json' (sim shapes: ...)", where
    bench, generate, serve, LLM(...) and a TOML cell say the path is a file and name the directory."""
    (tmp_path / "config.json").write_text("{}")
    assert main([*command, str(tmp_path / "config.json")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    said = f"model: model path {tmp_path / 'config.json'} is a file, not a checkpoint directory"
    assert line.startswith(f"radixflow: error: {said}") and line.endswith(f"did you mean {tmp_path}?"), line


HUGE = {  # a model that fits on no GPU count
    "model_type": "qwen3",
    "hidden_size": 16384,
    "num_hidden_layers": 120,
    "num_attention_heads": 128,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 524288,  # 3T parameters: 6 TB of bf16 weights
    "vocab_size": 151936,
    "max_position_embeddings": 4096,
}


def test_json_says_a_model_that_fits_on_no_gpu_count_does_not_fit(tmp_path, capsys):
    # the text run warned "does not fit even on 64 GPUs"; --json printed its tp and times alone,
    # as for a model that fits
    (tmp_path / "config.json").write_text(json.dumps(HUGE))
    assert main(["cost", str(tmp_path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert (json.loads(out)["tp"], json.loads(out)["fits"]) == (64, False)
    assert "does not fit even on 64 GPUs of h100" in err


def test_bench_warns_of_a_model_that_fits_on_no_gpu_count_as_cost_does(tmp_path, capsys):
    # `cost` warned "does not fit even on 64 GPUs"; `bench --runner sim` printed its figures for
    # the same model and hardware without a word
    (tmp_path / "config.json").write_text(json.dumps(HUGE))
    small = ["--groups", "1", "--candidates", "1", "--context-len", "16", "--candidate-len", "4"]
    out = tmp_path / "out.json"
    bench = ["bench", "--runner", "sim", str(tmp_path), *small, "--policy", "native", "--json", str(out)]
    assert main(bench) == 0
    err = capsys.readouterr().err
    assert "radixflow: warning: " in err and "does not fit even on 64 GPUs of h100" in err, err
    # and its --json says so beside the GPUs, as `cost --json` does
    config = json.loads(out.read_text())["config"]
    assert (config["tensor_parallel"], config["fits"]) == (64, False)
