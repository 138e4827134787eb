"""The offline API (generation/llm.py, tracker.py, chat.py) on a tiny hybrid zoo model."""

from __future__ import annotations

import gc
import json
import os
import re
import signal
import subprocess
import sys
import threading
import warnings
import weakref
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

import radixflow
from radixflow.generation import LLM, GenerationError, GenerationOutput, SamplingParams
from radixflow.generation.chat import ChatTemplate, ChatTemplateError
from radixflow.generation.tracker import RequestTracker, observe
from radixflow.problems import ProblemError
from radixflow.scheduler.request import Request
from radixflow.scheduler.sampling import SamplingParams as TokenSamplingParams

MODEL = "qwen3_5-tiny"
WARNS = "^radixflow: "  # a Python warning names its source; its category says it warns
PROMPTS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "The quick brown fox jumps over the lazy dog. " * 3 + "Then it ran away.",
    "Water boils at 100 degrees Celsius at sea level.",
    [5, 6, 7, 8, 9, 10, 11, 12],
]
GREEDY = SamplingParams(max_tokens=12, logprobs=2, ignore_eos=True)
SCORE = SamplingParams(max_tokens=0, prompt_logprobs=0)


@pytest.fixture(scope="module")
def llm(zoo) -> LLM:
    return LLM(MODEL, kv_blocks=256, state_slots=64)


@pytest.fixture(scope="module")
def batch(llm) -> list[GenerationOutput]:
    return llm.generate(PROMPTS, GREEDY)


def test_batched_generation_equals_one_prompt_at_a_time_under_both_policies(zoo, llm, batch):
    native = LLM(MODEL, policy="native", kv_blocks=256, state_slots=64)
    for prompt, out in zip(PROMPTS, batch, strict=True):
        assert len(out.token_ids) == 12 and out.finish_reason == "length"
        (alone,) = native.generate(prompt, GREEDY)
        assert alone.token_ids == out.token_ids and alone.text == out.text
    # prompt 1 extends prompt 0: it waited a round for prompt 0's checkpoint, then reused it
    assert batch[0].cached_tokens == 0 and batch[1].cached_tokens >= 16
    (again,) = llm.generate(PROMPTS[2], GREEDY)
    assert again.cached_tokens >= 16 and again.token_ids == batch[2].token_ids  # the cache changes nothing
    llm.engine.check_integrity()
    assert llm.engine.requests == []  # answered requests are forgotten


def test_text_and_logprobs_agree_with_the_tokens(llm, batch):
    tok = llm.tokenizer
    for prompt, out in zip(PROMPTS, batch, strict=True):
        ids = tok.encode(prompt) if isinstance(prompt, str) else prompt
        assert out.prompt_token_ids == tuple(ids)
        assert out.text == tok.decode(out.token_ids, skip_special_tokens=True)
        assert out.logprobs is not None and [e.token for e in out.logprobs] == list(out.token_ids)
        assert "".join(e.text for e in out.logprobs) == out.text
        for entry in out.logprobs:
            assert len(entry.top) >= 2 and entry.logprob <= 0
            assert entry.top[0][1] >= entry.top[1][1]


@pytest.mark.parametrize("k", [0, 1, 2, 7])
def test_logprobs_k_reports_the_top_k_alternatives(llm, k):
    (out,) = llm.generate(PROMPTS[2], replace(GREEDY, max_tokens=3, logprobs=k))
    assert out.logprobs is not None and [len(e.top) for e in out.logprobs] == [k] * 3
    (wide,) = llm.generate(PROMPTS[2], replace(GREEDY, max_tokens=3, logprobs=20))
    assert wide.logprobs is not None
    # the same alternatives; their logprobs to float32 rounding (the second call's rows run in
    # other rounds, over what the first one cached: the README's "same tokens, logprobs to
    # float32 rounding"; bit-equal under one worker's order, 1e-7 off under another's)
    for narrow, full in zip(out.logprobs, wide.logprobs, strict=True):
        assert [t for t, _ in narrow.top] == [t for t, _ in full.top[:k]]
        assert [lp for _, lp in narrow.top] == pytest.approx([lp for _, lp in full.top[:k]], abs=1e-5)


def test_stop_string_cuts_the_text_and_ends_the_request(llm, batch):
    base = batch[2]
    assert len(base.text) > 4
    stop = base.text[len(base.text) // 2 : len(base.text) // 2 + 2]
    cut = base.text.find(stop)
    (out,) = llm.generate(PROMPTS[2], replace(GREEDY, stop=(stop, "never-generated")))
    assert out.text == base.text[:cut] and out.finish_reason == "stop" and out.stop_string == stop
    assert out.token_ids == base.token_ids[: len(out.token_ids)] and len(out.token_ids) < 12
    assert out.logprobs is not None and "".join(e.text for e in out.logprobs) == out.text
    (kept,) = llm.generate(PROMPTS[2], replace(GREEDY, stop=(stop,), include_stop_str_in_output=True))
    assert kept.text == base.text[: cut + len(stop)] and kept.token_ids == out.token_ids
    assert kept.logprobs is not None and "".join(e.text for e in kept.logprobs) == kept.text
    llm.engine.check_integrity()


@pytest.mark.parametrize("include", [False, True])
def test_a_stop_tokens_text_is_left_out_of_the_text_as_vllm_leaves_it_out(llm, batch, include):
    # its text ended the output (a "." or a line break as a stop token showed in `text`), where vLLM
    # leaves it out unless include_stop_str_in_output; its id stays in token_ids either way
    base = batch[2]
    assert base.logprobs is not None
    at = next(i for i, e in enumerate(base.logprobs) if i >= 2 and e.text.strip())
    stop = base.token_ids[at]
    params = replace(GREEDY, ignore_eos=False, stop_token_ids=(stop,), include_stop_str_in_output=include)
    req = Request(f"stop-token-{include}", tuple(llm.tokenizer.encode(PROMPTS[2])), sampling=params)
    tracker = RequestTracker(req, llm.tokenizer)
    llm.engine.submit(req)
    shown = ""
    while not tracker.done:
        llm.engine.step()
        observe(llm.engine, tracker)
        delta = tracker.delta()
        shown += delta.text if delta is not None else ""
    llm.engine.forget(req.id)
    (out,) = llm.generate(PROMPTS[2], params)
    first = base.token_ids.index(stop)  # the stop token's first appearance ends the output
    assert out.token_ids == base.token_ids[: first + 1] and out.finish_reason == "stop"
    kept = out.token_ids if include else out.token_ids[:-1]
    assert out.text == llm.tokenizer.decode(list(kept), skip_special_tokens=True) and shown == out.text
    assert out.logprobs is not None and "".join(e.text for e in out.logprobs) == out.text
    assert tracker.output().text == out.text


@pytest.mark.parametrize("include", [False, True])
def test_the_eos_tokens_text_is_left_out_when_special_tokens_are_kept(llm, include):
    # with skip_special_tokens=False the end-of-sequence token that ended the request showed its
    # text ("<|im_end|>") in `text`; vLLM leaves it out, as a stop token's, unless
    # include_stop_str_in_output
    (eos, *_) = llm.engine.runner.model.eos_token_ids
    params = SamplingParams(
        max_tokens=3, allowed_token_ids=(eos,), skip_special_tokens=False, include_stop_str_in_output=include
    )
    (out,) = llm.generate(PROMPTS[2], params)
    assert out.token_ids == (eos,) and out.finish_reason == "stop"
    assert out.text == (llm.tokenizer.decode([eos], skip_special_tokens=False) if include else "")
    assert out.logprobs is None
    # an EOS token that did not end it (ignore_eos) is text like any other
    (on,) = llm.generate(PROMPTS[2], replace(params, ignore_eos=True, include_stop_str_in_output=False))
    assert on.token_ids == (eos,) * 3
    assert on.text == llm.tokenizer.decode([eos] * 3, skip_special_tokens=False)


def test_guided_choice_generates_one_of_the_strings_the_model_likes_best(llm):
    prompt = llm.tokenizer.encode(PROMPTS[1])
    letters = ("x", "y", "z", "q")
    assert all(len(llm.tokenizer.encode(c, add_special_tokens=False)) == 1 for c in letters)
    (out,) = llm.generate([prompt], SamplingParams(max_tokens=4, guided_choice=letters))
    # greedy among one-token choices: the one whose logprob after the prompt is the highest
    scores = {}
    for c in letters:
        (scored,) = llm.generate([prompt + llm.tokenizer.encode(c, add_special_tokens=False)], SCORE)
        scores[c] = scored.prompt_logprobs[-1].logprob  # type: ignore[index, union-attr]
    assert out.text == max(scores, key=scores.__getitem__) and out.finish_reason == "stop"
    phrases = ("the lazy dog", "a quick fox", "the lazy cat", "away")
    sampled = SamplingParams(max_tokens=16, temperature=1.5, seed=2, n=12, guided_choice=phrases)
    outs = llm.generate([prompt], sampled)
    assert all(o.text in phrases and o.finish_reason == "stop" for o in outs)
    assert len({o.text for o in outs}) > 1  # drawn, not always the same
    assert all(list(o.token_ids) == llm.tokenizer.encode(o.text, add_special_tokens=False) for o in outs)
    with pytest.raises(ValueError, match=r"guided_choice: item 1 is empty \(''\)"):
        llm.generate([prompt], SamplingParams(guided_choice=("a", "")))
    with pytest.raises(ValueError, match="allowed_token_ids: cannot be combined with guided_choice"):
        llm.generate([prompt], SamplingParams(guided_choice=("a",), allowed_token_ids=(3,)))
    llm.engine.check_integrity()


def test_bad_words_are_never_generated_as_the_tokenizer_splits_them(llm, batch):
    base = batch[2]
    encode = partial(llm.tokenizer.encode, add_special_tokens=False)
    word = llm.tokenizer.decode(list(base.token_ids[2:4])).strip()  # text the model generates here
    assert word
    (out,) = llm.generate(PROMPTS[2], replace(GREEDY, bad_words=(word,)))
    params = SamplingParams(bad_words=(word,)).tokenized(encode)
    both = (tuple(encode(word)), tuple(encode(" " + word)))  # at the start, and after a space
    assert params.bad_token_sequences == tuple(dict.fromkeys(both))
    for seq in params.bad_token_sequences:  # no banned sequence anywhere in the output
        n = len(seq)
        assert all(tuple(out.token_ids[i : i + n]) != seq for i in range(len(out.token_ids) - n + 1))
    assert out.token_ids != base.token_ids
    with pytest.raises(ValueError, match=r"bad_words: item 0 is only whitespace"):
        llm.generate(PROMPTS[2], SamplingParams(bad_words=(" ",)))


def test_a_bad_word_closes_the_guided_choices_it_is_in(llm):
    pair = SamplingParams(max_tokens=8, guided_choice=("cat", "dog"))
    (liked,) = llm.generate(PROMPTS[2], pair)
    (other,) = llm.generate(PROMPTS[2], replace(pair, bad_words=(liked.text,)))
    assert {liked.text, other.text} == {"cat", "dog"} and other.finish_reason == "stop"
    with pytest.raises(ValueError, match="bad_words: ban every guided_choice"):
        llm.generate(PROMPTS[2], replace(pair, bad_words=("cat", "dog")))


def test_a_min_tokens_past_the_room_a_fitted_max_tokens_leaves_is_refused_not_lowered(llm):
    # fit caps a default max_tokens to the room the prompt leaves; min_tokens went down with it,
    # so a caller's least was silently not met
    total = 1 + llm.engine.room(1)  # the longest prompt plus output this engine holds
    prompt = [7] * (total - 3)
    assert llm.engine.room(len(prompt)) == 3
    with pytest.raises(
        ValueError, match=r"^min_tokens: must be at most 3, the tokens this prompt leaves room"
    ):
        llm.generate(prompt, SamplingParams(max_tokens=16, min_tokens=5), fit=True)
    (out,) = llm.generate(prompt, SamplingParams(max_tokens=16, min_tokens=3, ignore_eos=True), fit=True)
    assert len(out.token_ids) == 3
    (scored,) = llm.generate(prompt[:8], SamplingParams(max_tokens=0, prompt_logprobs=0), fit=True)
    assert scored.token_ids == () and len(scored.prompt_logprobs) == 8  # fitting raised 0 to 1


@pytest.mark.parametrize("given", ["no", 0.0, None])
def test_fit_that_is_no_bool_is_refused_by_name_not_read_as_its_truth(llm, given):
    # fit="no" capped max_tokens as fit=True does (a truthy string), and fit=None did not: a
    # keyword of another type, as SamplingParams' fields, is refused naming it
    import numpy as np

    with pytest.raises(ValueError, match=rf"^fit: must be true or false, got {re.escape(repr(given))}$"):
        llm.generate("a", SamplingParams(max_tokens=2), fit=given)
    assert len(llm.generate("a", SamplingParams(max_tokens=2), fit=np.True_)) == 1  # numpy's bool is one


def test_min_tokens_follows_only_the_guided_choices_that_long(llm):
    # ("cat", "the lazy dog") with min_tokens 3 answered "cat" (2 tokens), finish reason stop:
    # min_tokens broken unsaid. A choice shorter than it ends the output as an EOS would
    encode = partial(llm.tokenizer.encode, add_special_tokens=False)
    short, long = "cat", "the lazy dog"
    assert len(encode(short)) < 3 <= len(encode(long))
    pair = SamplingParams(max_tokens=12, guided_choice=(short, long))
    (free,) = llm.generate(PROMPTS[2], pair)
    (held,) = llm.generate(PROMPTS[2], replace(pair, min_tokens=3))
    assert free.text == short  # what the model likes here: the test would show nothing otherwise
    assert held.text == long and held.finish_reason == "stop" and len(held.token_ids) >= 3
    with pytest.raises(ValueError, match=r"^min_tokens: 3 cannot be met: every one of the guided_choice "):
        llm.generate(PROMPTS[2], replace(pair, guided_choice=(short,), min_tokens=3))


def test_bad_words_that_ban_every_allowed_token_are_refused(llm):
    # allowed_token_ids [t] with bad_words [text of t] generated t on every step: a bad word
    # generated, as the ban left nothing to pick; with min_tokens, nothing but an EOS
    encode = partial(llm.tokenizer.encode, add_special_tokens=False)
    word = next(w for w in "abcdefgh" if len(encode(w)) == len(encode(" " + w)) == 1)
    (token,) = encode(word)
    eos = llm.engine.runner.model.eos_token_ids[0]
    with pytest.raises(ValueError, match=r"^bad_words: ban every one of the allowed_token_ids$"):
        llm.generate(PROMPTS[2], SamplingParams(max_tokens=4, allowed_token_ids=[token], bad_words=[word]))
    held = SamplingParams(max_tokens=4, min_tokens=2, allowed_token_ids=[token, eos], bad_words=[word])
    with pytest.raises(ValueError, match=r"^allowed_token_ids: every allowed token that is not banned ends"):
        llm.generate(PROMPTS[2], held)
    (out,) = llm.generate(PROMPTS[2], replace(held, min_tokens=0))  # the EOS ends it at once
    assert out.token_ids == (eos,) and out.finish_reason == "stop"


def test_a_truncated_prompt_runs_as_its_last_tokens(llm):
    prompt = llm.tokenizer.encode(PROMPTS[1])
    (cut,) = llm.generate([prompt], replace(GREEDY, truncate_prompt_tokens=7))
    (alone,) = llm.generate([prompt[-7:]], GREEDY)
    assert cut.prompt_token_ids == tuple(prompt[-7:]) and cut.token_ids == alone.token_ids
    context = llm.engine.runner.model.max_context
    past = f"truncate_prompt_tokens: {context + 1} is more than the model context of {context}"
    with pytest.raises(ValueError, match=past):  # as vLLM refuses it
        llm.generate([prompt], replace(GREEDY, truncate_prompt_tokens=context + 1))


def test_a_text_longer_than_the_context_runs_its_last_tokens_when_truncated(llm):
    # as token ids it ran, and the server runs it ("as offline"); as text it was refused untokenized
    context = llm.engine.runner.model.max_context
    long = "hello " * (3 * context)  # long enough for its length alone to prove it too long
    ids = llm.tokenizer.encode(long)
    assert len(ids) > context
    (text,) = llm.generate(long, replace(GREEDY, truncate_prompt_tokens=7))
    assert text.prompt_token_ids == tuple(ids[-7:])
    chat = llm.tokenizer.encode(llm.tokenizer.chat.render([{"role": "user", "content": long}]), False)
    (reply,) = llm.chat([{"role": "user", "content": long}], replace(GREEDY, truncate_prompt_tokens=7))
    assert reply.prompt_token_ids == tuple(chat[-7:])
    refused = rf"^prompt: has at least \d+ tokens; the model context is {context}$"
    with pytest.raises(ValueError, match=refused):
        llm.generate(long, GREEDY)  # no truncation: still refused before it is tokenized


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("where", ["completes", "never_completes"])
def test_stream_deltas_never_show_text_a_stop_string_later_cuts(llm, batch, where, include):
    base = batch[0]
    middle = len(base.text) // 2
    # a stop string that appears mid-text, or one whose start is generated but never its end
    stop = base.text[middle : middle + 3] if where == "completes" else base.text[-3:] + "#"
    req = Request(
        f"stream-{where}",
        tuple(llm.tokenizer.encode(PROMPTS[0])),
        sampling=replace(GREEDY, stop=(stop,), include_stop_str_in_output=include),
    )
    end = base.text.find(stop) + (len(stop) if include else 0) if where == "completes" else None
    tracker = RequestTracker(req, llm.tokenizer)
    llm.engine.submit(req)
    shown = ""
    while not tracker.done:
        llm.engine.step()
        observe(llm.engine, tracker)
        delta = tracker.delta()
        shown += delta.text if delta is not None else ""
        assert base.text[:end].startswith(shown)
    llm.engine.forget(req.id)
    out = tracker.output()
    assert shown == out.text
    assert out.text == base.text[:end]


def test_n_choices_share_their_prompt_and_each_equals_a_lone_request_with_its_seed(llm):
    prompts = ["Choices share this prompt, which is long enough to fill two blocks. " * 2, PROMPTS[3]]
    sampled = SamplingParams(max_tokens=8, temperature=1.0, seed=11, ignore_eos=True, n=3)
    outs = llm.generate(prompts, sampled)
    assert [o.choice for o in outs] == [0, 1, 2] * 2
    ids = [tuple(llm.tokenizer.encode(prompts[0])), tuple(prompts[1])]
    assert [o.prompt_token_ids for o in outs] == [ids[0]] * 3 + [ids[1]] * 3
    # the first choice computes the fresh prompt; the others take it from the cache
    assert outs[0].cached_tokens == 0 and all(o.cached_tokens >= 16 for o in outs[1:3])
    assert len({o.token_ids for o in outs[:3]}) > 1  # each choice draws its own stream
    for out, params in zip(outs, sampled.choices() * 2, strict=True):
        (alone,) = llm.generate(prompts[0] if out.prompt_token_ids == ids[0] else prompts[1], params)
        assert alone.token_ids == out.token_ids and alone.text == out.text
    greedy = llm.generate(prompts[0], SamplingParams(max_tokens=6, n=2))
    assert greedy[0].token_ids == greedy[1].token_ids  # greedy choices are the same choice
    with pytest.raises(ValueError, match="prompt 1: n: must be an integer between 1 and 128, got 0"):
        llm.generate(prompts, [sampled, replace(sampled, n=0)])
    llm.engine.check_integrity()
    assert llm.engine.requests == []


def test_min_tokens_hold_back_eos_stop_tokens_and_stop_strings(llm):
    eos = llm.engine.runner.model.eos_token_ids[0]
    forced = SamplingParams(max_tokens=8, logit_bias={eos: 100})  # EOS is always the best token
    (at_once,) = llm.generate(PROMPTS[2], forced)
    (held,) = llm.generate(PROMPTS[2], replace(forced, min_tokens=4))
    assert at_once.token_ids == (eos,) and held.token_ids[-1] == eos and len(held.token_ids) == 5
    assert eos not in held.token_ids[:4] and held.finish_reason == "stop"
    text = llm.tokenizer.decode([42])
    every = SamplingParams(max_tokens=6, logit_bias={42: 100}, stop=text)  # its text every step
    (cut,) = llm.generate(PROMPTS[2], every)
    (later,) = llm.generate(PROMPTS[2], replace(every, min_tokens=3))
    assert cut.text == "" and cut.token_ids == (42,)
    # the stop string counts from token 4 on, as the stop token below does
    assert later.text == text * 3 and later.token_ids == (42,) * 4 and later.finish_reason == "stop"
    (longer,) = llm.generate(PROMPTS[2], replace(every, min_tokens=3, stop=(text, "a stop never seen")))
    assert longer.text == later.text and longer.token_ids == later.token_ids  # as with one stop string
    (token,) = llm.generate(PROMPTS[2], replace(every, stop=(), stop_token_ids=(42,), min_tokens=3))
    assert len(token.token_ids) == 4 and token.token_ids[-1] == 42 and 42 not in token.token_ids[:3]
    with pytest.raises(ValueError, match=r"min_tokens: must be an integer between 0 and max_tokens \(6\)"):
        llm.generate(PROMPTS[2], replace(every, min_tokens=7))


def test_a_request_that_cannot_run_is_refused_before_anything_runs(llm):
    with pytest.raises(ValueError, match="prompt 1: token id 100000 is outside the vocabulary"):
        llm.generate(["fine", [1, 100000]], GREEDY)
    with pytest.raises(ValueError, match="prompt: is empty"):
        llm.generate("", GREEDY)
    with pytest.raises(ValueError, match="stop strings must not be empty"):
        llm.generate("fine", SamplingParams(stop=("",)))
    llm.engine.check_integrity()
    assert llm.engine.requests == [] and not llm.engine.has_work()


def test_an_empty_batch_is_an_empty_list_as_in_vllm(llm):
    # generate([]) and chat([]) raised "no prompts given", where vLLM returns []: a caller batching
    # a list that may be empty had to guard every call
    assert llm.generate([]) == [] and llm.generate([], GREEDY) == [] and llm.generate([], []) == []
    assert llm.chat([]) == []
    heard = []
    assert llm.generate([], progress=lambda done, total: heard.append(done)) == [] and heard == []
    # the parameters are still checked: a mistake is not hidden by an empty batch
    with pytest.raises(ValueError, match=r"^top_p: must be in \(0, 1\], got 5"):
        llm.generate([], SamplingParams(top_p=5))
    with pytest.raises(ValueError, match=r"^1 SamplingParams for 0 prompts"):
        llm.generate([], [GREEDY])
    with pytest.raises(ValueError, match=r"^namespace must be a string"):
        llm.generate([], namespace=None)  # type: ignore[arg-type]
    assert llm.engine.requests == [] and not llm.engine.has_work()


def test_a_failed_round_is_a_generation_error_and_leaves_nothing_behind(llm, monkeypatch):
    def lost(batch):
        raise RuntimeError("device lost")

    monkeypatch.setattr(llm.engine.runner, "run", lost)
    why = r"request gen-\d+\) failed: worker call failed: RuntimeError: device lost$"
    # it named only the request id, a count across calls: which of the prompts failed was not said
    with pytest.raises(GenerationError, match=rf"^prompt 0 \({why}"):
        llm.generate(["one", "two"], GREEDY)
    with pytest.raises(GenerationError, match=rf"^prompt 0, choice 0 \({why}"):
        llm.generate(["one", "two"], replace(GREEDY, n=2))
    with pytest.raises(GenerationError, match=rf"^candidate 0 \({why}"):
        llm.score("a context", [" one", " two"])
    with pytest.raises(GenerationError, match=r"^request gen-\d+ failed: worker call failed"):
        llm.generate("one", GREEDY)  # a lone prompt is not named, as its refusals are not
    with pytest.raises(GenerationError, match=rf"^choice 0 \({why}"):
        llm.generate("one", replace(GREEDY, n=2))
    llm.engine.check_integrity()
    assert llm.engine.requests == [] and not llm.engine.has_work()


def test_max_tokens_zero_generates_nothing(llm):
    (out,) = llm.generate("Water boils", SamplingParams(max_tokens=0))
    assert out.token_ids == () and out.text == "" and out.finish_reason == "length"


def test_chat_renders_the_template_as_transformers_does(llm):
    from transformers import PreTrainedTokenizerFast

    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Bye?"},
    ]
    ours = llm.tokenizer.chat.render(messages)
    hf = PreTrainedTokenizerFast.from_pretrained(str(llm.model.path))
    plain = [
        {**m, "content": m["content"] if isinstance(m["content"], str) else "Hi \nthere"} for m in messages
    ]
    assert ours == hf.apply_chat_template(plain, tokenize=False, add_generation_prompt=True)
    (reply,) = llm.chat(messages, SamplingParams(max_tokens=3, ignore_eos=True))
    assert reply.prompt_token_ids == tuple(llm.tokenizer.encode(ours, add_special_tokens=False))
    assert len(reply.token_ids) == 3


def test_chat_with_max_tokens_0_scores_the_conversation_where_the_chat_route_refuses_it(llm):
    # docs/usage.md: the offline chat takes max_tokens=0 (prompt_logprobs alone); the chat route,
    # as OpenAI's, takes at least 1 (tests/server/test_errors.py pins its refusal)
    (out,) = llm.chat([{"role": "user", "content": "Hi"}], SCORE)
    assert out.token_ids == () and out.text == ""
    assert len(out.prompt_logprobs) == len(out.prompt_token_ids) > 1


def test_chat_template_errors_are_one_line():
    # "use completions" was the server's word for it, said by LLM.chat and `generate --chat` too
    with pytest.raises(ChatTemplateError, match=r"^this model has no chat template: send a plain prompt"):
        ChatTemplate(None, None, None).render([{"role": "user", "content": "x"}])
    template = ChatTemplate("{{ raise_exception('roles must alternate') }}", None, None)
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        template.render([{"role": "user", "content": "x"}])
    with pytest.raises(ChatTemplateError, match=r"^messages\[0\]\.role: must be a string, got nothing"):
        ChatTemplate("{{ messages }}", None, None).render([{"content": "x"}])
    with pytest.raises(ChatTemplateError, match="only text content parts"):
        ChatTemplate("{{ messages }}", None, None).render([{"role": "user", "content": [{"type": "image"}]}])


def test_a_conversation_the_template_refuses_is_named_among_several(llm):
    # "messages[0].role: unknown role 'wizard'" did not say which of a batch's conversations held it
    fine = [{"role": "user", "content": "hi"}]
    with pytest.raises(ChatTemplateError, match=r"^prompt 2: messages\[0\]\.role: unknown role 'wizard'"):
        llm.chat([fine, fine, [{"role": "wizard", "content": "hi"}]])
    with pytest.raises(ChatTemplateError, match=r"^prompt 1: messages must not be empty$"):
        llm.chat([fine, []])
    with pytest.raises(ChatTemplateError, match=r"^messages\[0\]\.role: unknown role"):  # one: as it was
        llm.chat([{"role": "wizard", "content": "hi"}])


@pytest.mark.parametrize(
    ("conversations", "given"),
    [
        ({"role": "user", "content": "hi"}, "a dict"),  # one message: its keys were two conversations
        ("hi", "a str"),  # its characters were two conversations
        (None, "a NoneType"),  # TypeError: 'NoneType' object is not iterable
    ],
)
def test_conversations_of_another_shape_are_one_line_naming_what_was_given(llm, conversations, given):
    # each said "prompt 0: message 0 needs a string 'role'" of a prompt 0 the caller never gave
    with pytest.raises(ValueError, match=r"^conversations: a list of messages or a list of such lists") as e:
        llm.chat(conversations)
    assert str(e.value).endswith(f"got {given}")
    assert llm.engine.requests == []


@pytest.mark.parametrize(
    ("conversations", "given"),
    [
        (["hello"], "a str as item 0"),  # said 'messages[0]: must be an object, got "h"'
        ([[{"role": "user", "content": "hi"}], "yo"], "a str as item 1"),
        ([[{"role": "user", "content": "hi"}], {"role": "user", "content": "yo"}], "a dict as item 1"),
        ([[{"role": "user", "content": "hi"}], None], "a NoneType as item 1"),
    ],
)
def test_a_conversation_of_another_shape_in_a_list_is_named_not_read_by_character(llm, conversations, given):
    # a text (or one message) in the list was iterated as a conversation: its characters (keys)
    # were the messages the error blamed
    with pytest.raises(ValueError, match=r"^conversations: a list of messages or a list of such lists") as e:
        llm.chat(conversations)
    assert str(e.value).endswith(f"got {given}")
    assert llm.engine.requests == []


def test_a_conversation_given_as_a_generator_of_messages_is_read_as_its_list(llm):
    conversation = [{"role": "user", "content": "hi"}]
    once = SamplingParams(max_tokens=1)
    (listed,) = llm.chat([conversation], once)
    (generated,) = llm.chat([(m for m in conversation)], once)
    assert generated.prompt_token_ids == listed.prompt_token_ids


def test_unknown_model_and_bad_options_are_one_line_errors(zoo):
    with pytest.raises(ProblemError, match="unknown torch model 'gpt-17'"):
        LLM("gpt-17")
    with pytest.raises(ProblemError, match="policy: unknown policy 'fastest'"):
        LLM(MODEL, policy="fastest")
    # it said "model: 'qwen3_5-2b' on the sim runner has no weights", of a model never named
    with pytest.raises(ProblemError, match=r"^model: must be given \(a zoo name, see `radixflow models`"):
        LLM(None)  # type: ignore[arg-type]
    # it said "dtype: must be given, got nothing" of the None passed
    with pytest.raises(ProblemError, match=r"^dtype: must be a string, got None$"):
        LLM(MODEL, dtype=None)  # type: ignore[arg-type]


def test_options_that_cannot_change_the_engine_are_warned_about_as_the_command_line_does(zoo):
    # `generate --tflops 3` warns that it sets the sim cost model; LLM(model, tflops=3) took it silently
    with pytest.warns(
        UserWarning, match=WARNS + r"per_request_ms, tflops have no effect with the torch runner"
    ):
        LLM(MODEL, kv_blocks=64, state_slots=8, tflops=3.0, per_request_ms=1.0)
    with pytest.warns(UserWarning, match=WARNS + r"state_slots has no effect on a full-attention model"):
        LLM("qwen3-tiny", kv_blocks=64, state_slots=8)
    with pytest.warns(
        UserWarning, match=WARNS + r"placement has no effect with state_slots 0: no checkpoint"
    ):
        LLM(MODEL, kv_blocks=64, state_slots=0, placement="lone")


def test_the_cpu_clock_with_spinning_threads_is_warned_about_as_the_command_line_does(zoo, monkeypatch):
    # `generate --clock cpu --torch-threads 2` and a TOML cell warn that the CPU clock then counts
    # OpenMP's spin-waits; LLM(model, clock="cpu", torch_threads=2) took it silently
    import torch

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    threads = torch.get_num_threads()
    try:
        with pytest.warns(UserWarning, match=WARNS + r"clock cpu with 2 torch threads .*torch_threads=1$"):
            LLM(MODEL, kv_blocks=64, state_slots=8, clock="cpu", torch_threads=2).close()
    finally:
        torch.set_num_threads(threads)  # the process's one pool: LLM(torch_threads=...) leaves it set


def test_a_dtype_below_float32_is_warned_about_as_the_command_line_does(zoo):
    # `generate --dtype bfloat16` warns that outputs are no longer a no-cache run's; LLM(model,
    # dtype="bfloat16") took it silently
    with pytest.warns(
        UserWarning, match=WARNS + r'dtype bfloat16 \(below float32\).*use dtype="float32" for exact'
    ):
        LLM(MODEL, kv_blocks=64, state_slots=8, dtype="bfloat16").close()


def test_an_option_given_as_none_is_not_given_and_draws_no_warning(zoo):
    # None is an optional option's "not given" (its default), as a flag left out: a wrapper passing
    # its own defaults on, LLM(m, state_slots=None, tflops=None), was warned that they do nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LLM("qwen3-tiny", kv_blocks=64, state_slots=None, placement=None, tflops=None, fixed_cost_ms=None)


def test_generate_command_prints_what_the_offline_api_returns(llm, capsys):
    from radixflow.cli import main

    argv = ["generate", MODEL, "--prompt", PROMPTS[2], "--max-tokens", "12", "--ignore-eos", "--json"]
    argv += ["--kv-blocks", "256", "--state-slots", "64"]
    assert main(argv) == 0
    (printed,) = json.loads(capsys.readouterr().out)
    (out,) = llm.generate(PROMPTS[2], SamplingParams(max_tokens=12, ignore_eos=True))
    assert printed["token_ids"] == list(out.token_ids) and printed["text"] == out.text
    assert main([*argv, "--n", "2", "--temperature", "1", "--seed", "4"]) == 0
    printed = json.loads(capsys.readouterr().out)
    sampled = SamplingParams(max_tokens=12, ignore_eos=True, temperature=1.0, seed=4, n=2)
    offline = llm.generate(PROMPTS[2], sampled)
    expected = [(o.choice, list(o.token_ids)) for o in offline]
    assert [(p["choice"], p["token_ids"]) for p in printed] == expected
    flags = ["--logit-bias", "7=4.5", "--repetition-penalty", "1.4", "--presence-penalty", "0.5"]
    assert main([*argv, *flags]) == 0
    (printed,) = json.loads(capsys.readouterr().out)
    adjusted = SamplingParams(
        max_tokens=12, ignore_eos=True, logit_bias={7: 4.5}, repetition_penalty=1.4, presence_penalty=0.5
    )
    (out,) = llm.generate(PROMPTS[2], adjusted)
    assert printed["token_ids"] == list(out.token_ids)
    assert main([*argv, "--prompt-logprobs", "2"]) == 0
    (printed,) = json.loads(capsys.readouterr().out)
    (out,) = llm.generate(PROMPTS[2], SamplingParams(max_tokens=12, ignore_eos=True, prompt_logprobs=2))
    assert out.prompt_logprobs is not None and printed["prompt_logprobs"][0] is None
    want = [(e.token, e.rank, [t for t, _ in e.top]) for e in out.prompt_logprobs[1:]]  # type: ignore[union-attr]
    assert [(e["token"], e["rank"], [t for t, _ in e["top"]]) for e in printed["prompt_logprobs"][1:]] == want
    argv = argv[: argv.index("--json")] + argv[argv.index("--json") + 1 :]
    assert main([*argv, "--prompt-logprobs", "0"]) == 0
    total = sum(e.logprob for e in out.prompt_logprobs[1:])  # type: ignore[union-attr]
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("prompt logprob"))
    value, tokens = line.split()[2], line.split()[4]
    assert float(value) == pytest.approx(total, abs=1e-3) and int(tokens) == len(out.prompt_token_ids) - 1
    assert main([*argv, "--guided-choice", "yes", "--guided-choice", "no way", "--json"]) == 0
    (printed,) = json.loads(capsys.readouterr().out)
    guided = SamplingParams(max_tokens=12, ignore_eos=True, guided_choice=("yes", "no way"))
    (out,) = llm.generate(PROMPTS[2], guided)
    assert printed["text"] == out.text and out.text in ("yes", "no way")
    assert main([*argv, "--bad-word", out.text[:3], "--json"]) == 0
    (printed,) = json.loads(capsys.readouterr().out)
    banning = SamplingParams(max_tokens=12, ignore_eos=True, bad_words=(out.text[:3],))
    (out,) = llm.generate(PROMPTS[2], banning)
    assert printed["token_ids"] == list(out.token_ids)
    assert main(["generate", MODEL, "--prompt", "x", "--logit-bias", "7"]) == 2
    assert "--logit-bias: must be TOKEN=BIAS, got '7'" in capsys.readouterr().err
    assert main(["generate", MODEL, "--prompt", "x", "--prompt-logprobs", "21"]) == 2
    assert "--prompt-logprobs: must be an integer between 0 and 20, got 21" in capsys.readouterr().err
    assert main(["generate", "gpt-17", "--prompt", "x"]) == 2
    assert "unknown torch model 'gpt-17'" in capsys.readouterr().err


def test_generate_command_json_carries_the_stop_reason_as_the_offline_api_gives_it(llm, capsys):
    """usage.md: each output has vLLM's `stop_reason` and `--json` prints every field; the JSON held
    `stop_string` and `stop_token` but no `stop_reason`, the name the server's answers use."""
    from radixflow.cli import main

    (first,) = llm.generate(PROMPTS[2], SamplingParams(max_tokens=1))
    stop = first.token_ids[-1]
    argv = ["generate", MODEL, "--prompt", PROMPTS[2], "--max-tokens", "4", "--json"]
    argv += ["--stop-token-ids", str(stop), "--kv-blocks", "256", "--state-slots", "64"]
    assert main(argv) == 0
    (printed,) = json.loads(capsys.readouterr().out)
    (out,) = llm.generate(PROMPTS[2], SamplingParams(max_tokens=4, stop_token_ids=[stop]))
    assert out.stop_reason == stop
    assert printed["stop_reason"] == out.stop_reason


def test_generate_command_takes_top_k_minus_one_as_the_offline_api_does(llm, capsys):
    from radixflow.cli import main

    argv = ["generate", MODEL, "--prompt", PROMPTS[2], "--max-tokens", "6", "--ignore-eos", "--json"]
    argv += ["--temperature", "1", "--seed", "4", "--kv-blocks", "256", "--state-slots", "64"]
    assert main([*argv, "--top-k", "-1"]) == 0  # vLLM's spelling of no cut, as SamplingParams takes it
    (printed,) = json.loads(capsys.readouterr().out)
    sampled = SamplingParams(max_tokens=6, ignore_eos=True, temperature=1.0, seed=4, top_k=-1)
    (out,) = llm.generate(PROMPTS[2], sampled)
    assert printed["token_ids"] == list(out.token_ids)
    assert main([*argv, "--top-k", "-2"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "top_k" in line.replace("-", "_") and "got -2" in line


def test_generate_command_prints_the_text_as_it_is(zoo):
    """The printed text is the prompt and output as they are: not wrapped at the console's width
    (a newline where a space was), no emoji code turned into an emoji, no backslash lost."""
    import io

    from rich.console import Console

    from radixflow.cli import main

    prompt = "a :smile: b \\[c] \\[ e [bold]d[/bold] " + "word " * 30
    buf = io.StringIO()
    console = Console(file=buf, width=40, force_terminal=False)
    argv = ["generate", MODEL, "--prompt", prompt, "--max-tokens", "0", "--kv-blocks", "256"]
    assert main([*argv, "--state-slots", "64"], console=console) == 0
    assert buf.getvalue().splitlines()[0] == prompt
    # to a file or a pipe, byte for byte: a tab is not spaces, a carriage return is kept
    buf = io.StringIO()
    exact = "tab\there,\rreturn\x0cfeed"
    argv[argv.index(prompt)] = exact
    assert main([*argv, "--state-slots", "64"], console=Console(file=buf, force_terminal=False)) == 0
    assert buf.getvalue().split("\n")[0] == exact


def test_generate_commands_default_max_tokens_is_capped_to_the_room_the_prompt_leaves(capsys):
    # the default --max-tokens (32) was sent as it is, so a prompt that fits with room for fewer
    # failed with "max_tokens: ... plus max_tokens 32", an option never given; as the server caps
    # its default, the command caps its own (a --max-tokens given is still refused)
    from radixflow.cli import main

    small = ["--kv-blocks", "4", "--block-size", "16", "--state-slots", "4", "--ignore-eos"]
    argv = ["generate", MODEL, "--prompt", "word " * 15, *small]  # 46 tokens: room for 64 - 46 + 1
    assert main([*argv, "--json"]) == 0
    (out,) = json.loads(capsys.readouterr().out)
    assert len(out["prompt_token_ids"]) == 46 and len(out["token_ids"]) == 19
    assert main([*argv, "--max-tokens", "32"]) == 2
    assert "--max-tokens 32 need 5 blocks, cache has 4 (--kv-blocks)" in capsys.readouterr().err


def test_generate_commands_default_max_tokens_rises_to_min_tokens(capsys):
    # --min-tokens 40 alone was refused ("--min-tokens: must be ... max_tokens (32)"), a limit the
    # user never gave: at least 40 tokens means the default --max-tokens is 40
    from radixflow.cli import main

    argv = ["generate", MODEL, "--prompt", "word", "--kv-blocks", "256", "--state-slots", "64", "--json"]
    assert main([*argv, "--min-tokens", "40"]) == 0
    (out,) = json.loads(capsys.readouterr().out)
    assert len(out["token_ids"]) == 40
    assert main([*argv, "--min-tokens", "40", "--max-tokens", "39"]) == 2  # one given is the user's
    # the limit named as the flag that set it, as --min-tokens is (it said "max_tokens (39)")
    refused = "--min-tokens: must be an integer between 0 and --max-tokens (39), got 40"
    assert refused in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--truncate-prompt-tokens", "9000"], "--truncate-prompt-tokens: 9000 is more than the model"),
        (["--logit-bias", "99999=1"], "--logit-bias: token id 99999 is outside the vocabulary"),
        (["--prompt", "there", "--max-tokens", "9000"], "prompt 0: --max-tokens: prompt of"),
        # each other parameter a message names, named as its flag too (they said "guided_choice")
        (["--guided-choice", "a", "--bad-word", "a"], "--bad-word: ban every --guided-choice "),
        (
            ["--guided-choice", "a", "--allowed-token-ids", "3"],
            "--allowed-token-ids: cannot be combined with --guided-choice",
        ),
        (
            ["--min-tokens", "3", "--allowed-token-ids", "2"],
            "--allowed-token-ids: every allowed token ends the output (a stop or end-of-sequence token id), "
            "so --min-tokens 3 cannot be met",
        ),
        (["--max-tokens", "9000"], "--max-tokens: prompt of 2 tokens plus --max-tokens 9000 exceeds"),
        (
            ["--kv-blocks", "2", "--max-tokens", "100"],
            "--max-tokens: does not fit in the KV cache: the prompt's 2 tokens plus --max-tokens 100 need",
        ),
    ],
)
def test_generate_command_names_by_their_flags_what_the_model_refuses(capsys, argv, expected):
    # found once the model had loaded, they were named as SamplingParams' fields ("logit_bias: ...")
    from radixflow.cli import main

    roomy = ["--kv-blocks", "256", "--state-slots", "64"]
    assert main(["generate", MODEL, "--prompt", "hi", *roomy, *argv]) == 2
    assert capsys.readouterr().err.startswith(f"radixflow: error: {expected}")


def test_generate_command_prints_the_output_logprob_when_asked(llm, capsys):
    from radixflow.cli import main

    argv = ["generate", MODEL, "--prompt", PROMPTS[2], "--max-tokens", "5", "--ignore-eos", "--logprobs", "2"]
    assert main([*argv, "--kv-blocks", "256", "--state-slots", "64"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("output logprob"))
    (out,) = llm.generate(PROMPTS[2], SamplingParams(max_tokens=5, ignore_eos=True, logprobs=2))
    assert out.logprobs is not None and line.split()[4] == "5"
    assert float(line.split()[2]) == pytest.approx(sum(e.logprob for e in out.logprobs), abs=1e-3)


def test_a_checkpoint_directory_and_a_trace_file_may_be_given_as_paths(llm, batch, tmp_path):
    # a pathlib.Path was refused: "model: must be a string, got PosixPath(...)"
    trace = tmp_path / "t.json"
    with LLM(Path(llm.model.path), kv_blocks=256, state_slots=64, trace_out=trace) as by_path:
        outs = by_path.generate(PROMPTS, GREEDY)
        assert [(o.token_ids, o.text) for o in outs] == [(o.token_ids, o.text) for o in batch]
    assert json.loads(trace.read_text())
    with pytest.raises(ValueError, match=r"^model: must be a string, got b'qwen"):
        LLM(b"qwen3_5-tiny")  # bytes are no path here: refused as before


def test_a_checkpoint_without_a_tokenizer_serves_token_id_prompts(llm, tmp_path):
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(llm.model.path, bare, ignore=shutil.ignore_patterns("tokenizer*"))
    assert not (bare / "tokenizer.json").exists()
    plain = LLM(str(bare), kv_blocks=256, state_slots=64)
    (out,) = plain.generate([PROMPTS[3]], GREEDY)
    (expected,) = llm.generate([PROMPTS[3]], GREEDY)
    assert out.token_ids == expected.token_ids and out.text == ""
    for refused in (lambda: plain.generate("text"), lambda: plain.chat([{"role": "user", "content": "x"}])):
        with pytest.raises(ValueError, match=r"has no tokenizer\.json: text prompts"):
            refused()
    # guided_choice and bad_words are text as well: their refusal spoke of stop strings alone
    for field, value in (("stop", ["."]), ("guided_choice", ["a", "b"]), ("bad_words", ["a"])):
        with pytest.raises(ValueError, match=rf"no tokenizer\.json: .*\b{field}\b.* need the model's"):
            plain.generate([PROMPTS[3]], SamplingParams(max_tokens=4, **{field: value}))


def test_text_too_long_for_the_model_is_refused_before_it_is_tokenized(llm):
    # tokenized in full first (a 6 MB prompt took 17 s to be refused); the server refuses at once
    long = "hello " * 100_000  # "at least": its length alone proves it, as the server says
    context = llm.engine.runner.model.max_context
    at_least = rf"has at least \d+ tokens; the model context is {context}$"
    with pytest.raises(ValueError, match=rf"^prompt: {at_least}"):
        llm.generate(long, GREEDY)
    with pytest.raises(ValueError, match=rf"^prompt 1: {at_least}"):
        llm.generate(["fine", long], GREEDY)
    with pytest.raises(ValueError, match=rf"^prompt: {at_least}"):
        llm.chat([{"role": "user", "content": long}], GREEDY)
    with pytest.raises(ValueError, match=rf"^context: {at_least}"):
        llm.score(long, [" a"])
    with pytest.raises(ValueError, match=rf"^candidate 1: {at_least}"):
        llm.score("fine", [" a", long])
    assert len(llm.tokenizer.encode(long)) > context  # the LLM's own tokenizer still takes any text
    assert llm.engine.requests == []


def test_text_that_is_not_unicode_is_refused_in_one_line(llm):
    with pytest.raises(ValueError, match="lone UTF-16 surrogate"):
        llm.generate("a\ud800b")


def test_token_ids_that_are_numpy_integers_are_the_ids_they_are(llm, batch):
    # list(np.array(ids)) was refused: "prompt 0 is neither text nor a list of token ids: item 0 is
    # np.int64(5)", where stop_token_ids of numpy integers were taken
    import numpy as np

    ids = list(np.array(PROMPTS[3]))
    (out,) = llm.generate([ids], GREEDY)
    assert out.prompt_token_ids == tuple(PROMPTS[3]) and out.token_ids == batch[3].token_ids
    (alone,) = llm.generate(ids, GREEDY)  # one prompt, as a list of Python ints is
    assert alone.token_ids == batch[3].token_ids
    (vllm,) = llm.generate({"prompt_token_ids": ids}, GREEDY)
    assert vllm.token_ids == batch[3].token_ids
    (score,) = llm.score(ids[:4], [ids[4:]])
    (plain,) = llm.score(PROMPTS[3][:4], [PROMPTS[3][4:]])
    assert (score.token_ids, score.logprobs) == (plain.token_ids, plain.logprobs)
    with pytest.raises(ValueError, match=r"item 1 is np.True_"):
        llm.generate([[np.int64(5), np.bool_(True)]])  # a bool is no token id, numpy's neither


def test_vllms_prompt_dicts_are_their_text_or_token_ids(llm, batch):
    # vLLM's TextPrompt {"prompt": text} and TokensPrompt {"prompt_token_ids": ids} were refused
    # ("got a dict"); a lone one had been run as its keys, the text "prompt"
    (text,) = llm.generate({"prompt": PROMPTS[2]}, GREEDY)
    assert text.token_ids == batch[2].token_ids
    both = llm.generate([{"prompt_token_ids": PROMPTS[3]}, {"prompt": PROMPTS[2]}], GREEDY)
    assert [o.token_ids for o in both] == [batch[3].token_ids, batch[2].token_ids]
    for prompts, message in (
        ({"prompt": "x", "multi_modal_data": {}}, "prompt: "),
        (["fine", {"prompt_token_ids": [5], "prompt": "x"}], "prompt 1: "),
        (["fine", {}], "prompt 1: "),
    ):
        shape = "a dict prompt is vLLM's {'prompt': text} or {'prompt_token_ids': ids}, got keys"
        with pytest.raises(ValueError, match="^" + re.escape(message + shape)):
            llm.generate(prompts, GREEDY)
    vllms = "a dict prompt is vLLM's {'prompt': text} or {'prompt_token_ids': ids}"
    for prompts, message in (
        (["fine", {"prompt_token_ids": 5}], f"prompt 1: {vllms}, got 'prompt_token_ids' as an int"),
        ({"prompt": ["x"]}, f"prompt: {vllms}, got 'prompt' as a list"),
    ):
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            llm.generate(prompts, GREEDY)
    assert llm.engine.requests == []


def test_the_parameters_are_passed_by_vllms_keyword(llm, batch):
    # generate(prompts, sampling_params=...) and chat(..., sampling_params=...), as vLLM names the
    # keyword, were a TypeError ("unexpected keyword argument 'sampling_params'")
    (out,) = llm.generate(PROMPTS[2], sampling_params=GREEDY)
    assert out.token_ids == batch[2].token_ids
    conversation = [{"role": "user", "content": "hi"}]
    (chatted,) = llm.chat(conversation, sampling_params=replace(GREEDY, max_tokens=2))
    assert chatted.token_ids == llm.chat(conversation, replace(GREEDY, max_tokens=2))[0].token_ids


@pytest.mark.parametrize(
    ("field", "said"),
    [
        ("stop", "stop: must be a string or a list of strings, got array("),
        ("bad_words", "bad_words: must be a list of strings, got array("),
        ("guided_choice", "guided_choice: must be a list of strings, got array("),
    ],
)
def test_texts_given_as_a_numpy_array_are_refused_naming_the_field(llm, field, said):
    # numpy's own "The truth value of an array with more than one element is ambiguous" came
    # out, naming no field: the call asked whether there were any texts before checking them
    import numpy as np

    with pytest.raises(ValueError) as e:
        llm.generate(PROMPTS[2], SamplingParams(max_tokens=2, **{field: np.array(["a", "b"])}))
    assert str(e.value).startswith(said)
    assert llm.engine.requests == []


@pytest.mark.parametrize(
    ("params", "given"),
    [
        (3, "an int"),
        ({"max_tokens": 2}, "a dict"),  # a mapping is no list of parameters either
        ([{"max_tokens": 2}, SamplingParams()], "a dict in the list"),
        (TokenSamplingParams(max_tokens=2), "the scheduler's SamplingParams"),
    ],
)
def test_params_of_another_type_are_one_line_naming_what_was_given(llm, params, given):
    # each was a traceback: "object of type 'int' has no len()", "'dict' object has no attribute 'stop'"
    shape = r"^sampling_params: a radixflow.SamplingParams or a list of them"
    with pytest.raises(ValueError, match=shape) as e:
        llm.generate(PROMPTS[2:4], params)
    assert str(e.value).endswith(f"got {given}")
    assert llm.engine.requests == []


@pytest.mark.parametrize(
    ("prompts", "given"),
    [
        (None, "a NoneType"),  # were TypeError: 'NoneType' / 'int' object is not iterable
        (7, "an int"),
        (b"Water boils", "a bytes"),  # was run as token ids: its byte values
        (bytearray(b"Water"), "a bytearray"),
    ],
)
def test_prompts_of_another_type_are_one_line_naming_what_was_given(llm, prompts, given):
    with pytest.raises(ValueError, match=r"^prompts: text, a list of token ids, or a list of those") as e:
        llm.generate(prompts, GREEDY)
    assert str(e.value).endswith(f"got {given}")
    with pytest.raises(ValueError, match=r"^prompt 1 is neither text nor a list of token ids, got a set$"):
        llm.generate(["fine", {"Water boils"}], GREEDY)
    with pytest.raises(ValueError, match=r"^prompt 1 is neither text nor a list of token ids, got a bytes$"):
        llm.generate(["fine", b"Water boils"], GREEDY)
    # "got a list" of a list: the item that is no token id is named
    neither = "is neither text nor a list of token ids"
    with pytest.raises(ValueError, match=rf"^prompt 1 {neither}: item 2 is 3\.5$"):
        llm.generate(["fine", [5, 6, 3.5]], GREEDY)
    with pytest.raises(ValueError, match=rf"^prompt 0 {neither}: item 0 is True$"):
        llm.generate([[True, 5]], GREEDY)
    assert llm.engine.requests == []


def test_one_prompt_of_token_ids_in_an_array_is_named_as_given(llm):
    # an array of ids was read as a list of prompts: "prompt 0 is neither text nor a list of token
    # ids, got an int64", of a prompt 0 never given
    import numpy as np

    with pytest.raises(ValueError, match=r"^prompts: text, a list of token ids, or a list of those") as e:
        llm.generate(np.array(PROMPTS[3]), GREEDY)
    assert str(e.value).endswith("got a ndarray of token ids (one prompt: a list, .tolist())")
    (out,) = llm.generate(iter([PROMPTS[2]]), GREEDY)  # an iterator of prompts is still read in order
    assert out.prompt_token_ids == tuple(llm.tokenizer.encode(PROMPTS[2]))
    assert llm.engine.requests == []


def test_on_output_hears_each_output_at_its_place_and_one_that_cannot_be_called_is_refused(llm):
    heard = {}
    outputs = llm.generate(PROMPTS, GREEDY, on_output=heard.__setitem__)
    assert [heard[i] for i in range(len(PROMPTS))] == outputs
    # called only as the first request ended, it would abort the whole batch with a TypeError
    with pytest.raises(ValueError, match=r"^on_output: must be a function \(index, output\), got 3$"):
        llm.generate(PROMPTS[2:4], GREEDY, on_output=3)  # type: ignore[arg-type]
    assert llm.engine.requests == []


@pytest.mark.parametrize("progress", [True, "bar", 3])
def test_a_progress_hook_that_cannot_be_called_is_refused_before_anything_runs(llm, progress):
    # it was called only as the first request ended: a TypeError then aborted the whole batch
    with pytest.raises(ValueError, match=rf"^progress: must be a function \(done, total\), got {progress!r}"):
        llm.generate(PROMPTS[2:4], GREEDY, progress=progress)
    with pytest.raises(ValueError, match=r"^progress: must be a function"):
        llm.score("a context", [" a"], progress=progress)
    assert llm.engine.requests == []


def test_text_that_is_not_unicode_is_named_by_its_prompt(llm):
    with pytest.raises(ValueError, match=r"^prompt: text contains a lone UTF-16 surrogate"):
        llm.generate("a\ud800b")
    with pytest.raises(ValueError, match=r"^prompt 2: text contains a lone UTF-16 surrogate"):
        llm.generate(["fine", [5, 6], "a\udcffb"])
    with pytest.raises(ValueError, match=r"^prompt 1: text contains a lone UTF-16 surrogate"):
        llm.chat([[{"role": "user", "content": "fine"}], [{"role": "user", "content": "a\ud800"}]])


@pytest.mark.parametrize("field", ["guided_choice", "bad_words"])
def test_a_choice_or_bad_word_that_is_not_unicode_is_named_by_its_field(llm, field):
    # "text contains a lone UTF-16 surrogate ..." said nothing of where the text was
    params = SamplingParams(max_tokens=2, **{field: ["fine", "a\ud800"]})
    with pytest.raises(ValueError, match=rf"^{field}: item 1: text contains a lone UTF-16 surrogate"):
        llm.generate("a", params)
    with pytest.raises(ValueError, match=rf"^prompt 0: {field}: item 1: text contains a lone"):
        llm.generate(["a", "b"], params)


def test_the_trace_holds_every_generate_call_on_the_wall_clock(zoo, tmp_path):
    path = tmp_path / "llm.json"
    llm = LLM(MODEL, kv_blocks=256, state_slots=64, trace_out=str(path), placement="lone")
    llm.generate(PROMPTS[0], SamplingParams(max_tokens=2))
    first = json.loads(path.read_text())
    assert first["otherData"]["clock"] == "wall" and first["otherData"]["runner"] == "torch"
    llm.generate(PROMPTS[1], SamplingParams(max_tokens=2))  # a later call reuses the first's context
    events = json.loads(path.read_text())["traceEvents"]
    assert sum(e["name"] == "finished" for e in events) == 2
    assert any(e["ph"] == "f" for e in events)  # a flow from the first call's chunk to the second's


def test_a_trace_the_disk_stops_mid_call_is_a_warning_of_that_call_and_of_each_call_after(
    zoo, tmp_path, monkeypatch
):
    # a flush every few seconds inside a call that failed was a log line only; the call, and
    # every later one whose rounds the stopped trace dropped, said nothing: the RuntimeWarning a
    # failed flush at a call's end gives came only where the disk failed just then
    import errno

    from radixflow.engine.trace_file import NOT_WRITTEN, TraceFile

    def no_room(self, body):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("radixflow.engine.trace_file.FLUSH_EVERY_S", 0.0)  # a flush every round
    path = tmp_path / "t.json"
    llm = LLM(MODEL, kv_blocks=256, state_slots=64, trace_out=str(path))
    monkeypatch.setattr(TraceFile, "_append", no_room)  # the first flush writes the file, the next fail
    for prompt in PROMPTS[:2]:
        with pytest.warns(RuntimeWarning, match=f"{WARNS}{NOT_WRITTEN}: No space left on device$"):
            llm.generate(prompt, SamplingParams(max_tokens=3, ignore_eos=True))
    assert json.loads(path.read_text())["traceEvents"]  # valid JSON: the first round's events


def test_generate_command_prints_the_end_of_a_truncated_prompt_that_ran(llm, capsys):
    from radixflow.cli import main

    argv = ["generate", MODEL, "--prompt", PROMPTS[2], "--max-tokens", "2", "--ignore-eos"]
    argv += ["--kv-blocks", "256", "--state-slots", "64", "--truncate-prompt-tokens", "3"]
    assert main(argv) == 0
    (out,) = llm.generate(PROMPTS[2], SamplingParams(max_tokens=2, ignore_eos=True, truncate_prompt_tokens=3))
    ran = llm.tokenizer.decode(out.prompt_token_ids, skip_special_tokens=True)
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("..." + ran) and PROMPTS[2] not in first


def test_a_second_call_while_one_runs_is_refused_and_the_first_is_unharmed(zoo, llm):
    # a call from the progress hook (or another thread) would step the engine itself, running the
    # first call's requests past their stop strings unobserved
    fresh = LLM(MODEL, kv_blocks=256, state_slots=64)
    params = [SamplingParams(max_tokens=1), SamplingParams(max_tokens=12, stop=["1"], ignore_eos=True)]
    prompts = [PROMPTS[0], PROMPTS[2]]
    want = fresh.generate(prompts, params)
    assert want[1].finish_reason == "stop" and len(want[1].token_ids) < 12  # the stop string comes early
    refused = []

    def inner_call(done: int, total: int) -> None:
        if done == 1:
            with pytest.raises(RuntimeError, match="already running a call"):
                llm.generate(PROMPTS[1], GREEDY)
            refused.append(done)

    got = llm.generate(prompts, params, progress=inner_call)
    assert refused == [1] and [o.token_ids for o in got] == [o.token_ids for o in want]
    llm.engine.check_integrity()
    assert llm.engine.requests == []


def test_a_call_from_another_thread_while_one_runs_is_refused(llm):
    in_hook, release = threading.Event(), threading.Event()
    first: list[object] = []

    def wait_in_hook(done: int, total: int) -> None:
        in_hook.set()
        release.wait(60)

    call = partial(llm.generate, PROMPTS[2], GREEDY, progress=wait_in_hook)
    worker = threading.Thread(target=lambda: first.extend(call()))
    worker.start()
    try:
        assert in_hook.wait(60)
        with pytest.raises(RuntimeError, match="already running a call"):
            llm.generate(PROMPTS[3], GREEDY)
    finally:
        release.set()
        worker.join()
    assert len(first) == 1 and llm.engine.requests == []
    assert llm.generate(PROMPTS[3], GREEDY)[0].finish_reason == "length"  # free again once it returns


def test_many_calls_keep_a_bounded_round_history(llm):
    # every call adds rounds: an LLM kept for a long job must not keep them all
    llm.generate(PROMPTS[3], SamplingParams(max_tokens=2))
    assert llm.engine.rounds.maxlen is not None and llm.engine.failed_rounds.maxlen is not None
    assert len(llm.engine.rounds) <= llm.engine.rounds.maxlen and llm.engine.requests == []


def test_the_trace_ends_requests_stopped_by_a_stop_string_or_cut_short(zoo, tmp_path):
    # they end between rounds (`Engine.stop`, `Engine.abort`), not in a round's finished list
    path = tmp_path / "llm.json"
    llm = LLM(MODEL, kv_blocks=256, state_slots=64, trace_out=str(path))
    (out,) = llm.generate(PROMPTS[2], SamplingParams(max_tokens=12, stop=["1"], ignore_eos=True))
    assert out.finish_reason == "stop"

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    longer = SamplingParams(max_tokens=12, ignore_eos=True)
    with pytest.raises(KeyboardInterrupt):  # the first answer comes while the other two still run
        llm.generate(PROMPTS[:3], [SamplingParams(max_tokens=1), longer, longer], progress=interrupt)
    events = json.loads(path.read_text())["traceEvents"]
    ended = [(e["tid"], e["args"]) for e in events if e["name"] == "finished"]
    assert sum(e["name"] == "arrived" for e in events) == len(ended) == 4
    assert sorted(args.get("aborted", False) for _, args in ended) == [False, False, True, True]
    assert len({tid for tid, _ in ended}) == 4  # each on its request's own track


def test_a_ctrl_c_as_the_engine_takes_a_request_leaves_nothing_behind(zoo, batch, monkeypatch):
    """A KeyboardInterrupt after the engine took a request, before the call followed it, left it
    with the engine: still waiting to arrive, run by the next call and never forgotten."""
    llm = LLM(MODEL, kv_blocks=256, state_slots=64)
    submit = llm.engine.submit

    def interrupted(request: Request) -> None:
        submit(request)
        raise KeyboardInterrupt

    monkeypatch.setattr(llm.engine, "submit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        llm.generate(PROMPTS[:2], GREEDY)
    monkeypatch.undo()
    assert llm.engine.requests == [] and not llm.engine.has_work()
    again = llm.generate(PROMPTS[:2], GREEDY)
    assert [o.token_ids for o in again] == [o.token_ids for o in batch[:2]]
    llm.engine.check_integrity()


def test_a_ctrl_c_while_a_round_is_scheduled_leaves_the_llm_as_good_as_new(zoo, batch, monkeypatch):
    """A Ctrl-C (SIGINT) that came while the scheduler built a round, outside the worker call,
    left a request half admitted (KV promised to it, or running without its round): the next
    call failed the cache's integrity check. Now it takes effect once the round is built, and
    the round is rolled back as one interrupted in the worker call is."""
    llm = LLM(MODEL, kv_blocks=256, state_slots=64)
    planner = llm.engine.scheduler.checkpoints
    positions, signals = planner.positions, []

    def interrupted(*args: object, **kwargs: object) -> list[int]:
        if not signals:  # the first chunk planned: its request is part way through admission
            signals.append(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
        return positions(*args, **kwargs)

    monkeypatch.setattr(planner, "positions", interrupted)
    with pytest.raises(KeyboardInterrupt):
        llm.generate(PROMPTS[:3], GREEDY)
    monkeypatch.undo()
    llm.engine.check_integrity()
    assert llm.engine.requests == [] and not llm.engine.has_work()
    again = llm.generate(PROMPTS[:3], GREEDY)
    assert [o.token_ids for o in again] == [o.token_ids for o in batch[:3]]
    llm.engine.check_integrity()


def test_a_second_ctrl_c_while_a_call_cleans_up_leaves_nothing_behind(zoo, batch, monkeypatch):
    """A Ctrl-C pressed twice: the second, landing while the call aborted its requests after the
    first, stopped the cleanup part way and left the rest running in the engine, to run in the
    next call. The cleanup now finishes first."""
    llm = LLM(MODEL, kv_blocks=256, state_slots=64)
    abort, seen = llm.engine.abort, []

    def pressed_again(request_id: str) -> object:
        if not seen:
            seen.append(request_id)
            signal.raise_signal(signal.SIGINT)
        return abort(request_id)

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(llm.engine, "abort", pressed_again)
    longer = SamplingParams(max_tokens=8, ignore_eos=True)
    with pytest.raises(KeyboardInterrupt):
        llm.generate(PROMPTS[:3], [SamplingParams(max_tokens=1), longer, longer], progress=interrupt)
    monkeypatch.undo()
    assert seen and llm.engine.requests == [] and not llm.engine.has_work()
    llm.engine.check_integrity()
    again = llm.generate(PROMPTS[:2], GREEDY)
    assert [o.token_ids for o in again] == [o.token_ids for o in batch[:2]]


def test_an_llm_dropped_without_close_frees_its_engine_at_once(zoo):
    # its prompt reader held functions of the LLM itself: a reference cycle, so `del llm` freed the
    # weights and pools only when the cycle collector next ran (never, with gc disabled)
    llm = LLM(MODEL, kv_blocks=16, state_slots=4)
    llm.generate("hi", GREEDY)
    llm.score([5, 6], [[7]])
    llm.chat([{"role": "user", "content": "hi"}])
    # and the weights: each routed Linear (CPU float32 `runners.matmul`) once held its module
    weights = [p for n, p in llm.engine.runner.net.named_parameters() if n.endswith("proj.weight")]
    dropped = [weakref.ref(x) for x in (llm, llm.engine, llm.engine.runner, *weights)]
    del weights
    gc.collect()
    gc.disable()
    try:
        del llm
        assert [ref() for ref in dropped] == [None] * len(dropped)
    finally:
        gc.enable()


def test_close_lets_go_of_the_engine_and_a_closed_llm_refuses_calls(zoo):
    """An LLM had no close: its weights, pools and cache lived as long as any reference to it."""
    with LLM(MODEL, kv_blocks=256, state_slots=64) as llm:
        runner = weakref.ref(llm.engine.runner)
        (out,) = llm.generate(PROMPTS[3], GREEDY)

        def close_meanwhile(done: int, total: int) -> None:
            with pytest.raises(RuntimeError, match="running a call"):
                llm.close()

        assert llm.generate(PROMPTS[3], GREEDY, progress=close_meanwhile)[0].token_ids == out.token_ids
    gc.collect()
    assert runner() is None  # nothing of the engine is held any more
    calls = [
        partial(llm.generate, PROMPTS[3], GREEDY),
        partial(llm.generate, []),  # nothing to run, yet the LLM is closed
        partial(llm.chat, []),
        partial(llm.score, [5, 6], []),
        partial(llm.score_many, [], []),
        partial(llm.chat, [{"role": "user", "content": "hi"}]),
        partial(llm.score, [5, 6], [[7]]),
        partial(llm.score_many, [[5, 6]], [[[7]]]),
        partial(llm.scoring_problem, [5, 6], [[7]]),
        lambda: llm.tokenizer,
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match=r"^this LLM is closed"):
            call()
    llm.close()  # again: nothing to do


@pytest.mark.parametrize("command", ["generate", "score"])
def test_a_ctrl_c_says_where_the_trace_is(zoo, tmp_path, capsys, monkeypatch, command):
    """`generate` and `score` write --trace-out as a Ctrl-C stops them, but their line said only
    "radixflow: interrupted" (bench's says where its trace is)."""
    from radixflow.cli import main

    call = getattr(LLM, command)

    def stopped(self, *args, progress, **kwargs):
        def hear(done: int, total: int) -> None:
            raise KeyboardInterrupt

        return call(self, *args, progress=hear, **kwargs)

    monkeypatch.setattr(LLM, command, stopped)
    path = tmp_path / "t.json"
    given = (
        ["--prompt", "x", "--max-tokens", "2"]
        if command == "generate"
        else ["--context", "x", "--candidate", " y"]
    )
    assert main([command, MODEL, *given, "--trace-out", str(path)]) == 130
    # the output (candidate) finished as the Ctrl-C came is printed, and said before the trace
    printed = "1 of 1 output finished, printed above (the same command runs them all again); "
    scored = "1 of 1 candidate scored, printed above (the same command scores them all again); "
    kept = printed if command == "generate" else scored
    said = f"radixflow: interrupted; {kept}the trace, down to where the run stopped, is in {path}"
    assert capsys.readouterr().err.splitlines()[-1] == said
    assert json.loads(path.read_text())["traceEvents"]


def test_a_refused_prompt_leaves_an_existing_trace_as_it_was(zoo, tmp_path):
    # LLM(trace_out=...) emptied the file as it was built: a prompt refused before anything ran
    # (longer than the model's context) lost the user's previous trace for a trace of nothing
    path = tmp_path / "old.json"
    path.write_bytes(b'{"traceEvents": [{"name": "old"}]}\n')
    long = "hello " * 100_000
    with LLM(MODEL, kv_blocks=256, state_slots=64, trace_out=str(path)) as llm:
        with pytest.raises(ValueError, match="the model context is"):
            llm.generate(long, GREEDY)
        with pytest.raises(ValueError, match="the model context is"):
            llm.score(long, [" a"])
    assert path.read_bytes() == b'{"traceEvents": [{"name": "old"}]}\n'


@pytest.mark.parametrize("command", ["generate", "score"])
def test_a_command_refusing_its_prompt_leaves_an_existing_trace_as_it_was(zoo, tmp_path, capsys, command):
    from radixflow.cli import main

    path = tmp_path / "old.json"
    path.write_bytes(b'{"traceEvents": []}\n')
    long = "hello " * 100_000
    given = ["--context", long, "--candidate", " y"] if command == "score" else ["--prompt", long]
    assert main([command, MODEL, *given, "--trace-out", str(path)]) == 2
    assert "the model context is" in capsys.readouterr().err
    assert path.read_bytes() == b'{"traceEvents": []}\n'


@pytest.mark.parametrize("command", ["generate", "score"])
def test_a_trace_the_disk_refuses_is_one_line_and_exit_2_after_the_output(
    zoo, tmp_path, capsys, monkeypatch, command
):
    # generate and score printed a Python RuntimeWarning pointing into radixflow's own source and
    # exited 0 with no trace written, where bench says it in one line and exits 2
    import errno
    import os

    from radixflow.cli import main

    def no_room(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr("radixflow.engine.trace_file.write_whole", no_room)
    path = tmp_path / "t.json"
    given = ["--context", "x", "--candidate", " y"] if command == "score" else ["--prompt", "x"]
    assert main([command, MODEL, *given, "--trace-out", str(path)]) == 2
    captured = capsys.readouterr()
    said = f"radixflow: error: cannot write --trace-out {path}: No space left on device"
    assert captured.err.splitlines() == [said]
    assert captured.out  # the answer is printed all the same


@pytest.mark.parametrize("command", ["generate", "score"])
def test_a_failed_run_whose_trace_the_disk_refused_says_both(zoo, tmp_path, capsys, monkeypatch, command):
    # the trace's failure is held back until the answers are out; a run that then fails on its
    # own error said nothing of the trace
    import errno
    import os

    from radixflow.cli import main
    from radixflow.runners.torch_runner import TorchRunner

    def no_room(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    def lost(self, batch):
        raise RuntimeError("device lost")

    monkeypatch.setattr("radixflow.engine.trace_file.write_whole", no_room)
    monkeypatch.setattr(TorchRunner, "run", lost)
    path = tmp_path / "t.json"
    given = ["--context", "x", "--candidate", " y"] if command == "score" else ["--prompt", "x"]
    assert main([command, MODEL, *given, "--trace-out", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("radixflow: error: ") and "device lost" in err[0]
    assert err[1:] == [f"radixflow: warning: cannot write --trace-out {path}: No space left on device"]


WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None  # an install without the torch extra: `import torch` fails
import radixflow
try:
    radixflow.LLM("qwen3_5-tiny")
except ImportError as e:
    print(f"{type(e).__name__}: {e}")
"""


def test_llm_without_the_torch_extra_names_the_install_command_as_the_cli_does():
    # it raised a bare "No module named 'torch'" (here: "import of torch halted"), deep in the options
    root = str(Path(radixflow.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.stdout.strip() == (
        "ModuleNotFoundError: radixflow.LLM needs the torch extra (package 'torch' is missing): "
        "pip install -e '.[torch]'"
    ), done.stderr
