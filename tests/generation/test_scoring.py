"""Scoring candidates against one shared context (`LLM.score`, `radixflow score`)."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from cli_utils import checkout_env

from radixflow.generation import LLM, SamplingParams

MODEL = "qwen3_5-tiny"
AGAIN = " (the same command run again goes on from where it stopped)"  # the note of a run cut short
CONTEXT = "Reranking models score each candidate document against the same query. " * 3
CANDIDATES = [" The first one.", " A second, longer candidate than the first.", " x", " The first one!"]
TOL = 1e-4
ONE_LINE = '{"context": "a", "candidates": [" b"]}\n'  # an --input file of one good line


@pytest.fixture(scope="module")
def llm(zoo) -> LLM:
    return LLM(MODEL, kv_blocks=256, state_slots=64)


def test_each_score_is_the_sum_of_its_candidate_tokens_logprobs_alone(llm):
    scores = llm.score(CONTEXT, CANDIDATES, namespace="fresh")  # nothing cached there yet
    ctx = llm.tokenizer.encode(CONTEXT)
    assert [s.index for s in scores] == [0, 1, 2, 3]
    for s, cand in zip(scores, CANDIDATES, strict=True):
        ids = llm.tokenizer.encode(cand, add_special_tokens=False)
        assert s.token_ids == tuple(ids) and len(s.logprobs) == len(ids)
        (alone,) = LLM(MODEL, kv_blocks=64, state_slots=8).generate(
            [ctx + ids], SamplingParams(max_tokens=0, prompt_logprobs=0)
        )
        want = [e.logprob for e in alone.prompt_logprobs[len(ctx) :]]  # type: ignore[index, union-attr]
        assert s.logprobs == pytest.approx(want, abs=TOL)
        ranks = [e.rank for e in alone.prompt_logprobs[len(ctx) :]]  # type: ignore[index, union-attr]
        assert s.ranks == tuple(ranks) and s.greedy == all(r == 1 for r in ranks)
        assert s.total == pytest.approx(sum(want), abs=len(ids) * TOL) and s.mean == s.total / len(ids)
    # one batch: the context is computed once, later candidates take it (whole blocks) from the
    # cache; two candidates that begin alike share more
    cached = sorted(s.cached_tokens for s in scores)
    assert cached[0] == 0 and all(c >= len(ctx) // 16 * 16 for c in cached[1:])
    llm.engine.check_integrity()


def test_a_conversation_context_scores_the_candidates_as_replies(llm):
    messages = [{"role": "user", "content": "Which candidate is best?"}]
    replies = ["The first.", "The second one, clearly."]
    scores = llm.score(messages, replies, namespace="chat")
    prompt = llm.tokenizer.encode(llm.tokenizer.chat.render(messages), add_special_tokens=False)
    by_ids = llm.score(prompt, [llm.tokenizer.encode(r, add_special_tokens=False) for r in replies])
    assert [s.token_ids for s in scores] == [s.token_ids for s in by_ids]
    assert [s.total for s in scores] == pytest.approx([s.total for s in by_ids], abs=1e-3)
    with pytest.raises(ValueError, match="context: is empty"):
        llm.score([], replies)


def test_a_greedy_continuation_scores_as_greedy(llm):
    (out,) = llm.generate(CONTEXT, SamplingParams(max_tokens=6, ignore_eos=True))
    (score, other) = llm.score(CONTEXT, [list(out.token_ids), [*out.token_ids[:5], out.token_ids[5] + 1]])
    assert score.greedy and score.ranks == (1,) * 6
    assert not other.greedy and other.ranks[:5] == (1,) * 5 and other.ranks[5] > 1


def test_token_ids_are_used_as_they_are_and_bad_input_is_a_value_error(llm):
    ctx = llm.tokenizer.encode(CONTEXT)
    by_ids = llm.score(ctx, [[5, 9, 40], [7]])
    assert [s.token_ids for s in by_ids] == [(5, 9, 40), (7,)]
    again = llm.score(ctx, [[7], [5, 9, 40]])
    assert again[1].logprobs == pytest.approx(by_ids[0].logprobs, abs=TOL)
    shapes = "candidates must be a list of strings or token-id lists"
    for context, candidates, message in (
        ([], [[5]], "context: is empty"),
        (ctx, [[5], []], "candidate 1: is empty"),
        (ctx, [[5], [1.5]], f"{shapes} (candidate 1 is neither)"),
        (ctx, [[5], [True]], f"{shapes} (candidate 1 is neither)"),
        (ctx, [" a", None], f"{shapes} (candidate 1 is neither)"),
        (ctx, [5], f"{shapes} (candidate 0 is neither)"),
        (ctx, [5, 9], f"{shapes} (candidate 0 is neither)"),  # one flat id list is not a candidate
        (ctx, " a b", f"{shapes}, got a str"),  # not each character a candidate
        (ctx, None, f"{shapes}, got a NoneType"),
        (ctx, [b" a"], f"{shapes} (candidate 0 is neither)"),  # bytes were scored as token ids
        (b"a context", [" a"], "context must be a string, a list of token ids or a list of messages"),
        (ctx, {" a": 1.0, " b": 2.0}, f"{shapes}, got a dict"),  # was scored as its keys
        (ctx, [[5], [10**6]], "candidate 1: token id 1000000 is outside the vocabulary"),
        ([*ctx, 10**6], [" a"], "context: token id 1000000 is outside the vocabulary"),  # not candidate 0's
        ([*ctx, -1], [" a"], "context: token id -1 is outside the vocabulary"),
        (5, [" a"], "context must be a string, a list of token ids or a list of messages"),
        (None, [" a"], "context must be a string, a list of token ids or a list of messages"),
        ([True, 5], [" a"], "context must be a string, a list of token ids or a list of messages"),
        ([5.0], [" a"], "context must be a string, a list of token ids or a list of messages"),
        ([[5]], [" a"], "context must be a string, a list of token ids or a list of messages"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            llm.score(context, candidates)  # type: ignore[arg-type]


def test_score_command_ranks_what_the_offline_api_scores(llm, capsys):
    from radixflow.cli import main

    argv = ["score", MODEL, "--context", CONTEXT, "--kv-blocks", "256", "--state-slots", "64"]
    for c in CANDIDATES:
        argv += ["--candidate", c]
    assert main([*argv, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    want = llm.score(CONTEXT, CANDIDATES)
    assert [p["candidate"] for p in printed] == CANDIDATES
    assert [p["total"] for p in printed] == pytest.approx([s.total for s in want], abs=1e-3)
    assert main(argv) == 0
    table = capsys.readouterr().out
    best = max(want, key=lambda s: s.total)
    first_row = next(line for line in table.splitlines() if line.startswith("│ 1 "))
    assert CANDIDATES[best.index].strip() in first_row
    cells = [c.strip() for c in first_row.strip("│").split("│")]  # rank, candidate, ..., greedy, cached
    assert cells[-2:] == ["yes" if best.greedy else "", str(best.cached_tokens)]
    assert main(["score", MODEL, "--context", "a", "--candidate", ""]) == 2
    assert "--candidate: candidate 0 is empty" in capsys.readouterr().err
    assert main([*argv[:-2], "--chat", "--candidate", " yes", "--json"]) == 0
    chat = json.loads(capsys.readouterr().out)
    (reply,) = llm.score([{"role": "user", "content": CONTEXT}], [" yes"])
    assert chat[-1]["token_ids"] == list(reply.token_ids)
    assert chat[-1]["total"] == pytest.approx(reply.total, abs=1e-3)
    assert main(["score", MODEL, "--context", "a"]) == 2
    assert "no candidates: give --candidate TEXT" in capsys.readouterr().err


def test_candidates_file_lines_are_candidates_as_written(llm, capsys, tmp_path):
    from radixflow.cli import main

    listed = tmp_path / "candidates.txt"
    listed.write_text("".join(c + "\n" for c in CANDIDATES[1:]), encoding="utf-8")
    argv = ["score", MODEL, "--context", CONTEXT, "--candidate", CANDIDATES[0], "--json"]
    assert main([*argv, "--candidates-file", str(listed), "--kv-blocks", "256", "--state-slots", "64"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [p["candidate"] for p in printed] == CANDIDATES  # leading spaces kept
    # a Windows editor's file: a byte-order mark (not part of the first candidate) and CRLF
    windows = tmp_path / "windows.txt"
    windows.write_bytes(b"\xef\xbb\xbf" + "".join(c + "\r\n" for c in CANDIDATES[1:]).encode())
    assert main([*argv, "--candidates-file", str(windows), "--kv-blocks", "256", "--state-slots", "64"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert [p["candidate"] for p in again] == CANDIDATES
    assert [p["token_ids"] for p in again] == [p["token_ids"] for p in printed]
    blank = tmp_path / "blank.txt"
    blank.write_text(" yes\n\n no\n", encoding="utf-8")  # the error names the file's line, not "candidate 2"
    assert main([*argv, "--candidates-file", str(blank)]) == 2
    assert f"--candidates-file: line 2 of {blank} is empty" in capsys.readouterr().err
    assert main([*argv, "--candidates-file", str(tmp_path / "missing.txt")]) == 2
    assert "--candidates-file: cannot read" in capsys.readouterr().err


def test_score_command_shows_each_candidate_as_it_is(llm):
    import io

    from rich.console import Console

    from radixflow.cli import main

    odd = [" :smile:", " \\[ x", " [bold]y[/bold]"]  # no emoji, no markup, every backslash kept
    buf = io.StringIO()
    argv = ["score", MODEL, "--context", CONTEXT, "--kv-blocks", "256", "--state-slots", "64"]
    assert main([*argv, *(f"--candidate={c}" for c in odd)], console=Console(file=buf, width=200)) == 0
    cells = [line.split("│")[2].strip() for line in buf.getvalue().splitlines() if line.count("│") > 3]
    assert sorted(cells) == sorted(c.strip() for c in odd)


def test_candidates_file_lines_end_at_newlines_only(llm, capsys, tmp_path):
    from radixflow.cli import main

    # a form feed, U+2028, NEL and a lone carriage return inside a candidate are part of it:
    # only a newline (with the carriage return before it) ends a line
    inside = [" a\x0cb", " c\u2028d", " e\x85f", " g\rh", " i\x1cj"]
    listed = tmp_path / "candidates.txt"
    listed.write_text("".join(c + "\n" for c in inside[:-1]) + inside[-1] + "\r\n", encoding="utf-8")
    argv = ["score", MODEL, "--context", CONTEXT, "--json", "--kv-blocks", "256", "--state-slots", "64"]
    assert main([*argv, "--candidates-file", str(listed)]) == 0
    assert [p["candidate"] for p in json.loads(capsys.readouterr().out)] == inside
    unfinished = tmp_path / "unfinished.txt"  # no newline after the last line
    unfinished.write_text(" yes\n no", encoding="utf-8")
    assert main([*argv, "--candidates-file", str(unfinished)]) == 0
    assert [p["candidate"] for p in json.loads(capsys.readouterr().out)] == [" yes", " no"]


def test_progress_hears_every_request_end(llm):
    heard: list[tuple[int, ...]] = []
    llm.score(CONTEXT, CANDIDATES, namespace="progress", progress=lambda *seen: heard.append(seen))
    assert heard == [(i, len(CANDIDATES)) for i in range(1, len(CANDIDATES) + 1)]


def test_score_many_scores_each_context_as_score_does(llm):
    contexts = [CONTEXT, "Q: Which river flows through Paris?\nA:", [{"role": "user", "content": "Hi"}]]
    candidates = [CANDIDATES, [" the Seine", " the Rhine"], [" hello", " goodbye there"]]
    many = llm.score_many(contexts, candidates)
    assert [len(scores) for scores in many] == [len(c) for c in candidates]
    for context, cands, scores in zip(contexts, candidates, many, strict=True):
        alone = llm.score(context, cands)
        assert [s.index for s in scores] == list(range(len(cands)))
        assert [s.token_ids for s in scores] == [s.token_ids for s in alone]
        for got, want in zip(scores, alone, strict=True):
            assert got.logprobs == pytest.approx(want.logprobs, abs=TOL) and got.ranks == want.ranks


def test_nothing_to_score_is_an_empty_list_and_the_context_is_still_checked(llm):
    # score(ctx, []) and score_many([], []) raised "none given", as generate([]) did, where a
    # caller batching a list that may be empty expects []
    ctx = llm.tokenizer.encode(CONTEXT)
    assert llm.score(ctx, []) == [] and llm.score(CONTEXT, []) == []
    assert llm.score_many([], []) == [] and llm.score_many([ctx, ctx], [[], [[5]]])[0] == []
    with pytest.raises(ValueError, match=r"^context: is empty"):
        llm.score([], [])
    with pytest.raises(ValueError, match=r"^context: token id 1000000 is outside the vocabulary"):
        llm.score([*ctx, 10**6], [])
    assert llm.engine.requests == []


def test_score_many_names_the_context_and_candidate_that_cannot_run(llm):
    ctx = llm.tokenizer.encode(CONTEXT)
    for contexts, candidates, message in (
        ([ctx], [[[5]], [[6]]], "1 context for 2 lists of candidates"),
        (ctx, [[[5]]], "contexts: a list of contexts"),
        ([ctx, []], [[[5]], [[6]]], "context 1: is empty"),  # it said "context 1: context: is empty"
        ([ctx, ctx], [[[5]], [[6], []]], "context 1, candidate 1: is empty"),  # as the engine names one
        ([ctx, ctx], [[[5]], " x"], "context 1: candidates must be a list of strings or token-id lists"),
        ([ctx, [*ctx, 10**6]], [[[5]], [[6]]], "context 1: token id 1000000 is outside"),
        ([ctx, ctx], [[[5]], [[6], [10**6]]], "context 1, candidate 1: token id 1000000 is outside"),
        # each was scored as the dict's keys, or a bare TypeError ("object of type 'generator' has no len()")
        ({"a context": [" x"]}, [[" x"]], "contexts: a list of contexts, got a dict"),
        ((c for c in ["a"]), [[" x"]], "contexts: a list of contexts, got a generator"),
        (None, None, "contexts: a list of contexts, got a NoneType"),
        (["a"], None, "candidates: a list of candidate lists (one per context), got a NoneType"),
        (["a"], {"a": [" x"]}, "candidates: a list of candidate lists (one per context), got a dict"),
    ):
        with pytest.raises(ValueError, match="^" + re.escape(message)):
            llm.score_many(contexts, candidates)


def test_score_many_raises_what_score_raises_said_of_its_context(llm):
    # score_many re-raised a context's error as a bare ValueError: `except ScoringInputError`
    # (or ChatTemplateError) and the field it names (`problem.param`, `param`) held for score alone
    from radixflow.generation.prompts import of_context

    ctx = llm.tokenizer.encode(CONTEXT)
    for context, candidates in (
        (ctx, [[5], []]),  # an empty candidate
        ([], [[5]]),  # an empty context
        ([*ctx, 10**6], [[5]]),  # a context the engine refuses
        ([{"role": "bogus", "content": "x"}], [" x"]),  # a conversation the template refuses
        (ctx, [[5], [10**6]]),  # a candidate the engine refuses
    ):
        with pytest.raises(ValueError) as alone:
            llm.score(context, candidates)
        with pytest.raises(ValueError) as many:
            llm.score_many([ctx, context], [[[5]], candidates])
        assert type(many.value) is type(alone.value)
        assert str(many.value) == of_context(1, str(alone.value))
        for field in ("problem", "param"):
            assert getattr(many.value, field, None) == getattr(alone.value, field, None)


def test_text_that_is_not_unicode_is_named_as_its_context_or_candidate(llm):
    for call, message in (
        (lambda: llm.score("a\ud800", [" x"]), "context: "),
        (lambda: llm.score("a", [" x", " \udcff"]), "candidate 1: "),
        (lambda: llm.score_many(["a", "b"], [[" x"], ["\ud800"]]), "context 1, candidate 0: "),
        (lambda: llm.scoring_problem("a\ud800", [" x"]), "context: "),
    ):
        with pytest.raises(ValueError, match="^" + message + "text contains a lone UTF-16 surrogate"):
            if (said := call()) is not None:  # scoring_problem says it
                raise ValueError(said)


def test_score_command_scores_a_jsonl_file_line_by_line(llm, capsys, tmp_path, monkeypatch):
    from radixflow.cli import main, score_file

    monkeypatch.setattr(score_file, "CONTEXTS_PER_CALL", 2)  # three lines: two calls
    lines = [
        {"id": "q1", "context": CONTEXT, "candidates": CANDIDATES[:2]},
        {"context": llm.tokenizer.encode("Q: Which river?\nA:"), "candidates": [" the Seine", [5, 9]]},
        {"id": 3, "context": [{"role": "user", "content": "Hi"}], "candidates": [" hello"]},
    ]
    given = tmp_path / "in.jsonl"
    given.write_text(json.dumps(lines[0]) + "\n\n" + "\n".join(json.dumps(x) for x in lines[1:]) + "\n")
    out = tmp_path / "out.jsonl"
    flags = ["--kv-blocks", "256", "--state-slots", "64"]
    assert main(["score", MODEL, "--input", str(given), "--output", str(out), *flags]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["line"]) for r in rows] == [("q1", 1), (None, 3), (3, 4)]
    context_ids = lines[1]["context"]
    assert [s["prompt_tokens"] for s in rows[1]["scores"]] == [
        len(context_ids) + len(s["token_ids"]) for s in rows[1]["scores"]
    ]
    scored = [s for r in rows for s in r["scores"]]
    cached, prompt = sum(s["cached_tokens"] for s in scored), sum(s["prompt_tokens"] for s in scored)
    assert 0 < cached < prompt  # each context computed once, its second candidate finds it
    assert f"3 contexts, 5 candidates scored; {cached} of {prompt} prompt tokens" in capsys.readouterr().err
    want = llm.score_many([x["context"] for x in lines], [x["candidates"] for x in lines])
    for row, line, scores in zip(rows, lines, want, strict=True):
        assert [s["candidate"] for s in row["scores"]] == line["candidates"]
        assert [s["total"] for s in row["scores"]] == pytest.approx([s.total for s in scores], abs=1e-3)
    assert main(["score", MODEL, "--input", str(given), *flags]) == 0  # to stdout
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == rows


@pytest.mark.parametrize(
    ("text", "extra", "message"),
    [
        ('{"context": "a", "candidates": [" b"]}\nnot json\n', [], "--input {path}: line 2: not valid JSON"),
        ("[1, 2]\n", [], "--input {path}: line 1: expected a JSON object (context, candidates)"),
        # in /v1/score's words for the same body
        ('{"context": "a"}\n', [], "--input {path}: line 1: missing required parameter: candidates"),
        ('{"candidates": [" b"]}\n', [], "--input {path}: line 1: give exactly one of context and messages"),
        ('{"context": "a", "candidates": [" b"], "k": 1}\n', [], "--input {path}: line 1: unknown field 'k'"),
        ("\n \n", [], "no lines to score"),
        ('{"context": "a", "candidates": [" b"]}\n', ["--context", "a"], "--input: the file gives"),
        # the lines keep the file's order: a ranking asked for was silently not done
        ('{"context": "a", "candidates": [" b"]}\n', ["--rank-by", "mean"], "drop --rank-by"),
        ('{"context": "a", "candidates": [" b"]}\n', ["--rank-by", "total"], "drop --rank-by"),
        # named as given, even when the file holds no candidate (it was ignored then) or the text is empty
        (ONE_LINE, ["--candidates-file", os.devnull], "drop --candidates-file"),
        (ONE_LINE, ["--context", ""], "drop --context"),
    ],
)
def test_a_bad_input_file_is_one_line_naming_its_line(zoo, capsys, tmp_path, text, extra, message):
    from radixflow.cli import main

    given = tmp_path / "in.jsonl"
    given.write_text(text)
    assert main(["score", MODEL, "--input", str(given), *extra]) == 2
    err = capsys.readouterr().err
    # a line is named with its file, as run-batch names it (`score --input` did not say which file)
    assert message.format(path=given) in err and "Traceback" not in err


def test_a_line_the_model_refuses_is_an_error_line_and_the_others_are_scored(
    llm, capsys, tmp_path, monkeypatch
):
    """A refused line stopped the run before its batch, losing the lines before it in that batch;
    now it is an error line in its place, the others are scored, and the exit status is 1."""
    from radixflow.cli import main, score_file

    monkeypatch.setattr(score_file, "CONTEXTS_PER_CALL", 3)
    lines = [
        {"id": "ok1", "context": "a", "candidates": [" b"]},
        {"id": "empty", "context": "a", "candidates": [" b", ""]},
        {"context": "a", "candidates": [[100000]]},
        {"id": "ok2", "context": "c", "candidates": [" d", " e"]},
        {"id": "none", "context": "", "candidates": [" d"]},
    ]
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text("".join(json.dumps(x) + "\n" for x in lines))
    flags = ["--kv-blocks", "256", "--state-slots", "64"]
    assert main(["score", MODEL, "--input", str(given), "--output", str(out), *flags]) == 1
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    ids = [("ok1", 1), ("empty", 2), (None, 3), ("ok2", 4), ("none", 5)]
    assert [(r["id"], r["line"]) for r in rows] == ids
    assert rows[1]["error"] == {"line": 2, "message": llm.scoring_problem("a", [" b", ""])}
    assert rows[1]["error"]["message"].startswith("candidate 1: ") and "scores" not in rows[1]
    assert rows[2]["error"]["message"].startswith("candidate 0: token id 100000 is outside")
    assert rows[4]["error"]["line"] == 5 and rows[4]["error"]["message"]
    want = llm.score_many(["a", "c"], [[" b"], [" d", " e"]])
    for row, scores in zip([rows[0], rows[3]], want, strict=True):
        assert [s["total"] for s in row["scores"]] == pytest.approx([s.total for s in scores], abs=1e-3)
    err = capsys.readouterr().err
    assert "radixflow: 2 contexts, 3 candidates scored, 3 lines failed; " in err and "Traceback" not in err
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(lines[0]) + "\n")
    assert main(["score", MODEL, "--input", str(good), "--output", str(out), *flags]) == 0
    assert llm.scoring_problem("a", [" b"]) is None


def test_a_run_that_fails_part_way_keeps_the_old_output_and_says_where_the_rows_are(
    zoo, capsys, tmp_path, monkeypatch
):
    from radixflow.cli import main, score_file
    from radixflow.generation import GenerationError

    monkeypatch.setattr(score_file, "CONTEXTS_PER_CALL", 2)
    score_many, calls = LLM.score_many, []

    def failing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise GenerationError("request gen-9 failed: worker call failed")
        return score_many(self, *args, **kwargs)

    monkeypatch.setattr(LLM, "score_many", failing)
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text("".join(json.dumps({"context": f"c{i}", "candidates": [" b"]}) + "\n" for i in range(4)))
    out.write_text("old\n")
    assert main(["score", MODEL, "--input", str(given), "--output", str(out)]) == 1
    partial = tmp_path / "out.jsonl.partial"
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"radixflow: error: request gen-9 failed: worker call failed; "
        f"the 2 rows written so far are in {partial}{AGAIN}"
    )
    assert out.read_text() == "old\n" and len(partial.read_text().splitlines()) == 2


def test_output_dash_is_stdout_and_a_partial_file_that_cannot_be_made_is_refused_up_front(
    zoo, capsys, tmp_path
):
    from radixflow.cli import main

    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text('{"id": 7, "context": "a", "candidates": [" b"]}\n')
    assert main(["score", MODEL, "--input", str(given), "--output", "-"]) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == [7]
    assert not (tmp_path / "-").exists()
    out.write_text("old\n")
    (tmp_path / "out.jsonl.partial").mkdir()
    assert main(["score", MODEL, "--input", str(given), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write --output" in err
    assert "out.jsonl.partial: it is a directory" in err
    assert out.read_text() == "old\n"
    (tmp_path / "out.jsonl.partial").rmdir()
    given.rename(tmp_path / "out.jsonl.partial")  # made fresh, it would remove the input
    partial = str(tmp_path / "out.jsonl.partial")
    assert main(["score", MODEL, "--input", partial, "--output", str(out)]) == 2
    assert "out.jsonl.partial: the same file as --input" in capsys.readouterr().err
    assert (tmp_path / "out.jsonl.partial").exists()


def test_output_without_input_and_no_context_are_usage_errors(zoo, capsys, tmp_path):
    from radixflow.cli import main

    assert main(["score", MODEL, "--context", "a", "--candidate", " b", "--output", str(tmp_path / "o")]) == 2
    assert "--output: only with --input" in capsys.readouterr().err
    assert main(["score", MODEL, "--candidate", " b"]) == 2
    assert "no context: give --context TEXT, or --input PATH" in capsys.readouterr().err
    assert main(["score", MODEL, "--input", str(tmp_path / "missing.jsonl")]) == 2
    assert "--input: cannot read" in capsys.readouterr().err


@pytest.mark.parametrize("namespace", [None, 5, b"ns"])
def test_a_namespace_that_is_not_a_string_is_a_value_error_before_anything_runs(llm, namespace):
    # it used to fail inside the scheduler's first round, leaving promised KV behind
    calls = (
        lambda: llm.score(CONTEXT, [" a"], namespace=namespace),
        lambda: llm.generate("a", namespace=namespace),
    )
    for call in calls:
        with pytest.raises(ValueError, match=re.escape(f"namespace must be a string, got {namespace!r}")):
            call()
    llm.engine.check_integrity()
    assert llm.engine.requests == []


def test_input_lines_end_at_newlines_only(tmp_path):
    # U+2028, U+2029 and U+0085 may stand unescaped inside a JSON string (json.dumps with
    # ensure_ascii=False writes them so): they end no JSONL line, and later lines keep their numbers
    from radixflow.cli.score_lines import read_jobs

    rows = [
        {"id": "a\u2028b", "context": "Q: x\u2029y\nA:", "candidates": [" z\x85"]},
        {"id": 2, "context": "c", "candidates": [" d"]},
    ]
    given = tmp_path / "in.jsonl"
    given.write_text("\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\r\n", encoding="utf-8")
    jobs = read_jobs(given)
    assert [(j.line, j.id, j.context, j.candidates) for j in jobs] == [
        (n, r["id"], r["context"], r["candidates"]) for n, r in enumerate(rows, 1)
    ]


@pytest.mark.parametrize("context", [{"role": "user", "content": "Hi"}, 5, None])
def test_a_context_of_another_type_is_named_by_its_line(zoo, capsys, tmp_path, context):
    # alone in its call, a lone message or a number looked to score_many like one conversation or
    # one token-id list passed as all the contexts: "--input: contexts: ... (use score() ...)"
    from radixflow.cli import main

    given = tmp_path / "in.jsonl"
    given.write_text(json.dumps({"context": context, "candidates": [" b"]}) + "\n")
    assert main(["score", MODEL, "--input", str(given)]) == 2
    # in /v1/score's words (a null context is none given)
    shape = "context must be a string, a list of token ids or a list of messages, got"
    none = "give exactly one of context and messages"
    said = f"--input {given}: line 1: {none if context is None else shape}"
    assert said in capsys.readouterr().err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_an_output_that_cannot_be_written_is_one_line(zoo, capsys, tmp_path):
    # a disk that fills mid-run: one line, as bench says it, not a traceback
    from radixflow.cli import main

    given = tmp_path / "in.jsonl"
    given.write_text('{"context": "a", "candidates": [" b"]}\n')
    assert main(["score", MODEL, "--input", str(given), "--output", "/dev/full"]) == 2
    assert "cannot write --output /dev/full: No space left on device" in capsys.readouterr().err


def test_a_byte_order_mark_is_not_part_of_line_1(tmp_path):
    # as run-batch and --candidates-file read their files (an editor on Windows writes one)
    from radixflow.cli.score_lines import read_jobs

    given = tmp_path / "in.jsonl"
    given.write_text('{"id": 1, "context": "a", "candidates": [" b"]}\n', encoding="utf-8-sig")
    assert [(j.line, j.id) for j in read_jobs(given)] == [(1, 1)]
    rows = [{"id": i, "context": "a", "candidates": [" b"]} for i in (1, 2)]
    given.write_text("\r".join(json.dumps(r) for r in rows))  # classic Mac line ends, as text mode reads them
    assert [(j.line, j.id) for j in read_jobs(given)] == [(1, 1), (2, 2)]


def test_results_to_standard_output_stay_there_while_the_bar_is_drawn(llm, capsys, tmp_path, monkeypatch):
    # `score --input F > out.jsonl` from a terminal: the bar, drawn on standard error, took over
    # standard output, and every result line went to the terminal, out.jsonl left empty
    from radixflow.cli import main

    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # standard error taken for a terminal: the bar is drawn
    given = tmp_path / "in.jsonl"
    given.write_text('{"id": 7, "context": "a", "candidates": [" b"]}\n')
    assert main(["score", MODEL, "--input", str(given), "--kv-blocks", "256", "--state-slots", "64"]) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == [7]


def test_a_line_nested_too_deeply_is_one_line_naming_it(zoo, capsys, tmp_path):
    # Python's JSON parser raised RecursionError: a traceback
    from radixflow.cli import main

    given = tmp_path / "in.jsonl"
    given.write_text('{"context": ' + "[" * 100_000 + "]" * 100_000 + ', "candidates": [" b"]}\n')
    assert main(["score", MODEL, "--input", str(given)]) == 2
    err = capsys.readouterr().err
    assert f"--input {given}: line 1: not valid JSON (nested too deeply)" in err and "Traceback" not in err


def test_a_byte_that_is_not_utf8_is_named_by_its_line(zoo, capsys, tmp_path):
    # it was "cannot read in.jsonl: 'utf-8' codec can't decode byte 0xe9 in position 55": an
    # offset in the whole file, where every other error names the line (--candidates-file's too)
    from radixflow.cli import main

    given = tmp_path / "in.jsonl"
    given.write_bytes(ONE_LINE.encode() + b'{"context": "caf\xe9", "candidates": [" b"]}\n')
    assert main(["score", MODEL, "--input", str(given)]) == 2
    err = capsys.readouterr().err
    assert err == f"radixflow: error: --input {given}: line 2: not UTF-8 text (byte 0xe9 at column 17)\n"
    listed = tmp_path / "candidates.txt"
    listed.write_bytes(b" Paris\n Lyon\n Mal\xe9\n")
    assert main(["score", MODEL, "--context", "a", "--candidates-file", str(listed)]) == 2
    said = f"radixflow: error: --candidates-file {listed}: line 3: not UTF-8 text (byte 0xe9 at column 5)\n"
    assert capsys.readouterr().err == said


# `radixflow score` held at its second `score_many` call, its first batch's rows written, until a
# signal comes: the signal then lands before the run's end whatever the machine's speed (sent
# once the first row was seen, it came after the run's end when the test's process stalled)
HELD_AT_SECOND_CALL = """
import sys, time
from radixflow.cli.app import main
from radixflow.generation import LLM
score_many, calls = LLM.score_many, []
def held(self, *args, **kwargs):
    calls.append(1)
    if len(calls) > 1:
        time.sleep(600)
    return score_many(self, *args, **kwargs)
LLM.score_many = held
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("sig", "said", "code"), [(signal.SIGINT, "interrupted", 130), (signal.SIGTERM, "terminated", 143)]
)
def test_score_input_stopped_keeps_the_old_output_and_says_where_the_rows_are(zoo, tmp_path, sig, said, code):
    """`radixflow score --input` as its own process, sent SIGINT (or SIGTERM, taken as one) once
    its first row is written: one line on stderr saying where the rows are, exit 130 (143), the
    old --output as it was, and the partial file whole lines, in order. It used to truncate the
    old output as it started, and SIGTERM ended it with no word."""
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    partial = tmp_path / "out.jsonl.partial"
    out.write_text("the previous results\n")
    rows = [
        {"context": f"Question {i}: after {i}? A:", "candidates": [f" {i + 1}", " x"]} for i in range(640)
    ]
    given.write_text("".join(json.dumps(row) + "\n" for row in rows))  # 10 batches of 64
    env = checkout_env()
    argv = [
        sys.executable,
        "-c",
        HELD_AT_SECOND_CALL,
        "score",
        MODEL,
        "--input",
        str(given),
        "--output",
        str(out),
    ]
    # a SIGINT ignored where pytest runs (a background job of a shell) would be ignored by the child too
    default_int = functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=default_int)
    try:
        deadline = time.monotonic() + 240
        while not (partial.exists() and partial.read_text().count("\n")) and proc.poll() is None:
            assert time.monotonic() < deadline, "no line written"
            time.sleep(0.05)  # polls for the first line; the signal is sent after it (held there)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert partial.exists(), err  # a run that ended before its first row: say why, not FileNotFoundError
    lines = partial.read_text().splitlines(keepends=True)
    where = f"the {len(lines)} rows written so far are in {partial}{AGAIN}"
    assert (proc.returncode, err.splitlines()[-1]) == (code, f"radixflow: {said}; {where}"), err
    assert "Traceback" not in err
    assert out.read_text() == "the previous results\n"
    assert 1 <= len(lines) <= 64 and all(line.endswith("\n") for line in lines)  # of the first batch
    assert [json.loads(line)["line"] for line in lines] == list(range(1, len(lines) + 1))


def _score_lines(n: int) -> str:
    return "".join(
        json.dumps({"id": f"q{i}", "context": f"Question {i}: is {i} odd?", "candidates": [" yes", " no"]})
        + "\n"
        for i in range(n)
    )


def _rows_without_cache_counts(text: str) -> list[dict]:
    """The output rows, each score's cached tokens left out: a run that goes on from a partial
    file has not computed the kept lines' contexts, so fewer of its prompt tokens are cached."""
    rows = [json.loads(line) for line in text.splitlines()]
    for row in rows:
        for score in row.get("scores", []):
            del score["cached_tokens"]
    return rows


def _count_engine_requests(monkeypatch) -> list[object]:
    from radixflow.engine.engine import Engine

    submitted, submit = [], Engine.submit

    def counted(self, request):
        submitted.append(request)
        return submit(self, request)

    monkeypatch.setattr(Engine, "submit", counted)
    return submitted


def test_a_run_cut_short_goes_on_from_its_partial_file_running_only_the_missing_lines(
    zoo, capsys, tmp_path, monkeypatch
):
    """Running the command again after a Ctrl-C made OUT.partial fresh, silently throwing away
    every row the interrupted run had finished; now it keeps them, runs only the lines they
    lack, says so, and writes the output an uninterrupted run writes."""
    from radixflow.cli import main, score_file

    monkeypatch.setattr(score_file, "CONTEXTS_PER_CALL", 2)
    given, out, whole = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "whole.jsonl"
    given.write_text(_score_lines(5))
    assert main(["score", MODEL, "--input", str(given), "--output", str(whole)]) == 0
    score_many, calls = LLM.score_many, []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return score_many(self, *args, **kwargs)

    monkeypatch.setattr(LLM, "score_many", interrupted)
    out.write_text("old\n")
    assert main(["score", MODEL, "--input", str(given), "--output", str(out)]) == 130
    partial = tmp_path / "out.jsonl.partial"
    assert len(partial.read_text().splitlines()) == 2 and out.read_text() == "old\n"
    monkeypatch.setattr(LLM, "score_many", score_many)
    capsys.readouterr()
    submitted = _count_engine_requests(monkeypatch)
    assert main(["score", MODEL, "--input", str(given), "--output", str(out)]) == 0
    assert f"radixflow: going on from {partial}: 2 rows kept, 3 lines to run" in capsys.readouterr().err
    assert len(submitted) == 3 * 2  # the three lines left, two candidates each
    assert _rows_without_cache_counts(out.read_text()) == _rows_without_cache_counts(whole.read_text())
    assert not partial.exists()


def test_a_torn_last_row_is_run_again_and_restart_starts_over(zoo, capsys, tmp_path, monkeypatch):
    from radixflow.cli import main

    given, out, whole = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "whole.jsonl"
    given.write_text(_score_lines(3))
    assert main(["score", MODEL, "--input", str(given), "--output", str(whole)]) == 0
    rows = whole.read_text().splitlines(keepends=True)
    _cut_short_after_one_row(monkeypatch, ["score", MODEL, "--input", str(given), "--output", str(out)])
    partial = tmp_path / "out.jsonl.partial"
    partial.write_text(rows[0] + rows[1][:20])  # killed as it wrote the second row
    capsys.readouterr()
    submitted = _count_engine_requests(monkeypatch)
    assert main(["score", MODEL, "--input", str(given), "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert "1 row kept (a last line cut short is dropped, and run again), 2 lines to run" in err
    assert len(submitted) == 2 * 2
    assert _rows_without_cache_counts(out.read_text()) == _rows_without_cache_counts(whole.read_text())
    partial.write_text(rows[0])
    submitted.clear()
    assert main(["score", MODEL, "--input", str(given), "--output", str(out), "--restart"]) == 0
    assert len(submitted) == 3 * 2 and "going on" not in capsys.readouterr().err
    assert not partial.exists()


@pytest.mark.parametrize(
    ("partial_text", "why"),
    [
        (
            '{"id": "other", "line": 1, "scores": []}\n',
            "row 1 (line 1, id 'other') is not --input's line 1 (id 'q0')",
        ),
        # a row of run-batch's, its record run-batch's: it was refused by the row, "row 1 (line
        # None, id None) is not --input's line 1", before the record that says what it is
        ('{"custom_id": "c0", "response": {}}\n', "it was written by radixflow run-batch, not score"),
        ("not json\n", "line 1: not valid JSON"),
        # the same line and id, other candidates: a row of the file before it was edited
        (
            '{"id": "q0", "line": 1, "scores": [{"candidate": " maybe"}]}\n',
            "row 1's candidates are not those of --input's line 1",
        ),
        ('{"id": "q0", "line": 1, "scores": []}\n' * 3, "it holds 3 rows, more than --input's 2 lines"),
    ],
)
def test_a_partial_file_of_another_input_is_refused_in_one_line(
    zoo, capsys, tmp_path, monkeypatch, partial_text, why
):
    from radixflow.cli import main

    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text(_score_lines(2))
    argv = ["score", MODEL, "--input", str(given), "--output", str(out)]
    _cut_short_after_one_row(monkeypatch, argv)  # a record of this run's: the rows are checked
    partial, meta = tmp_path / "out.jsonl.partial", tmp_path / "out.jsonl.partial.meta"
    partial.write_text(partial_text)
    if "run-batch" in why:  # the record of the command whose row it is
        meta.write_text(json.dumps({**json.loads(meta.read_text()), "command": "run-batch"}))
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--output {out}: cannot go on from its partial file {partial}: " in err
    assert why in err and "give --restart to start over" in err
    assert partial.read_text() == partial_text and not out.exists()


def test_a_kept_error_line_is_said_and_counted_in_the_exit_status(zoo, capsys, tmp_path, monkeypatch):
    # the run that kept a refused line's error row summed up no failure, yet ended 1
    from radixflow.cli import main

    given, out, whole = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "whole.jsonl"
    given.write_text(json.dumps({"id": "q", "context": "a", "candidates": [""]}) + "\n" + _score_lines(1))
    assert main(["score", MODEL, "--input", str(given), "--output", str(whole)]) == 1
    _cut_short_after_one_row(monkeypatch, ["score", MODEL, "--input", str(given), "--output", str(out)], 0)
    assert (tmp_path / "out.jsonl.partial").read_text() == whole.read_text().splitlines(keepends=True)[0]
    capsys.readouterr()
    assert main(["score", MODEL, "--input", str(given), "--output", str(out)]) == 1
    assert ": 1 row kept (1 failed), 1 line to run" in capsys.readouterr().err
    assert out.read_text() == whole.read_text()


def test_restart_where_no_partial_file_is_written_is_a_warning(zoo, capsys, tmp_path):
    # it did nothing without a word: the lines went to standard output, written in place
    from radixflow.cli import main

    given = tmp_path / "in.jsonl"
    given.write_text(_score_lines(1))
    assert main(["score", MODEL, "--input", str(given), "--restart"]) == 0
    err = capsys.readouterr().err
    assert "radixflow: warning: --restart: no effect: without --output PATH there is no partial file" in err
    assert main(["score", MODEL, "--input", str(given), "--output", "/dev/stdout", "--restart"]) == 0
    said = "--restart: no effect: --output /dev/stdout is written in place: there is no partial file"
    assert said in capsys.readouterr().err


def test_a_kept_row_whose_id_is_nan_is_its_lines():
    # an id of NaN (which Python's JSON reads and writes) is unequal to itself: its row was
    # refused as another input's, "row 1 (line 1, id nan) is not --input's line 1 (id nan)"
    from radixflow.cli.score_file import ScoreJob, left_to_run

    jobs = [ScoreJob(1, float("nan"), "a", [" b"]), ScoreJob(2, 2, "c", [" d"])]
    row = json.loads(json.dumps({"id": float("nan"), "line": 1, "scores": [{"candidate": " b"}]}))
    assert left_to_run(jobs, [row]) == jobs[1:]


def _cut_short_after_one_row(monkeypatch, argv: list[str], calls: int = 1) -> None:
    """Run ``argv`` (score --input --output) cut short by a Ctrl-C once its first row is written
    (after ``calls`` contexts scored: a line the model refuses makes no call): its partial file
    holds that row, and the record of what it was computed under."""
    from radixflow.cli import main, score_file

    score_many, made = LLM.score_many, []

    def interrupted(self, *args, **kwargs):
        made.append(1)
        if len(made) > calls:
            raise KeyboardInterrupt
        return score_many(self, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(score_file, "CONTEXTS_PER_CALL", 1)
        patched.setattr(LLM, "score_many", interrupted)
        assert main(argv) == 130


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (["--dtype", "bfloat16"], "it was computed with --dtype auto, not bfloat16"),
        (["--kernels", "torch"], "it was computed with --kernels auto, not torch"),
        ("edit", "it was computed from another --input (the file has changed since, or is another one)"),
        # its first line deleted: the record said so, but the rows were read first, and refused
        # as "row 1 (line 1, id 'q0') is not --input's line 1 (id 'q1')"
        ("delete", "it was computed from another --input (the file has changed since, or is another one)"),
    ],
)
def test_a_partial_file_computed_under_other_settings_is_refused_in_one_line(
    zoo, capsys, tmp_path, monkeypatch, change, why
):
    """Going on from a partial file under another model option, or from an input edited since
    (the same ids and candidates, another context), kept the rows computed the first way beside
    rows computed the second, without a word; now the partial file records what its rows were
    computed under, and such a run is refused before anything runs."""
    from radixflow.cli import main

    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text(_score_lines(3))
    argv = ["score", MODEL, "--input", str(given), "--output", str(out)]
    _cut_short_after_one_row(monkeypatch, argv)
    partial = tmp_path / "out.jsonl.partial"
    kept = partial.read_text()
    if change == "edit":
        given.write_text(_score_lines(3).replace("Question 0", "Query 0"))
    if change == "delete":
        given.write_text("".join(_score_lines(3).splitlines(keepends=True)[1:]))
    change = [] if isinstance(change, str) else change
    capsys.readouterr()
    submitted = _count_engine_requests(monkeypatch)
    assert main([*argv, *change]) == 2
    err = capsys.readouterr().err
    said = f"radixflow: error: --output {out}: cannot go on from its partial file {partial}: {why}; "
    assert err.count("\n") == 1 and err.startswith(said) and "give --restart to start over" in err
    assert submitted == [] and partial.read_text() == kept and not out.exists()
    assert main([*argv, *change, "--restart"]) == 0  # as the error says
    assert len(out.read_text().splitlines()) == len(given.read_text().splitlines()) and not partial.exists()
    assert not (tmp_path / "out.jsonl.partial.meta").exists()


def test_a_partial_file_without_its_record_is_refused(zoo, capsys, tmp_path, monkeypatch):
    # a partial file whose record is gone cannot tell what its rows were computed under
    from radixflow.cli import main

    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text(_score_lines(2))
    argv = ["score", MODEL, "--input", str(given), "--output", str(out)]
    _cut_short_after_one_row(monkeypatch, argv)
    meta = tmp_path / "out.jsonl.partial.meta"
    why = "what its rows were computed under is not recorded (out.jsonl.partial.meta is missing or unreadable"
    deep = "[" * 100_000 + "]" * 100_000  # json.loads' RecursionError, not a ValueError
    for unreadable in ('{"command": "sc', deep, None):  # cut short as it was written, garbled, or removed
        meta.unlink(missing_ok=True)
        if unreadable is not None:
            meta.write_text(unreadable)
        assert main(argv) == 2
        assert why in capsys.readouterr().err


def test_a_second_run_for_the_same_output_is_refused_in_one_line(zoo, capsys, tmp_path, monkeypatch):
    """Two runs for one --output shared OUT.partial: the second read the first's rows as kept,
    both wrote after them, and the first to end renamed the file away from the other; now the
    second is refused before anything runs, and the first's rows are untouched."""
    from radixflow.cli import main
    from radixflow.partial_lines import PartialLock

    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text(_score_lines(2))
    argv = ["score", MODEL, "--input", str(given), "--output", str(out)]
    _cut_short_after_one_row(monkeypatch, argv)
    partial, meta = tmp_path / "out.jsonl.partial", tmp_path / "out.jsonl.partial.meta"
    kept = partial.read_text()
    capsys.readouterr()
    with PartialLock(partial):  # the first run, still writing
        assert main(argv) == 2
        assert main([*argv, "--restart"]) == 2
    err = capsys.readouterr().err.splitlines()
    said = f"radixflow: error: --output {out}: another run is writing it (it holds {meta} locked)"
    assert err == [f"{said}; wait for it to end, or give another --output"] * 2
    assert partial.read_text() == kept and meta.exists() and not out.exists()
    assert main(argv) == 0 and not partial.exists() and not meta.exists()  # once it has ended
    meta.write_text(ONE_LINE)  # its record file is written and removed: not an input's
    assert main(["score", MODEL, "--input", str(meta), "--output", str(out)]) == 2
    said = f"cannot write --output {out}: its partial file's record {meta}: the same file as --input"
    assert said in capsys.readouterr().err and meta.read_text() == ONE_LINE


def test_a_run_given_restart_and_cut_short_says_to_go_on_without_it(zoo, capsys, tmp_path, monkeypatch):
    # its note said "the same command run again goes on from them": the same command, --restart
    # and all, removed the rows the note pointed to and started over
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text(_score_lines(3))
    argv = ["score", MODEL, "--input", str(given), "--output", str(out)]
    capsys.readouterr()
    _cut_short_after_one_row(monkeypatch, [*argv, "--restart"])
    partial = tmp_path / "out.jsonl.partial"
    again = "(the same command without --restart goes on from where it stopped)"
    said = f"the 1 row written so far is in {partial} {again}"
    assert capsys.readouterr().err.splitlines()[-1] == f"radixflow: interrupted; {said}"
    _cut_short_after_one_row(monkeypatch, argv)  # --restart not given: the same command, as before
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"in {partial}{AGAIN}")


def test_score_many_hands_each_context_its_scores_as_its_candidates_finish(llm):
    """`score_many` said nothing until every context was scored, so `score --input` could only
    write a batch's rows once all of them were done; ``on_context`` hears each context (its index
    and scores, as returned) once its candidates are all answered, one without any at the end."""
    ctx = llm.tokenizer.encode(CONTEXT)
    contexts = [CONTEXT, "Q: Which river flows through Paris?\nA:", ctx]
    candidates = [CANDIDATES, [" the Seine", " the Rhine"], []]
    heard: list[tuple[int, list]] = []
    many = llm.score_many(contexts, candidates, on_context=lambda i, scores: heard.append((i, scores)))
    assert heard[-1] == (2, [])
    assert sorted(heard, key=lambda h: h[0]) == list(enumerate(many))
    with pytest.raises(ValueError, match=r"^on_context: must be a function \(index, scores\), got 3"):
        llm.score_many(contexts, candidates, on_context=3)


def test_a_ctrl_c_as_the_last_candidate_ends_keeps_every_finished_contexts_row(
    zoo, capsys, tmp_path, monkeypatch
):
    """`score --input` wrote a call's rows only once the call returned: a Ctrl-C as its last
    request ended lost all its (up to 64) contexts. Now each context's row is written as its
    candidates finish, in input order: every row is kept, the same as an uninterrupted run's."""
    from radixflow.cli import main

    given, out, whole = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "whole.jsonl"
    given.write_text(_score_lines(5))
    assert main(["score", MODEL, "--input", str(given), "--output", str(whole)]) == 0
    score_many = LLM.score_many

    def stopped_at_the_end(self, *args, progress, **kwargs):
        def hear(done: int, total: int) -> None:
            progress(done, total)
            if done == total:
                raise KeyboardInterrupt

        return score_many(self, *args, progress=hear, **kwargs)

    monkeypatch.setattr(LLM, "score_many", stopped_at_the_end)
    capsys.readouterr()
    assert main(["score", MODEL, "--input", str(given), "--output", str(out)]) == 130
    partial = tmp_path / "out.jsonl.partial"
    assert partial.read_text() == whole.read_text()
    assert f"the 5 rows written so far are in {partial}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("context", "candidates", "param", "message"),
    [([], [[5]], "context", "context: is empty"), ([3], [[5], []], "candidates", "candidate 1: is empty")],
)
def test_an_empty_context_or_candidate_names_its_field_as_data(context, candidates, param, message):
    # the server guessed the field from the text (`startswith("context")`): the error carries it
    from radixflow.generation.scoring import ScoringInputError, scoring_prompts

    with pytest.raises(ScoringInputError) as refused:
        scoring_prompts(context, candidates)
    assert refused.value.problem.param == param and str(refused.value).startswith(message)


def test_a_partial_file_goes_on_under_another_spelling_of_the_same_checkpoint(
    zoo, capsys, tmp_path, monkeypatch
):
    # MODEL was compared as typed: ./ck after ck was refused as another model, and ck from
    # another directory (another checkpoint) would have been taken as the same one
    from radixflow.cli import main
    from radixflow.models.zoo import ensure_model

    (tmp_path / "ck").symlink_to(ensure_model(MODEL), target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text(_score_lines(3))
    _cut_short_after_one_row(monkeypatch, ["score", "ck", "--input", str(given), "--output", str(out)])
    capsys.readouterr()
    assert main(["score", "./ck", "--input", str(given), "--output", str(out)]) == 0, capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 3
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "ck").symlink_to(ensure_model("llama-tiny"), target_is_directory=True)
    _cut_short_after_one_row(monkeypatch, ["score", "ck", "--input", str(given), "--output", str(out) + "2"])
    monkeypatch.chdir(tmp_path / "other")
    capsys.readouterr()
    assert main(["score", "ck", "--input", str(given), "--output", str(out) + "2"]) == 2
    assert "it was computed with MODEL" in capsys.readouterr().err


def test_a_kept_refusal_this_run_would_not_give_is_run_again(zoo, capsys, tmp_path, monkeypatch):
    """A line refused for the cache's size (`--kv-blocks 8`: 'does not fit in the KV cache'), kept
    from a run cut short, stayed refused when the command went on under a cache it fits (the cache
    was said never to change a row): the output and the exit status said it failed. Now a kept
    refusal this run would not give runs again, with the rows after it."""
    from radixflow.cli import main

    given, out, whole = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "whole.jsonl"
    long = json.dumps({"id": "long", "context": "word " * 300, "candidates": [" yes"]})
    given.write_text(long + "\n" + _score_lines(2))
    assert main(["score", MODEL, "--input", str(given), "--output", str(whole)]) == 0
    argv = ["score", MODEL, "--input", str(given), "--output", str(out)]
    _cut_short_after_one_row(monkeypatch, [*argv, "--kv-blocks", "8"], 0)
    partial = tmp_path / "out.jsonl.partial"
    assert "does not fit in the KV cache" in json.loads(partial.read_text())["error"]["message"]
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"row 1 of {partial} is a refusal this run does not give" in err, err
    assert "0 rows kept, 3 lines to run" in err
    assert _rows_without_cache_counts(out.read_text()) == _rows_without_cache_counts(whole.read_text())


def test_a_conversation_context_on_a_model_without_a_chat_template_is_told_to_give_text():
    # it was told generate's way: "send a plain prompt instead of messages (LLM.generate,
    # /v1/completions)", of a context, which scoring takes as text or token ids
    from types import SimpleNamespace

    from radixflow.generation.chat import ChatTemplate, ChatTemplateError
    from radixflow.generation.prompts import PromptReader

    reader = PromptReader(lambda: SimpleNamespace(chat=ChatTemplate(None, None, None)))  # type: ignore[arg-type, return-value]
    with pytest.raises(ChatTemplateError) as e:
        reader.context([{"role": "user", "content": "hi"}])
    assert (
        str(e.value) == "this model has no chat template: give the context as text or token ids, not messages"
    )
    assert e.value.param == "context"


def test_an_empty_candidate_flag_is_refused_by_its_flag_before_the_model_loads(monkeypatch, capsys):
    # it was "candidate 1: is empty" once the model had loaded (minutes for a large one), where
    # an empty --context and an empty --candidates-file line are refused up front, by their flag
    from radixflow.cli import main

    def no_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(LLM, "from_options", no_load)
    assert main(["score", MODEL, "--context", "a", "--candidate", " b", "--candidate", ""]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "radixflow: error: --candidate: candidate 1 is empty\n"


def test_chat_on_a_model_without_a_chat_template_is_told_to_drop_the_flag(zoo, capsys, tmp_path):
    # it was the API's advice, "give the context as text or token ids, not messages", to a
    # command line that gave text and --chat
    import shutil

    from radixflow.cli import main
    from radixflow.models.zoo import ensure_model

    model = tmp_path / "no-template"
    shutil.copytree(ensure_model(MODEL), model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    assert main(["score", str(model), "--context", "a", "--chat", "--candidate", " b"]) == 2
    err = capsys.readouterr().err
    said = "--chat: this model has no chat template (drop --chat to score the context as text)"
    assert err == f"radixflow: error: {said}\n"


def test_score_hears_each_candidate_as_it_is_answered(llm):
    # a caller cut short (a failed round, a Ctrl-C) kept nothing of score(): score_many had
    # on_context, score no way to hear a candidate before the call returned
    heard = []
    scores = llm.score(CONTEXT, [" a", " b c", [5, 9]], on_candidate=heard.append)
    assert sorted(heard, key=lambda s: s.index) == scores
    with pytest.raises(ValueError, match="on_candidate: must be a function"):
        llm.score(CONTEXT, [" a"], on_candidate=[])
