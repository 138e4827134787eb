"""Every command that takes a model takes it as MODEL or as ``--model MODEL`` (as `vllm serve`
does): `bench` and `calibrate` refused the argument, the others the flag, each with argparse's bare
"unrecognized arguments"."""

from __future__ import annotations

import argparse

import pytest

from radixflow.cli import main
from radixflow.cli.app import build_parser
from radixflow.cli.command import UsageError
from radixflow.options.model_arg import MODEL_FLAG

# what each command needs besides its model to parse
REST = {
    "generate": ["--prompt", "x"],
    "score": [],
    "serve": [],
    "run-batch": ["-i", "f.jsonl"],
    "cost": [],
    "bench": [],
    "calibrate": [],
}


def _parse(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def _model(command: str, name: str) -> object:
    """``name`` as the command holds it: calibrate times a list of models."""
    return [name] if command == "calibrate" else name


@pytest.mark.parametrize("command", REST)
def test_the_model_is_taken_as_the_argument_or_the_flag(command):
    by_argument = _parse([command, "m", *REST[command]])
    by_flag = _parse([command, *REST[command], "--model", "m"])
    assert by_argument.model == by_flag.model == _model(command, "m")
    # an error about the model names it as it was given
    assert getattr(by_argument, MODEL_FLAG) is None and getattr(by_flag, MODEL_FLAG) == "--model"
    assert vars(by_argument).keys() == vars(by_flag).keys()


@pytest.mark.parametrize("command", REST)
def test_the_same_model_both_ways_is_one_model(command):
    assert _parse([command, "m", "--model", "m", *REST[command]]).model == _model(command, "m")


@pytest.mark.parametrize("command", REST)
def test_two_models_both_ways_are_one_line_naming_both(command):
    with pytest.raises(UsageError) as e:
        _parse([command, "a", *REST[command], "--model", "b"])
    two = (
        "name different models: give the list one way"
        if command == "calibrate"
        else "name two models: give one, either way"
    )
    assert str(e.value) == f"MODEL 'a' and --model 'b' {two}"


def test_calibrate_takes_several_models_either_way_and_refuses_two_lists():
    assert _parse(["calibrate", "a", "b"]).model == ["a", "b"]
    assert _parse(["calibrate", "--model", "a", "--model", "b"]).model == ["a", "b"]
    assert _parse(["calibrate", "a", "b", "--model", "b", "--model", "a"]).model == ["b", "a"]
    # two lists, not "two models: give one" (the command takes several)
    with pytest.raises(UsageError) as e:
        _parse(["calibrate", "a", "b", "--model", "a"])
    assert str(e.value) == "MODEL 'a' 'b' and --model 'a' name different models: give the list one way"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["generate"], "MODEL, --prompt"),
        (["generate", "--prompt", "x"], "MODEL"),
        (["score"], "MODEL"),
        (["serve", "--port", "0"], "MODEL"),
        (["run-batch"], "MODEL, -i/--input"),
        (["cost", "--decode", "2"], "MODEL"),
        (["calibrate", "--repeats", "2"], "--model"),
    ],
)
def test_a_model_not_given_is_refused_as_before(capsys, argv, said):
    assert main(argv) == 2
    assert capsys.readouterr().err == f"radixflow: error: the following arguments are required: {said}\n"


def test_a_flag_missing_beside_a_model_given_either_way_is_named_alone():
    for model in (["m"], ["--model", "m"]):
        with pytest.raises(UsageError, match=r"^the following arguments are required: --prompt$"):
            _parse(["generate", *model])


def test_bench_without_a_model_runs_the_default_and_names_the_flag():
    args = _parse(["bench"])
    assert args.model is None and getattr(args, MODEL_FLAG) == "--model"  # EngineOptions' default


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["bench", "--runner", "sim", "gpt-9"], "model"),
        (["bench", "--runner", "sim", "--model", "gpt-9"], "--model"),
        (["cost", "gpt-9"], "model"),
        (["cost", "--model", "gpt-9"], "--model"),
    ],
)
def test_an_unknown_model_is_named_as_it_was_given(capsys, argv, said):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"radixflow: error: {said}: unknown sim model 'gpt-9'") and err.count("\n") == 1


def test_calibrate_names_one_checkpoint_given_twice_as_it_was_given(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    (tmp_path / "ck").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", "ck", "./ck", "--out", "p.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("radixflow: error: model: 'ck' and './ck' are the same checkpoint")
