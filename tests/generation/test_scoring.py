"""Scoring candidates against one shared context (`LLM.score`, `radixflow score`)."""

from __future__ import annotations

import json
import re

import pytest

from radixflow.generation import LLM, SamplingParams

MODEL = "qwen3_5-tiny"
CONTEXT = "Reranking models score each candidate document against the same query. " * 3
CANDIDATES = [" The first one.", " A second, longer candidate than the first.", " x", " The first one!"]
TOL = 1e-4


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
    shapes = "candidates must be a list of strings or a list of token-id lists"
    for context, candidates, message in (
        ([], [[5]], "context: is empty"),
        (ctx, [], "candidates: none given"),
        (ctx, [[5], []], "candidate 1: is empty"),
        (ctx, [[5], [1.5]], f"{shapes} (candidate 1 is neither)"),
        (ctx, [[5], [True]], f"{shapes} (candidate 1 is neither)"),
        (ctx, [" a", None], f"{shapes} (candidate 1 is neither)"),
        (ctx, [5], f"{shapes} (candidate 0 is neither)"),
        (ctx, " a b", f"{shapes}, got a str"),  # not each character a candidate
        (ctx, None, f"{shapes}, got a NoneType"),
        (ctx, [[5], [10**6]], "candidate 1: prompt: token id 1000000 is outside the vocabulary"),
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
    assert "candidate 0: is empty" in capsys.readouterr().err
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


def test_progress_hears_every_request_end(llm):
    heard: list[tuple[int, ...]] = []
    llm.score(CONTEXT, CANDIDATES, namespace="progress", progress=lambda *seen: heard.append(seen))
    assert heard == [(i, len(CANDIDATES)) for i in range(1, len(CANDIDATES) + 1)]


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
