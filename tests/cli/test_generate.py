"""`radixflow generate`'s outputs as written: what `--json` prints."""

from __future__ import annotations

import json

import pytest

from radixflow.generation import LLM, GenerationOutput
from radixflow.generation.outputs import TokenLogprob

MODEL = "qwen3_5-tiny"


def _refused(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")


def test_a_non_finite_logprob_is_written_as_the_servers_stand_in_in_valid_json(zoo, monkeypatch, capsys):
    # a logit of -inf (a float16 model's overflow) is a logprob of -inf, which --json printed as
    # -Infinity: no JSON, and a strict reader refused the whole list; score and the server write -9999
    from radixflow.cli import main
    from radixflow.server.responses.logprobs import NEG_INF_LOGPROB

    inf = float("-inf")
    token = TokenLogprob(5, "b", inf, ((4, -0.1), (5, inf)))
    out = GenerationOutput("0", (1, 2), (5,), "b", "length", (token,), (None, token), cached_tokens=0)
    monkeypatch.setattr(LLM, "generate", lambda self, prompts, params, **kw: [out])
    assert main(["generate", MODEL, "--prompt", "a", "--max-tokens", "1", "--json"]) == 0
    (printed,) = json.loads(capsys.readouterr().out, parse_constant=_refused)
    for entry in (printed["logprobs"][0], printed["prompt_logprobs"][1]):
        assert entry["logprob"] == NEG_INF_LOGPROB
        assert entry["top"] == [[4, -0.1], [5, NEG_INF_LOGPROB]]
    assert printed["prompt_logprobs"][0] is None


def _no_load(*args: object, **kwargs: object) -> None:
    raise AssertionError("the model was loaded")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--prompt", "a\udcff"], "--prompt: not UTF-8 text (byte 0xff at character 2)"),
        (
            ["--prompt", "ok", "--prompt", "\udce9b"],
            "--prompt: prompt 1 is not UTF-8 text (byte 0xe9 at character 1)",
        ),
        (["--chat", "--prompt", "\ud800"], "--prompt: not UTF-8 text (a lone surrogate at character 1)"),
    ],
)
def test_a_prompt_that_is_not_utf8_is_refused_by_its_flag_before_the_model_loads(
    monkeypatch, capsys, argv, said
):
    # a byte of the command line that is not UTF-8 was refused once the model had loaded, as the
    # API's "prompt: text contains a lone UTF-16 surrogate ('\udcff' at character 1) ...", where
    # `score --context` names its flag and the byte before the model loads
    from radixflow.cli import main

    monkeypatch.setattr(LLM, "from_options", _no_load)
    assert main(["generate", MODEL, *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"radixflow: error: {said}\n"


def test_a_prompt_of_several_the_model_refuses_is_named_by_its_flag_as_a_lone_one_is(zoo, capsys):
    # a lone prompt's refusal read "--prompt: is empty", one of several "prompt 1: is empty":
    # the API's name, where every other refusal of the command names the flag typed
    from radixflow.cli import main

    assert main(["generate", MODEL, "--prompt", "ok", "--prompt", ""]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "radixflow: error: --prompt: prompt 1: is empty\n"
