"""`radixflow score`'s doors beside the API: what `--json` and `--input` write, what each flag
refuses before the model loads, and how its refusals read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from radixflow.generation import LLM
from radixflow.generation.scoring import EMPTY_CONTEXT, CandidateScore

MODEL = "qwen3_5-tiny"
NOT_JSON_ID = "id: NaN and Infinity are not JSON (the id is echoed back)"


def _no_load(*args: object, **kwargs: object) -> None:
    raise AssertionError("the model was loaded")


@pytest.mark.parametrize("bad", [float("-inf"), float("nan")])
def test_a_non_finite_logprob_is_written_as_the_servers_stand_in_in_valid_json(
    zoo, monkeypatch, capsys, tmp_path, bad
):
    # --json and --input wrote -Infinity and NaN, which no strict JSON reader takes; /v1/score
    # answers -9999 for the same score
    from radixflow.cli import main
    from radixflow.server.responses.logprobs import NEG_INF_LOGPROB
    from radixflow.server.score import entry

    score = CandidateScore(0, (5, 6), (-0.5, bad), (1, 7), cached_tokens=0, prompt_tokens=3)
    monkeypatch.setattr(LLM, "score", lambda self, context, candidates, **kwargs: [score])

    def score_many(self, contexts, candidates, progress=None, on_context=None, add_special_tokens=None):
        on_context(0, [score])
        return [[score]]

    monkeypatch.setattr(LLM, "score_many", score_many)
    assert main(["score", MODEL, "--context", "a", "--candidate", " b", "--json"]) == 0
    (printed,) = json.loads(capsys.readouterr().out, parse_constant=_refused)
    given = tmp_path / "in.jsonl"
    given.write_text('{"context": "a", "candidates": [" b"]}\n')
    assert main(["score", MODEL, "--input", str(given)]) == 0
    (row,) = json.loads(capsys.readouterr().out, parse_constant=_refused)["scores"]
    served = entry(score)
    for written in (printed, row):
        assert written["logprobs"] == [-0.5, NEG_INF_LOGPROB] == served["token_logprobs"]
        assert written["total"] == NEG_INF_LOGPROB == served["total_logprob"]
        assert written["mean"] == NEG_INF_LOGPROB == served["mean_logprob"]


def _refused(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--context", "a\udcff", "--candidate", " b"],
            "--context: not UTF-8 text (byte 0xff at character 2)",
        ),
        (
            ["--context", "a", "--candidate", " b", "--candidate", " c\udce9"],
            "--candidate: candidate 1 is not UTF-8 text (byte 0xe9 at character 3)",
        ),
        (
            ["--context", "\ud800", "--candidate", " b"],
            "--context: not UTF-8 text (a lone surrogate at character 1)",
        ),
    ],
)
def test_text_that_is_not_utf8_is_refused_by_its_flag_before_the_model_loads(monkeypatch, capsys, argv, said):
    # a byte of the command line that is not UTF-8 (Python holds it as a lone surrogate) was
    # refused as "context: text contains a lone UTF-16 surrogate" once the model had loaded
    from radixflow.cli import main

    monkeypatch.setattr(LLM, "from_options", _no_load)
    assert main(["score", MODEL, *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"radixflow: error: {said}\n"


def _with_bos(tmp_path: Path) -> Path:
    """A copy of MODEL whose tokenizer starts every text with a BOS token (<|endoftext|>, id 0),
    as Llama's and Gemma's do."""
    from radixflow.models.zoo import ensure_model

    model = tmp_path / "with-bos"
    shutil.copytree(ensure_model(MODEL), model)
    bos = {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    tokenizer["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}},
    }
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    return model


def test_an_empty_context_is_the_bos_token_where_the_tokenizer_adds_one(zoo, capsys, tmp_path):
    # `--context ""` was refused before the model loaded, where LLM.score("") and /v1/score score
    # each candidate after the BOS token alone (its unconditional likelihood); a model whose
    # tokenizer adds nothing is refused by the flag, once its tokenizer is known
    from radixflow.cli import main

    model = _with_bos(tmp_path)
    assert main(["score", str(model), "--context", "", "--candidate", " b", "--json"]) == 0
    (printed,) = json.loads(capsys.readouterr().out)
    (want,) = LLM(str(model), kv_blocks=64, state_slots=8).score("", [" b"])
    assert printed["prompt_tokens"] == 1 + len(printed["token_ids"]) == want.prompt_tokens
    assert printed["total"] == pytest.approx(want.total, abs=1e-4)
    assert main(["score", MODEL, "--context", "", "--candidate", " b"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"radixflow: error: --context: {EMPTY_CONTEXT}\n"


def test_an_input_line_may_give_a_conversation_as_messages_as_the_server_takes_it(zoo, capsys, tmp_path):
    # /v1/score takes a conversation as "messages"; the file refused that field ("unknown field
    # 'messages'"), taking a conversation only as its "context"
    from radixflow.cli import main

    messages = [{"role": "user", "content": "Pick one."}]
    given = tmp_path / "in.jsonl"
    given.write_text(
        json.dumps({"id": "m", "messages": messages, "candidates": [" yes", [5, 6]]})
        + "\n"
        + json.dumps({"id": "c", "context": messages, "candidates": [" yes", [5, 6]]})
        + "\n"
    )
    assert main(["score", MODEL, "--input", str(given)]) == 0
    by_messages, by_context = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert by_messages["id"] == "m" and by_context["id"] == "c"
    for mine, theirs in zip(by_messages["scores"], by_context["scores"], strict=True):
        assert mine["token_ids"] == theirs["token_ids"] and mine["prompt_tokens"] == theirs["prompt_tokens"]
        assert mine["total"] == pytest.approx(theirs["total"], abs=1e-4)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            {"context": "a", "messages": [{"role": "user", "content": "a"}]},
            "give exactly one of context and messages",
        ),
        # each as /v1/score says it of the same body
        ({"messages": [5, 6]}, "messages[0]: must be an object, got 5"),
        ({"messages": []}, "messages must not be empty"),
        ({"messages": "a"}, 'messages: must be a list, got "a"'),
        ({"context": None}, "give exactly one of context and messages"),
        ({"context": 5}, "context must be a string, a list of token ids or a list of messages, got 5"),
        (
            {"context": "a", "candidates": " b"},
            'candidates must be a list of strings or token-id lists, got " b"',
        ),
        (
            {"context": "a", "candidates": None},
            "candidates must be a list of strings or token-id lists, got null",
        ),
        ({"context": "a", "candidates": []}, "candidates: none given"),
        # Python's reader takes NaN and Infinity, and the id was echoed back as such: no JSON out
        ({"id": float("nan"), "context": "a"}, NOT_JSON_ID),
        ({"id": [1, float("-inf")], "context": "a"}, NOT_JSON_ID),
        # as /v1/score refuses them
        ({"context": "a", "add_special_tokens": "no"}, 'add_special_tokens: must be true or false, got "no"'),
        (
            {"messages": [{"role": "user", "content": "a"}], "add_special_tokens": True},
            "add_special_tokens: not implemented with messages: the chat template writes them",
        ),
    ],
)
def test_a_line_of_another_shape_is_refused_before_the_model_loads(monkeypatch, capsys, tmp_path, line, said):
    from radixflow.cli import main

    monkeypatch.setattr(LLM, "from_options", _no_load)
    given = tmp_path / "in.jsonl"
    given.write_text(json.dumps({"candidates": [" b"]} | line) + "\n")
    assert main(["score", MODEL, "--input", str(given)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"radixflow: error: --input {given}: line 1: {said}\n"


def test_a_line_giving_a_field_twice_is_refused_not_read_as_its_last_value(monkeypatch, capsys, tmp_path):
    # JSON keeps the last value: a line edited by adding a second "candidates" scored one of
    # the two unsaid, where the line refuses a field it does not know (as a trace line does)
    from radixflow.cli import main

    monkeypatch.setattr(LLM, "from_options", _no_load)
    given = tmp_path / "in.jsonl"
    given.write_text('{"context": "a", "candidates": [" b"], "candidates": [" c"]}\n')
    assert main(["score", MODEL, "--input", str(given)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"radixflow: error: --input {given}: line 1: field 'candidates' given twice\n"


@pytest.mark.parametrize("chat", [[], ["--chat"]])
def test_a_context_the_model_refuses_is_named_by_its_flag(zoo, capsys, chat):
    # it was "context: has 2701 tokens; ...", the API's name, where every other refusal of the
    # command names the flag typed ("--context: is empty")
    from radixflow.cli import main

    assert main(["score", MODEL, "--context", "word " * 9000, *chat, "--candidate", " a"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("radixflow: error: --context: has ") and err.count("\n") == 1
    assert err.endswith(" tokens; the model context is 8192\n")


def test_a_text_context_may_go_without_special_tokens_at_every_door(zoo, capsys, tmp_path):
    # /v1/score (and run-batch's lines for it) took "add_special_tokens": false; LLM.score and an
    # --input line had no way to say it ("unknown field 'add_special_tokens'")
    from radixflow.cli import main

    model = _with_bos(tmp_path)
    llm = LLM(str(model), kv_blocks=64, state_slots=8)
    (bare,) = llm.score("a b", [" c"], add_special_tokens=False)
    (ids,) = llm.score(llm.tokenizer.encode("a b", add_special_tokens=False), [" c"])
    (with_bos,) = llm.score("a b", [" c"])
    assert bare.prompt_tokens == ids.prompt_tokens == with_bos.prompt_tokens - 1
    assert bare.total == pytest.approx(ids.total, abs=1e-5)
    assert llm.scoring_problem("", [" c"], add_special_tokens=False) == f"context: {EMPTY_CONTEXT}"
    given = tmp_path / "in.jsonl"
    lines = [{"context": "a b", "candidates": [" c"], "add_special_tokens": s} for s in (False, True)]
    given.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["score", str(model), "--input", str(given)]) == 0
    rows = [json.loads(line)["scores"][0] for line in capsys.readouterr().out.splitlines()]
    assert [r["prompt_tokens"] for r in rows] == [bare.prompt_tokens, with_bos.prompt_tokens]
    assert rows[0]["total"] == pytest.approx(bare.total, abs=1e-4)
    with pytest.raises(ValueError, match=r"^add_special_tokens: not implemented with messages"):
        llm.score([{"role": "user", "content": "a"}], [" c"], add_special_tokens=True)


def test_a_candidate_the_model_refuses_is_named_by_the_flag_that_gave_it(zoo, capsys, tmp_path):
    # it was "candidate 1: has 9001 tokens; ...", the API's name, where the command's own refusals
    # name the flag ("--candidate: candidate 0 is empty", "--candidates-file: line 2 of PATH is empty")
    from radixflow.cli import main

    long = "w " * 9000
    given = tmp_path / "cands.txt"
    given.write_text(f" a\n{long}\n")
    said = "has 9001 tokens; the model context is 8192"
    for argv, want in [
        (["--candidate", " b", "--candidate", long], f"--candidate: candidate 1: {said}"),
        (
            ["--candidate", " b", "--candidates-file", str(given)],
            f"--candidates-file: line 2 of {given}: {said}",
        ),
    ]:
        assert main(["score", MODEL, "--context", "a", *argv]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err == f"radixflow: error: {want}\n"


def test_an_input_line_is_tokenized_once_not_once_to_check_and_again_to_run(
    zoo, capsys, tmp_path, monkeypatch
):
    # each line's context and candidates were tokenized by `scoring_problem` to check the line and
    # again by `score_many` to run it: twice the work, and two readings that could differ
    from collections import Counter

    from radixflow.cli import main
    from radixflow.generation.tokenizer import TextTokenizer

    seen: Counter[str] = Counter()
    encode = TextTokenizer.encode
    monkeypatch.setattr(
        TextTokenizer, "encode", lambda self, text, **kw: seen.update([text]) or encode(self, text, **kw)
    )
    given = tmp_path / "in.jsonl"
    given.write_text(json.dumps({"context": "a b", "candidates": [" c", " d"]}) + "\n")
    assert main(["score", MODEL, "--input", str(given)]) == 0
    assert [len(json.loads(line)["scores"]) for line in capsys.readouterr().out.splitlines()] == [2]
    assert seen == {"a b": 1, " c": 1, " d": 1}


def test_a_text_prompt_may_go_without_special_tokens_at_generate_as_at_score(zoo, tmp_path):
    # /v1/completions, /v1/score and LLM.score took add_special_tokens; LLM.generate had no way
    # to send a text prompt without its BOS token (TypeError: unexpected keyword argument)
    model = _with_bos(tmp_path)
    llm = LLM(str(model), kv_blocks=64, state_slots=8)
    bare = llm.tokenizer.encode("a b", add_special_tokens=False)
    (out,) = llm.generate("a b", add_special_tokens=False)
    (with_bos,) = llm.generate("a b", add_special_tokens=None)
    assert list(out.prompt_token_ids) == bare and list(with_bos.prompt_token_ids) == [0, *bare]
    (ids,) = llm.generate([[5, 6]], add_special_tokens=False)
    assert list(ids.prompt_token_ids) == [5, 6]  # token ids go as given
    with pytest.raises(ValueError, match=r"^add_special_tokens: must be true or false, got 'no'$"):
        llm.generate("a b", add_special_tokens="no")


def test_restart_beside_context_says_it_is_inputs_flag_not_to_give_output(zoo, capsys):
    # it said "without --output PATH there is no partial file", and --output beside --context is
    # refused: the warning sent the user to a flag the command then refused
    from radixflow.cli import main

    assert main(["score", MODEL, "--context", "a", "--candidate", " b", "--json", "--restart"]) == 0
    err = capsys.readouterr().err
    assert "radixflow: warning: --restart: no effect: only --input's rows go to a partial file\n" in err
    assert "--output" not in err
