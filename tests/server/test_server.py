"""`radixflow serve` through the official openai client: the same answers as the offline API."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import httpx
import openai
import pytest
from server_utils import MODEL, OPTIONS, RunningServer, running_server

from radixflow.generation import LLM, SamplingParams
from radixflow.generation.detokenize import token_texts
from radixflow.generation.outputs import TokenLogprob
from radixflow.options import EngineOptions
from radixflow.server.errors import ApiError
from radixflow.server.responses.logprobs import TokenNames, chat_logprobs
from radixflow.server.state import ServerConfig

CONTEXT = "Reranking models score each candidate document against the same query. " * 2
PROMPTS = [CONTEXT + "Candidate one.", CONTEXT + "Candidate two is longer.", "Water boils at 100 degrees."]
TOL = 1e-4
LONG_TEXT = "Hello world " * 60000  # far past the model's context


@pytest.fixture(scope="module")
def served(zoo) -> Iterator[RunningServer]:
    with running_server(ServerConfig(max_pending=64)) as running:
        yield running


@pytest.fixture(scope="module")
def llm(zoo) -> LLM:
    return LLM(MODEL, kv_blocks=OPTIONS.kv_blocks, state_slots=OPTIONS.state_slots)


def user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


def greedy(max_tokens: int = 8, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, **kw)


def assert_logprobs_match(served_lp, offline) -> None:
    assert served_lp.tokens == [e.text for e in offline]
    assert served_lp.token_logprobs == pytest.approx([e.logprob for e in offline], abs=TOL)


def test_single_completion_equals_the_offline_api(served, llm):
    client = served.client()
    r = client.completions.create(
        model=MODEL,
        prompt=PROMPTS[2],
        max_tokens=8,
        temperature=0,
        logprobs=3,
        extra_body={"ignore_eos": True},
    )
    (out,) = llm.generate(PROMPTS[2], greedy(logprobs=3))
    (choice,) = r.choices
    assert choice.text == out.text and choice.finish_reason == "length"
    assert_logprobs_match(choice.logprobs, out.logprobs)
    assert all(len(top) >= 3 for top in choice.logprobs.top_logprobs)
    offsets = choice.logprobs.text_offset
    assert offsets == [sum(len(t) for t in choice.logprobs.tokens[:i]) for i in range(len(offsets))]
    assert r.usage.prompt_tokens == len(out.prompt_token_ids) and r.usage.completion_tokens == 8
    assert r.model == MODEL and r.object == "text_completion"


def test_batched_completions_keep_prompt_order_and_equal_the_offline_api(served, llm):
    token_prompt = llm.tokenizer.encode(PROMPTS[0])
    r = served.client().completions.create(
        model=MODEL, prompt=PROMPTS, max_tokens=6, temperature=0, extra_body={"ignore_eos": True}
    )
    offline = llm.generate(PROMPTS, greedy(6))
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert [c.text for c in r.choices] == [o.text for o in offline]
    assert r.usage.completion_tokens == 18
    as_tokens = served.client().completions.create(
        model=MODEL,
        prompt=[token_prompt, token_prompt],
        max_tokens=6,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert [c.text for c in as_tokens.choices] == [offline[0].text] * 2


def test_streamed_completion_adds_up_to_the_plain_one(served, llm):
    chunks = list(
        served.client().completions.create(
            model=MODEL,
            prompt=PROMPTS[1],
            max_tokens=10,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    (out,) = llm.generate(PROMPTS[1], greedy(10))
    texts = [c.choices[0].text for c in chunks if c.choices]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert "".join(texts) == out.text
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert chunks[-1].usage.completion_tokens == 10 and not chunks[-1].choices


def test_requests_from_many_connections_share_rounds(served, llm):
    from concurrent.futures import ThreadPoolExecutor

    before = served.on_engine(lambda e: e.scheduler.rounds)

    def one(i: int) -> str:
        r = served.client().completions.create(
            model=MODEL, prompt=PROMPTS[i % 3], max_tokens=24, temperature=0, extra_body={"ignore_eos": True}
        )
        return r.choices[0].text

    with ThreadPoolExecutor(6) as pool:
        texts = list(pool.map(one, range(6)))
    rounds = served.on_engine(lambda e: [r for r in e.rounds if r.index >= before])
    assert max(r.requests for r in rounds) >= 2  # each connection sent one prompt
    assert texts == [o.text for o in llm.generate([PROMPTS[i % 3] for i in range(6)], greedy(24))]


def test_stop_strings_cut_the_text_as_offline(served, llm):
    (base,) = llm.generate(PROMPTS[0], greedy(12))
    stop = base.text[len(base.text) // 2 :][:2]
    r = served.client().completions.create(
        model=MODEL,
        prompt=PROMPTS[0],
        max_tokens=12,
        temperature=0,
        stop=[stop],
        extra_body={"ignore_eos": True},
    )
    (out,) = llm.generate(PROMPTS[0], greedy(12, stop=(stop,)))
    assert r.choices[0].text == out.text == base.text[: base.text.find(stop)]
    assert r.choices[0].finish_reason == "stop"
    body = {"model": MODEL, "prompt": PROMPTS[0], "max_tokens": 12, "temperature": 0, "stop": [stop]}
    body |= {"ignore_eos": True, "include_stop_str_in_output": True}
    kept = served.http().post("/v1/completions", json=body).json()["choices"][0]
    streamed = served.http().post("/v1/completions", json=body | {"stream": True})
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    shown = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert kept["text"] == shown == base.text[: base.text.find(stop) + len(stop)]
    assert kept["finish_reason"] == "stop"


def stop_reasons(served: RunningServer, route: str, stream: bool, **fields) -> list[object]:
    """Each choice's ``stop_reason`` through the openai client (a stream's from its final chunk)."""
    client, extra = served.client(), {"ignore_eos": True, **fields.pop("extra_body", {})}
    common = {"model": MODEL, "max_tokens": 12, "temperature": 0, "stream": stream, "extra_body": extra}
    if route == "chat":
        made = client.chat.completions.create(messages=[user(PROMPTS[0])], **common, **fields)
    else:
        made = client.completions.create(prompt=PROMPTS[0], **common, **fields)
    choices = [c for chunk in made for c in chunk.choices] if stream else made.choices
    return [c.stop_reason for c in choices if c.finish_reason is not None]


@pytest.mark.parametrize("route", ["completions", "chat"])
@pytest.mark.parametrize("stream", [False, True])
def test_each_choice_says_which_stop_string_or_stop_token_ended_it_as_vllm(served, route, stream):
    # vLLM's stop_reason: the stop string or stop token id that ended the choice, null otherwise;
    # the server sent none, so a client could not tell a stop string from an EOS
    assert stop_reasons(served, route, stream) == [None]  # ran to max_tokens
    body = {"model": MODEL, "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    body |= {"return_tokens_as_token_ids": True}  # the tokens generated, by id
    if route == "chat":
        body |= {"messages": [user(PROMPTS[0])], "logprobs": True}
        (made,) = served.http().post("/v1/chat/completions", json=body).json()["choices"]
        text, names = made["message"]["content"], [e["token"] for e in made["logprobs"]["content"]]
    else:
        body |= {"prompt": PROMPTS[0], "logprobs": 0}
        (made,) = served.http().post("/v1/completions", json=body).json()["choices"]
        text, names = made["text"], made["logprobs"]["tokens"]
    stop = text[len(text) // 2 :][:2]
    assert stop_reasons(served, route, stream, stop=[stop, "never"]) == [stop]
    token = int(names[3].removeprefix("token_id:"))
    assert stop_reasons(served, route, stream, extra_body={"stop_token_ids": [token]}) == [token]


@pytest.mark.parametrize("stream", [False, True])
def test_the_eos_tokens_text_is_left_out_with_special_tokens_kept(served, llm, stream):
    # the EOS token that ended a request showed its text ("<|im_end|>") with skip_special_tokens
    # false, where vLLM leaves it out; the server's trackers are built apart from the LLM's
    (eos, *_) = llm.engine.runner.model.eos_token_ids
    body = {"model": MODEL, "prompt": PROMPTS[2], "max_tokens": 3, "allowed_token_ids": [eos]}
    body |= {"skip_special_tokens": False, "stream": stream}
    r = served.http().post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    if stream:
        chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        reason = next(c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"])
    else:
        ((text, reason),) = [(c["text"], c["finish_reason"]) for c in r.json()["choices"]]
    assert (text, reason) == ("", "stop")
    kept = served.http().post("/v1/completions", json=body | {"include_stop_str_in_output": True})
    assert llm.tokenizer.decode([eos], skip_special_tokens=False) in kept.text


def test_allowed_token_ids_limit_what_is_generated_on_both_routes(served, llm):
    (base,) = llm.generate(PROMPTS[2], greedy(6))
    allowed = sorted({*base.token_ids[:1], 7, 11})  # the model's first pick, and two others
    body = {"model": MODEL, "max_tokens": 6, "ignore_eos": True, "allowed_token_ids": allowed, "seed": 5}
    body |= {"return_tokens_as_token_ids": True}  # logprob entries name their token ids

    def ids(entries: list[str]) -> set[int]:
        return {int(name.removeprefix("token_id:")) for name in entries}

    http = served.http()
    (greedy_out,) = llm.generate(PROMPTS[2], greedy(6, allowed_token_ids=tuple(allowed)))
    for temperature in (0, 1.0):
        r = http.post(
            "/v1/completions", json=body | {"prompt": PROMPTS[2], "temperature": temperature, "logprobs": 0}
        )
        assert r.status_code == 200, r.text
        (c,) = r.json()["choices"]
        assert len(c["logprobs"]["tokens"]) == 6 and ids(c["logprobs"]["tokens"]) <= set(allowed)
        if temperature == 0:
            assert c["text"] == greedy_out.text
    messages = [{"role": "user", "content": "hi"}]
    chat = http.post(
        "/v1/chat/completions", json=body | {"messages": messages, "logprobs": True, "temperature": 1.0}
    ).json()
    content = chat["choices"][0]["logprobs"]["content"]
    assert len(content) == 6 and ids([c["token"] for c in content]) <= set(allowed)
    banned = {"model": MODEL, "prompt": PROMPTS[2], "max_tokens": 6, "temperature": 0, "ignore_eos": True}
    (offline,) = llm.generate(PROMPTS[2], greedy(6, bad_words=(base.text[:2],)))
    r = http.post("/v1/completions", json=banned | {"bad_words": [base.text[:2]]})
    assert r.json()["choices"][0]["text"] == offline.text != base.text


def test_a_truncated_prompt_is_echoed_and_counted_as_it_ran(served, llm):
    prompt = llm.tokenizer.encode(PROMPTS[1])
    body = {"model": MODEL, "prompt": PROMPTS[1], "max_tokens": 3, "temperature": 0, "ignore_eos": True}
    body |= {"truncate_prompt_tokens": 6, "echo": True, "logprobs": 0}
    r = served.http().post("/v1/completions", json=body)
    (c,) = r.json()["choices"]
    (alone,) = llm.generate([prompt[-6:]], greedy(3))
    assert c["text"] == llm.tokenizer.decode(prompt[-6:]) + alone.text
    assert r.json()["usage"]["prompt_tokens"] == 6 and len(c["logprobs"]["tokens"]) == 6 + 3
    messages = [{"role": "user", "content": PROMPTS[1]}]
    chat = {"model": MODEL, "messages": messages, "truncate_prompt_tokens": 5, "max_tokens": 1}
    assert served.http().post("/v1/chat/completions", json=chat).json()["usage"]["prompt_tokens"] == 5


def test_guided_choice_answers_with_one_of_the_strings_on_both_routes(served, llm):
    phrases = ["the lazy dog", "a quick fox", "Candidate two"]
    body = {"model": MODEL, "max_tokens": 16, "guided_choice": phrases, "n": 4, "temperature": 1.2, "seed": 1}
    http = served.http()
    r = http.post("/v1/completions", json=body | {"prompt": PROMPTS[0]})
    assert r.status_code == 200, r.text
    assert all(c["text"] in phrases and c["finish_reason"] == "stop" for c in r.json()["choices"])
    greedy_body = body | {"n": 1, "temperature": 0, "prompt": PROMPTS[0]}
    (offline,) = llm.generate(PROMPTS[0], SamplingParams(max_tokens=16, guided_choice=tuple(phrases)))
    assert http.post("/v1/completions", json=greedy_body).json()["choices"][0]["text"] == offline.text
    messages = [{"role": "user", "content": "Pick one."}]
    chat = http.post("/v1/chat/completions", json=body | {"messages": messages, "stream": True})
    chunks = [json.loads(line[6:]) for line in chat.text.splitlines() if line.startswith("data: {")]
    texts: dict[int, str] = {}
    for chunk in chunks:
        for c in chunk["choices"]:
            texts[c["index"]] = texts.get(c["index"], "") + (c["delta"].get("content") or "")
    assert sorted(texts) == [0, 1, 2, 3] and all(t in phrases for t in texts.values())
    newer = greedy_body | {"structured_outputs": {"choice": phrases, "json_object": False}}
    del newer["guided_choice"]  # vLLM's newer form of the same request
    assert http.post("/v1/completions", json=newer).json()["choices"][0]["text"] == offline.text


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_a_streamed_line_separator_leaves_each_event_one_line(served, route):
    """U+2028, U+2029 and U+0085 end a line for `str.splitlines`, and so for httpx's `iter_lines`
    (and the SSE readers built on it): raw in an event's JSON they cut it in two unparsable lines."""
    text = "a\u2028b\u2029c\u0085d"
    body = {"model": MODEL, "max_tokens": 16, "guided_choice": [text], "stream": True}
    body |= {"prompt": "Say it."} if route == "/v1/completions" else {"messages": [user("Say it.")]}
    with served.http().stream("POST", route, json=body) as r:
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines), lines
    choices = [c for line in lines[:-1] for c in json.loads(line[6:])["choices"]]
    assert "".join(c.get("text") or c.get("delta", {}).get("content") or "" for c in choices) == text


def test_score_route_equals_the_offline_api_and_shares_the_context(served, llm):
    candidates = [" Candidate one.", " Candidate two is longer.", " x"]
    http = served.http()
    body = {"model": MODEL, "context": CONTEXT, "candidates": candidates, "cache_salt": "score-test"}
    r = http.post("/v1/score", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    want = llm.score(CONTEXT, candidates, namespace="score-reference")
    assert got["object"] == "score" and [d["index"] for d in got["data"]] == [0, 1, 2]
    for d, w in zip(got["data"], want, strict=True):
        assert d["token_ids"] == list(w.token_ids) and d["total_logprob"] == pytest.approx(w.total, abs=1e-3)
        assert d["token_logprobs"] == pytest.approx(list(w.logprobs), abs=TOL)
        assert d["token_ranks"] == list(w.ranks) and d["greedy"] == w.greedy
        assert d["mean_logprob"] == pytest.approx(d["total_logprob"] / len(d["token_ids"]))
    context = llm.tokenizer.encode(CONTEXT)
    assert got["usage"]["prompt_tokens"] == sum(len(context) + len(d["token_ids"]) for d in got["data"])
    assert sorted(d["cached_tokens"] for d in got["data"])[1:] >= [len(context) // 16 * 16] * 2
    unstreamed = http.post("/v1/score", json=body | {"stream": False}).json()["data"]  # asks for nothing
    for d, first in zip(unstreamed, got["data"], strict=True):
        assert d["token_logprobs"] == pytest.approx(first["token_logprobs"], abs=TOL)
    by_ids = http.post("/v1/score", json=body | {"context": context, "candidates": [[5, 9], [7]]}).json()
    assert [d["token_ids"] for d in by_ids["data"]] == [[5, 9], [7]]
    assert all(d["cached_tokens"] >= len(context) // 16 * 16 for d in by_ids["data"])  # the context, cached
    messages = [{"role": "user", "content": "Pick one."}]
    chat = {"model": MODEL, "messages": messages, "candidates": candidates}
    replies = http.post("/v1/score", json=chat).json()["data"]
    offline = llm.score(messages, candidates, namespace="score-chat-reference")
    assert [d["total_logprob"] for d in replies] == pytest.approx([w.total for w in offline], abs=1e-3)


def test_score_route_takes_text_and_token_id_candidates_in_one_list_as_the_offline_api_does(served, llm):
    # it was a 400 ("a list of strings or a list of token-id lists"), where LLM.score and
    # `radixflow score --input` score such a list: each candidate is tokenized on its own anyway
    candidates = [" yes", [5, 9]]
    body = {"model": MODEL, "context": CONTEXT, "candidates": candidates, "cache_salt": "score-mixed"}
    r = served.http().post("/v1/score", json=body)
    assert r.status_code == 200, r.text
    want = llm.score(CONTEXT, candidates, namespace="score-mixed-reference")
    assert [d["token_ids"] for d in r.json()["data"]] == [list(w.token_ids) for w in want]
    assert [d["total_logprob"] for d in r.json()["data"]] == pytest.approx([w.total for w in want], abs=1e-3)


def test_a_failed_score_names_the_candidate_not_a_prompt(served):
    # a candidate that failed in the engine was "prompt 0: ..." where every other error of the
    # route names it "candidate 0: ..."
    def lost(batch: object) -> None:
        raise RuntimeError("device lost")

    served.on_engine(lambda e: setattr(e.runner, "run", lost))  # a failed round: the loop goes on
    try:
        body = {"model": MODEL, "context": "Hello there.", "candidates": [" a", " b"]}
        r = served.http().post("/v1/score", json=body)
    finally:
        served.on_engine(lambda e: delattr(e.runner, "run"))  # the class's own again
    error = r.json()["error"]
    assert r.status_code == 500 and error["message"].startswith("candidate 0: worker call failed"), error
    assert served.http().post("/v1/score", json=body).status_code == 200


@pytest.mark.parametrize(
    ("change", "param", "message"),
    [
        ({"context": ""}, "context", "context: is empty"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "context", "give exactly one of context and"),
        ({"context": None, "messages": []}, "messages", "messages must not be empty"),
        ({"candidates": []}, "candidates", "candidates: none given"),
        ({"candidates": ["a", ""]}, "candidates", "candidate 1: is empty"),
        ({"candidates": [[3, 600]]}, "candidates", "candidate 0: token id 600 is outside the"),
        ({"context": [3, 600], "candidates": [[3]]}, "context", "context: token id 600 is outside the"),
        ({"candidates": [" a"] * 65}, "candidates", "65 candidates in one request; the server queues 64"),
        ({"context": LONG_TEXT}, "context", "context: has at least"),  # refused before it is tokenized
        # a conversation is named as sent, as /v1/chat/completions names it (it said "context")
        ({"context": None, "messages": [user(LONG_TEXT)]}, "messages", "messages: has at least"),
        ({"context": None, "messages": [user("a " * 9000)]}, "messages", "messages: has"),
        ({"candidates": [" a", LONG_TEXT]}, "candidates", "candidate 1: has at least"),
        # the candidate's prompt (the context's tokens, then its own) too long: said in one sentence
        (
            {"context": [3] * 8000, "candidates": [[3], [3] * 300]},
            "candidates",
            "candidate 1: context + candidate has 8300 tokens; the model context is 8192",
        ),
        ({"context": [1, "a"]}, "context", "context must be a string or a list of token ids"),
        # the value sent, not the item pydantic first tripped on (it said "got 1", "got [1]")
        (
            {"candidates": [1]},
            "candidates",
            "candidates must be a list of strings or token-id lists, got [1]",
        ),
        (
            {"candidates": [[1], "a", [1.5]]},
            "candidates",
            'candidates must be a list of strings or token-id lists, got [[1], "a", [1.5]]',
        ),
        ({"candidates": "a"}, "candidates", "candidates must be a list of strings or token-id lists, got"),
        # the answer comes whole: a client reading server-sent events got one JSON body (ignored)
        ({"stream": True}, "stream", "stream: not implemented for /v1/score"),
        # a route of RadixFlow's own, which no OpenAI client sends extra fields to: a misspelt
        # field (the namespace's cache_salt, add_special_tokens) was ignored unsaid, where a
        # `score --input` line refuses it
        (
            {"cache-salt": "tenant-a"},
            "cache-salt",
            "unknown field 'cache-salt' (known: model, context, messages, candidates, add_special_tokens,"
            " cache_salt)",
        ),
        # for a text context only: with a conversation the flag was ignored unsaid
        (
            {"context": None, "messages": [user("hi")], "add_special_tokens": True},
            "add_special_tokens",
            "add_special_tokens: not implemented with messages",
        ),
    ],
)
def test_bad_score_input_is_a_one_line_400(served, change, param, message):
    body = {"model": MODEL, "context": "Hello there.", "candidates": [" a", " b"]} | change
    r = served.http().post("/v1/score", json=body)
    error = r.json()["error"]
    assert r.status_code == 400 and error["message"].startswith(message), error
    assert "\n" not in error["message"] and error["param"] == param


def test_a_choice_the_tokenizer_refuses_is_a_400_naming_it_not_a_500(served):
    # the JSON parser refuses a lone surrogate first; past it, the refusal is still the field's
    params = SamplingParams(max_tokens=2, guided_choice=("fine", "a\ud800"))
    with pytest.raises(ApiError) as refused:
        served.server.state.requests([[5, 6]], params, "default")
    assert refused.value.status == 400 and refused.value.param == "guided_choice"
    assert refused.value.message.startswith("guided_choice: item 1: text contains a lone UTF-16 surrogate")


def test_chat_uses_the_template_and_equals_the_offline_api(served, llm):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What boils at 100?"}]
    client = served.client()
    r = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=6,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
        extra_body={"ignore_eos": True},
    )
    (out,) = llm.chat(messages, greedy(6, logprobs=2))
    assert r.choices[0].message.content == out.text and r.choices[0].message.role == "assistant"
    content = r.choices[0].logprobs.content
    assert [c.logprob for c in content] == pytest.approx([e.logprob for e in out.logprobs], abs=TOL)
    assert all(len(c.top_logprobs) == 2 for c in content)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=6,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    deltas = [c.choices[0].delta for c in stream]
    assert deltas[0].role == "assistant"
    assert "".join(d.content or "" for d in deltas) == out.text
    tokenized = served.http().post("/tokenize", json={"messages": messages}).json()
    assert tokenized["tokens"] == list(out.prompt_token_ids)


@pytest.mark.parametrize("max_tokens", [0, 1])
def test_echo_returns_the_prompt_tokens_as_tokenize_splits_them(served, max_tokens):
    http = served.http()
    tokenized = http.post("/tokenize", json={"prompt": PROMPTS[0], "return_token_strs": True}).json()
    r = served.client().completions.create(
        model=MODEL, prompt=PROMPTS[0], max_tokens=max_tokens, echo=True, logprobs=1, temperature=0
    )
    choice = r.choices[0]
    n = tokenized["count"]
    assert choice.text.startswith(PROMPTS[0]) and len(choice.logprobs.tokens) == n + max_tokens
    assert choice.logprobs.tokens[:n] == tokenized["token_strs"]
    assert choice.logprobs.token_logprobs[0] is None and choice.logprobs.top_logprobs[0] is None
    assert r.usage.prompt_tokens == n and r.usage.completion_tokens == max_tokens
    ids = served.client().completions.create(
        model=MODEL,
        prompt=PROMPTS[0],
        max_tokens=0,
        echo=True,
        logprobs=0,
        extra_body={"return_tokens_as_token_ids": True},
    )
    assert ids.choices[0].logprobs.tokens == [f"token_id:{t}" for t in tokenized["tokens"]]


def test_echo_logprobs_are_exact_whether_or_not_the_prompt_came_from_the_cache(served, llm):
    context = "A context only this test scores against. " + CONTEXT  # several whole blocks
    client = served.client()
    answers = [
        client.completions.create(
            model=MODEL,
            prompt=context + tail,
            max_tokens=0,
            echo=True,
            logprobs=2,
            extra_body={"return_tokens_as_token_ids": True},
        )
        for tail in (" Candidate A.", " Candidate B.")
    ]
    assert answers[0].usage.prompt_tokens_details.cached_tokens == 0
    assert answers[1].usage.prompt_tokens_details.cached_tokens >= 32  # the context was reused
    for answer, tail in zip(answers, (" Candidate A.", " Candidate B."), strict=True):
        # the offline reference computes every position: a namespace of its own, nothing cached
        (ref,) = llm.generate(context + tail, SamplingParams(max_tokens=0, prompt_logprobs=2), f"cold{tail}")
        assert ref.cached_tokens == 0 and ref.prompt_logprobs is not None and ref.prompt_logprobs[0] is None
        lp = answer.choices[0].logprobs
        assert lp.token_logprobs[0] is None
        expected = [e.logprob for e in ref.prompt_logprobs[1:]]  # type: ignore[union-attr]
        assert lp.token_logprobs[1:] == pytest.approx(expected, abs=TOL)
        for served_top, entry in zip(lp.top_logprobs[1:], ref.prompt_logprobs[1:], strict=True):
            assert entry is not None
            expected_top = {f"token_id:{t}": v for t, v in (*entry.top[:2], (entry.token, entry.logprob))}
            assert served_top.keys() == expected_top.keys()
            assert list(served_top.values()) == pytest.approx(list(expected_top.values()), abs=TOL)


def test_seeded_sampling_is_reproducible_and_equals_the_offline_api(served, llm):
    params = {"temperature": 0.9, "top_p": 0.95, "seed": 1234, "max_tokens": 10}
    r = served.client().completions.create(
        model=MODEL, prompt=[PROMPTS[2], PROMPTS[2]], extra_body={"ignore_eos": True}, **params
    )
    (out,) = llm.generate(
        PROMPTS[2], SamplingParams(max_tokens=10, temperature=0.9, top_p=0.95, seed=1234, ignore_eos=True)
    )
    # same seed, same tokens, whatever else shares the round
    assert r.choices[0].text == r.choices[1].text == out.text
    (greedy_out,) = llm.generate(PROMPTS[2], greedy(10))
    sampled = [SamplingParams(max_tokens=10, temperature=0.9, seed=s, ignore_eos=True) for s in (1, 2, 3)]
    other_seed = [o.text for o in llm.generate([PROMPTS[2]] * 3, sampled)]
    assert len({out.text, greedy_out.text, *other_seed}) > 1  # sampling does sample


def test_n_choices_equal_the_offline_api_and_count_each_prompt_once(served, llm):
    client, prompts = served.client(), [PROMPTS[0], PROMPTS[2]]
    sampled = SamplingParams(max_tokens=6, temperature=0.9, seed=5, ignore_eos=True, n=2)
    offline = llm.generate(prompts, sampled)
    params = {"max_tokens": 6, "temperature": 0.9, "seed": 5, "n": 2, "extra_body": {"ignore_eos": True}}
    r = client.completions.create(model=MODEL, prompt=prompts, **params)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]  # prompt * n + choice, as OpenAI orders them
    assert [c.text for c in r.choices] == [o.text for o in offline]
    assert r.usage.prompt_tokens == len(offline[0].prompt_token_ids) + len(offline[2].prompt_token_ids)
    assert r.usage.completion_tokens == 24
    chunks = list(client.completions.create(model=MODEL, prompt=prompts, stream=True, echo=True, **params))
    texts: dict[int, str] = {}
    for chunk in chunks:
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
    assert texts == {i: prompts[i // 2] + o.text for i, o in enumerate(offline)}  # echo: its own prompt
    convo = [{"role": "user", "content": PROMPTS[2]}]
    chat_offline = llm.chat(convo, replace(sampled, max_tokens=4))
    four = {**params, "max_tokens": 4}
    chat = client.chat.completions.create(model=MODEL, messages=convo, **four)
    assert [(c.index, c.message.content) for c in chat.choices] == [(o.choice, o.text) for o in chat_offline]
    assert chat.usage.prompt_tokens == len(chat_offline[0].prompt_token_ids)
    stream = client.chat.completions.create(
        model=MODEL, messages=convo, stream=True, **{**params, "max_tokens": 4}
    )
    roles, contents, finishes = {}, {0: "", 1: ""}, {}
    for chunk in stream:
        (c,) = chunk.choices
        roles.setdefault(c.index, c.delta.role)  # each choice opens with its role
        contents[c.index] += c.delta.content or ""
        finishes[c.index] = c.finish_reason
    assert roles == {0: "assistant", 1: "assistant"} and finishes == {0: "length", 1: "length"}
    assert contents == {o.choice: o.text for o in chat_offline}
    served.wait_idle()
    served.on_engine(lambda e: e.check_integrity())


def test_logit_bias_and_penalties_equal_the_offline_api(served, llm):
    (plain,) = llm.generate(PROMPTS[2], greedy(8))
    banned = plain.token_ids[0]
    asked = {
        "logit_bias": {str(banned): -100, "7": 3.5},
        "presence_penalty": 0.8,
        "frequency_penalty": 0.4,
        "repetition_penalty": 1.3,
    }
    r = served.client().completions.create(
        model=MODEL, prompt=PROMPTS[2], max_tokens=8, temperature=0, extra_body={"ignore_eos": True, **asked}
    )
    params = {**asked, "logit_bias": {banned: -100, 7: 3.5}}
    (offline,) = llm.generate(PROMPTS[2], greedy(8, **params))
    assert r.choices[0].text == offline.text and banned not in offline.token_ids
    assert offline.token_ids != plain.token_ids


def test_chat_logprob_bytes_are_each_tokens_own_even_inside_a_character(llm):
    tok = llm.tokenizer
    text = "é🙂"
    ids = tok.encode(text, add_special_tokens=False)
    texts = token_texts(tok, ids)
    assert "" in texts  # a token that ends inside a character has no text of its own
    entries = [TokenLogprob(t, s, -1.0, ((t, -1.0),)) for t, s in zip(ids, texts, strict=True)]
    content = chat_logprobs(entries, 1, TokenNames(tok, as_ids=False))["content"]
    assert all(c["bytes"] for c in content)
    assert bytes(b for c in content for b in c["bytes"]) == text.encode("utf-8")
    assert [c["top_logprobs"][0]["bytes"] for c in content] == [c["bytes"] for c in content]


def test_chat_logprob_bytes_over_http_with_tokens_as_ids(served, llm):
    r = served.http().post(
        "/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": "Say café, naïve, 日本語."}],
            "max_tokens": 8,
            "logprobs": True,
            "top_logprobs": 2,
            "return_tokens_as_token_ids": True,
            "ignore_eos": True,
        },
    )
    content = r.json()["choices"][0]["logprobs"]["content"]
    entries = [*content, *(top for c in content for top in c["top_logprobs"])]
    assert len(entries) == 8 * 3
    for entry in entries:
        token = int(entry["token"].removeprefix("token_id:"))
        assert entry["bytes"] == list(llm.tokenizer.token_bytes(token))


def test_tokenize_then_detokenize_round_trips(served):
    http = served.http()
    text = "naïve café 🙂 <|im_start|>user\nhi<|im_end|> 12345"
    tokenized = http.post("/tokenize", json={"model": MODEL, "prompt": text}).json()
    assert http.post("/detokenize", json={"tokens": tokenized["tokens"]}).json() == {"prompt": text}
    info = http.get("/tokenizer_info").json()
    assert info["vocab_size"] == 512 and info["eos_token"] and "im_start" in info["chat_template"]
    assert tokenized["max_model_len"] == info["model_max_length"]


def test_cache_salts_never_share_a_prefix(served):
    client = served.client()
    prompt = "A prompt no other test sends. " + CONTEXT * 2  # several whole blocks

    def cached(salt: str | None) -> int:
        extra = {} if salt is None else {"cache_salt": salt}
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, extra_body=extra)
        return r.usage.prompt_tokens_details.cached_tokens

    assert cached("tenant-a") == 0
    assert cached("tenant-a") > 0  # the same tenant reuses its own prefix
    assert cached("tenant-b") == 0
    assert cached(None) == 0  # nor with requests that name no salt
    assert cached(None) > 0
    long_a, long_b = "s" * 100_000 + "a", "s" * 100_000 + "b"  # kept by their digests
    assert cached(long_a) == 0
    assert cached(long_a) > 0
    assert cached(long_b) == 0
    names = served.on_engine(lambda e: [ns for ns, _ in e.cache.tree.named_roots()])
    assert max(len(ns) for ns in names) < 100  # a cached namespace's name is short however long the salt


def test_the_served_model_is_retrieved_and_no_other(served):
    """``client.models.retrieve`` (``GET /v1/models/{id}``) was a 404 for the model served."""
    card = served.client().models.retrieve(MODEL)
    assert card.id == MODEL and card.object == "model"
    assert card.model_dump() == served.client().models.list().data[0].model_dump()
    with pytest.raises(openai.NotFoundError) as e:
        served.client().models.retrieve("gpt-17")
    assert e.value.response.json()["error"]["code"] == "model_not_found"
    r = served.http().get("/v1/models/org/gpt-17")  # a Hugging Face id has a slash
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"
    listed = served.http(follow_redirects=True).get("/v1/models/")  # a slash too many: the list
    assert listed.status_code == 200 and listed.json()["object"] == "list"


def test_metrics_answer_openmetrics_to_a_scraper_that_asks_for_it(served):
    # /metrics answered Prometheus' text format whatever the scraper's Accept said: one that
    # negotiates OpenMetrics (exemplars, `_created` series, the `# EOF` end marker) got the other
    http = served.http()
    asked = "application/openmetrics-text; version=1.0.0; charset=utf-8"
    r = http.get("/metrics", headers={"Accept": asked})
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    assert r.text.endswith("# EOF\n") and "radixflow_rounds_total" in r.text
    plain = http.get("/metrics")
    assert plain.headers["content-type"].startswith("text/plain") and not plain.text.endswith("# EOF\n")


def test_models_health_and_metrics(served):
    http = served.http()
    models = served.client().models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert http.get("/health").status_code == 200
    from radixflow.package import package_version

    assert http.get("/version").json() == {"version": package_version()}
    served.client().completions.create(model=MODEL, prompt=PROMPTS[2], max_tokens=2)
    text = http.get("/metrics").text
    metrics = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if not line.startswith("#")
    }
    assert metrics["radixflow_rounds_total"] > 0
    assert metrics['radixflow_requests_total{outcome="finished"}'] > 0
    assert metrics["radixflow_generation_tokens_total"] > 0
    assert metrics["radixflow_time_to_first_token_seconds_count"] > 0
    assert metrics["radixflow_e2e_request_latency_seconds_count"] > 0
    for name in (
        "bubble_tokens_total",
        "blocked_consumers_total",
        "reuse_rate",
        "requests_waiting",
        "requests_running",
        "requests_pending",
        "tokens_per_second",
        "cache_namespaces",
        "cache_budget_bytes",
        'cache_bytes{kind="kv"}',
        'cache_bytes{kind="checkpoint"}',
        'cache_bytes{kind="working"}',
        'cache_evictions_total{kind="kv"}',
        'cache_evictions_total{kind="checkpoint"}',
    ):
        assert f"radixflow_{name}" in metrics


def test_the_engine_forgets_answered_requests_and_keeps_a_bounded_round_history(served):
    served.wait_idle()
    kept = served.on_engine(lambda e: (len(e.requests), e.rounds.maxlen))
    assert kept[0] == 0 and kept[1] is not None
    served.on_engine(lambda e: e.check_integrity())
    assert json.dumps(kept)


def offline_echo_body(llm: LLM, prompt: str, max_tokens: int, k: int | None) -> tuple[str, dict | None]:
    """What an echoed completion says, built from the offline API's entry objects (one per
    position, each with its text): the prompt's tokens, then the generated ones."""
    params = greedy(max_tokens, logprobs=k, prompt_logprobs=k)
    (out,) = llm.generate(prompt, params, "echo-reference")  # nothing cached: every position computed
    texts = token_texts(llm.tokenizer, out.prompt_token_ids)
    text = "".join(texts) + out.text
    if k is None:
        return text, None
    names = TokenNames(llm.tokenizer, as_ids=False)
    body: dict[str, list] = {name: [] for name in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
    prompt_entries = list(out.prompt_logprobs or ())
    rows = [(t, s, e) for t, s, e in zip(out.prompt_token_ids, texts, prompt_entries, strict=True)]
    rows += [(e.token, e.text, e) for e in out.logprobs or ()]
    offset = 0
    for token, piece, entry in rows:
        body["tokens"].append(names.name(token, piece))
        body["token_logprobs"].append(None if entry is None else entry.logprob)
        top = None
        if entry is not None:
            top = {}
            for t, v in (*entry.top[:k], (entry.token, entry.logprob)):
                top.setdefault(names.name(t, piece if t == token else None), v)  # as ``tokens`` names it
        body["top_logprobs"].append(top)
        body["text_offset"].append(offset)
        offset += len(piece)
    return text, body


def assert_same_body(served: dict | None, expected: dict | None) -> None:
    if expected is None:
        assert served is None
        return
    assert served is not None
    assert served["tokens"] == expected["tokens"] and served["text_offset"] == expected["text_offset"]
    got, want = served["token_logprobs"], expected["token_logprobs"]
    assert [g is None for g in got] == [w is None for w in want]
    assert [g for g in got if g is not None] == pytest.approx([w for w in want if w is not None], abs=TOL)
    for g, w in zip(served["top_logprobs"], expected["top_logprobs"], strict=True):
        assert (g is None and w is None) or (
            g.keys() == w.keys() and list(g.values()) == pytest.approx(list(w.values()), abs=TOL)
        )


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("max_tokens", "k"), [(0, 2), (3, 0), (2, None)])
def test_echo_bodies_equal_the_ones_built_from_offline_entries(served, llm, stream, max_tokens, k):
    """Echo, plain or streamed, with or without logprobs: built from the runner's columns at
    answer time, the body is the one the offline entries give."""
    prompt = PROMPTS[1]
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "echo": True, "temperature": 0}
    body |= {"ignore_eos": True, "stream": stream} | ({} if k is None else {"logprobs": k})
    r = served.http().post("/v1/completions", json=body)
    assert r.status_code == 200
    if stream:
        chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        choices = [c["choices"][0] for c in chunks if c["choices"]]
        text = "".join(c["text"] for c in choices)
        parts = [c["logprobs"] for c in choices if c["logprobs"] is not None]
        merged = {key: [x for p in parts for x in p[key]] for key in parts[0]} if parts else None
    else:
        (choice,) = r.json()["choices"]
        text, merged = choice["text"], choice["logprobs"]
    want_text, want_body = offline_echo_body(llm, prompt, max_tokens, k)
    assert text == want_text
    assert_same_body(merged, want_body)


def vllm_prompt_entries(out, k: int, names: TokenNames) -> list[dict | None]:
    """vLLM's ``prompt_logprobs`` built from the offline API's entry objects (one per position)."""
    body: list[dict | None] = []
    for e in out.prompt_logprobs:
        if e is None:
            body.append(None)
            continue
        ranked = {str(e.token): (e.logprob, e.rank, names.name(e.token, e.text))}
        for i, (t, v) in enumerate(e.top[:k]):
            ranked.setdefault(str(t), (v, i + 1, names.name(t)))
        body.append(ranked)
    return body


def assert_same_prompt_entries(served: list, expected: list) -> None:
    assert len(served) == len(expected) and served[0] is None and expected[0] is None
    for got, want in zip(served[1:], expected[1:], strict=True):
        assert got.keys() == want.keys()
        for key, (logprob, rank, text) in want.items():
            assert got[key]["logprob"] == pytest.approx(logprob, abs=TOL)
            assert (got[key]["rank"], got[key]["decoded_token"]) == (rank, text)


@pytest.mark.parametrize("k", [0, 3])
def test_vllm_prompt_logprobs_on_both_routes_equal_the_offline_entries(served, llm, k):
    """vLLM's ``prompt_logprobs``: on each completion choice (``n`` 2: both carry their prompt's),
    at the top of a chat body; the token itself with its rank and text, then the ``k`` likeliest."""
    http, names = served.http(), TokenNames(llm.tokenizer, as_ids=False)
    body = {"model": MODEL, "prompt": PROMPTS[:2], "max_tokens": 1, "temperature": 0, "n": 2}
    r = http.post("/v1/completions", json=body | {"prompt_logprobs": k, "seed": 3})
    assert r.status_code == 200, r.text
    offline = llm.generate(PROMPTS[:2], greedy(1, prompt_logprobs=k), "pl-reference")
    for c in r.json()["choices"]:
        out = offline[c["index"] // 2]
        assert len(c["prompt_logprobs"]) == len(out.prompt_token_ids)
        assert_same_prompt_entries(c["prompt_logprobs"], vllm_prompt_entries(out, k, names))
        entries, ids = c["prompt_logprobs"][1:], out.prompt_token_ids[1:]
        ranks = [e[str(t)]["rank"] for e, t in zip(entries, ids, strict=True)]
        assert all(isinstance(x, int) and x >= 1 for x in ranks)
    plain = http.post("/v1/completions", json=body).json()["choices"][0]
    assert "prompt_logprobs" not in plain  # only when asked: an OpenAI body stays as it was
    messages = [{"role": "user", "content": PROMPTS[2]}]
    chat = http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": messages, "max_tokens": 1, "temperature": 0, "prompt_logprobs": k},
    ).json()
    prompt = llm.tokenizer.encode(llm.tokenizer.chat.render(messages, True), add_special_tokens=False)
    (out,) = llm.generate([prompt], greedy(1, prompt_logprobs=k), "pl-chat-reference")
    assert len(chat["prompt_logprobs"]) == chat["usage"]["prompt_tokens"] == len(prompt)
    assert_same_prompt_entries(chat["prompt_logprobs"], vllm_prompt_entries(out, k, names))


FUZZ_TEXTS = ["hello", "héllo wörld 🎉", CONTEXT, "\n\n", "0123456789"]
FUZZ_VALID = {
    "max_tokens": [1, 3, 8],
    "temperature": [0, 0.7, 2.0],
    "top_p": [0.5, 1.0],
    "top_k": [1, 5, -1],
    "seed": [0, 7],
    "stop": ["a", ["\n", "x"], ["e", "the"]],
    "stream": [False, True, True],
    "ignore_eos": [True],
    "stream_options": [{"include_usage": True}],
    "n": [2],
    "presence_penalty": [0.5, -1],
    "frequency_penalty": [1.0],
    "logit_bias": [{"7": 5}],
    "min_p": [0.05],
    "allowed_token_ids": [[5, 9, 40, 101]],
    "include_stop_str_in_output": [True],
    "guided_choice": [["yes", "no"], ["a b c", "a", "hello"]],  # with an allow-list: a one-line 400
    "bad_words": [["the"], ["a", " b c"]],
    "truncate_prompt_tokens": [4, -1],
    "prompt_logprobs": [0, 2],  # in a stream: a one-line 400, as vLLM's
}
# one of these makes a request invalid: each must be refused with a one-line 400
FUZZ_INVALID = [
    ("max_tokens", -1),
    ("max_tokens", 2.5),
    ("temperature", -1),
    ("top_p", 1.5),
    ("seed", -3),
    ("n", 0),
    ("best_of", 3),
    ("presence_penalty", 3),
    ("logit_bias", {"x": 1}),
    ("allowed_token_ids", []),
    ("prompt_logprobs", 21),
    ("model", "nope"),
    ("messages", []),
    ("messages", "hi"),
    ("prompt", [10**9]),
]


def fuzz_body(rng: random.Random, chat: bool) -> dict:
    """A valid request body, or (three times in ten) one with a single invalid field."""
    body: dict = {"model": MODEL}
    if chat:
        body["messages"] = [{"role": "user", "content": rng.choice(FUZZ_TEXTS)}]
    else:
        body["prompt"] = rng.choice([rng.choice(FUZZ_TEXTS), [rng.randrange(3, 300) for _ in range(12)]])
        body.update({"echo": True, "logprobs": 2} if rng.random() < 0.2 else {})
    body.update({k: rng.choice(v) for k, v in FUZZ_VALID.items() if rng.random() < 0.35})
    if rng.random() < 0.3:
        key, value = rng.choice([kv for kv in FUZZ_INVALID if kv[0] != ("prompt" if chat else "messages")])
        body[key] = value
    return body


def fuzz_score_body(rng: random.Random) -> dict:
    """A `/v1/score` body: text or ids around, some candidates empty, mistyped or outside the vocabulary."""
    context: object = rng.choice([rng.choice(FUZZ_TEXTS), [rng.randrange(3, 300) for _ in range(20)], "", []])
    pool = [" yes", " no", "", "héllo 🎉", [5, 9], [600], 7]
    candidates = [rng.choice(pool) for _ in range(rng.randrange(0, 5))]
    if all(isinstance(c, str) for c in candidates) or all(isinstance(c, list) for c in candidates):
        return {"model": MODEL, "context": context, "candidates": candidates}
    return {"model": MODEL, "context": context, "candidates": candidates[:1]}


def fuzz_one(url: str, rng: random.Random) -> list[str]:
    """One random request (a stream may be cut after its first events); what went wrong."""
    chat = rng.random() < 0.5
    path, body = ("/v1/chat/completions" if chat else "/v1/completions"), fuzz_body(rng, chat)
    if rng.random() < 0.2:
        path, body = "/v1/score", fuzz_score_body(rng)
    with httpx.Client(base_url=url, timeout=120) as client:
        if body.get("stream"):
            with client.stream("POST", path, json=body) as r:
                lines = []
                for line in r.iter_lines():
                    lines.append(line)
                    if rng.random() < 0.2:
                        break  # the client goes away mid-stream: the server must abort, not leak
                status, text = r.status_code, "\n".join(lines)
        else:
            r = client.post(path, json=body)
            status, text = r.status_code, r.text
    if status == 200:
        return []
    # 404: the invalid model "nope" (model_not_found, as OpenAI answers it); any seed may pick it
    message = json.loads(text)["error"]["message"] if status in (400, 404, 422) else ""
    return [] if status in (400, 404, 422) and "\n" not in message else [f"{status} {body} {text[:200]}"]


def test_random_concurrent_requests_are_answered_or_refused_and_leave_nothing_locked(served):
    # waves of concurrent completions and chats, valid and not, some streams cut by the client:
    # every answer is a 200 or a one-line 400; then the engine goes idle with nothing locked
    rng = random.Random(0)
    for _ in range(4):
        rngs = [random.Random(rng.random()) for _ in range(8)]
        with ThreadPoolExecutor(len(rngs)) as pool:
            problems = [p for ps in pool.map(lambda g: fuzz_one(served.url, g), rngs) for p in ps]
        assert problems == []
    served.wait_idle()
    usage = served.on_engine(lambda e: e.cache.usage())
    assert usage.locked_blocks == 0 and usage.working_slots == 0
    served.on_engine(lambda e: e.check_integrity())
    with served.http() as http:
        answer = http.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2})
        assert answer.status_code == 200


def _namespaces_gauge(running: RunningServer) -> float:
    lines = running.http().get("/metrics").text.splitlines()
    return float(next(line.split(" ")[1] for line in lines if line.startswith("radixflow_cache_namespaces ")))


def test_unique_cache_salts_leave_a_bounded_number_of_namespaces(zoo):
    """Every request names a new salt: once answered, a namespace that cached nothing is gone and
    the rest are bounded by the KV capacity (evicted with their last block), as /metrics shows."""
    kv_blocks = 24
    options = EngineOptions(model=MODEL, kv_blocks=kv_blocks, state_slots=16, token_budget=256)
    with running_server(ServerConfig(), options) as running:
        client = running.client()

        def ask(salt: str, prompt: str) -> None:
            client.completions.create(
                model=MODEL, prompt=prompt, max_tokens=1, extra_body={"cache_salt": salt}
            )

        for i in range(12):  # under one block: nothing to cache
            ask(f"short-{i}", "Hi.")
        running.wait_idle()
        assert running.on_engine(lambda e: e.cache.namespaces) == 0
        assert _namespaces_gauge(running) == 0
        for i in range(3 * kv_blocks):  # a few blocks each: the cache fills, then evicts
            ask(f"long-{i}", CONTEXT + f"Candidate {i}.")
        running.wait_idle()
        held = running.on_engine(lambda e: e.cache.namespaces)
        assert 0 < held <= kv_blocks // 2
        assert _namespaces_gauge(running) == held
        running.on_engine(lambda e: e.check_integrity())


def _metrics(running: RunningServer) -> dict[str, float]:
    lines = running.http().get("/metrics").text.splitlines()
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in lines if not line.startswith("#")}


def test_metrics_show_the_budget_in_use_and_evictions_by_kind(zoo):
    """Under a byte budget the cache fills and evicts: /metrics shows the bytes in use by kind
    within the budget, and the evictions by kind as they happen."""
    from radixflow.options import plan_engine

    entry = plan_engine(EngineOptions(model=MODEL)).choice.entry_bytes(16)
    budget = 24 * entry.block + 2 * entry.slot
    options = EngineOptions(model=MODEL, cache_memory=str(budget), token_budget=256)
    with running_server(ServerConfig(), options) as running:
        client = running.client()
        for i in range(24):  # distinct prompts of a few blocks each: the budget fills, then evicts
            client.completions.create(
                model=MODEL,
                prompt=CONTEXT + f"Candidate {i}.",
                max_tokens=1,
                extra_body={"cache_salt": f"s{i}"},
            )
        running.wait_idle()
        metrics = _metrics(running)
        used = sum(metrics[f'radixflow_cache_bytes{{kind="{k}"}}'] for k in ("kv", "checkpoint", "working"))
        assert metrics["radixflow_cache_budget_bytes"] == budget
        assert 0 < used <= budget and metrics['radixflow_cache_bytes{kind="working"}'] == 0
        evicted = running.on_engine(lambda e: e.cache.evictions())
        assert evicted["kv"] > 0
        for kind, n in evicted.items():
            assert metrics[f'radixflow_cache_evictions_total{{kind="{kind}"}}'] == n
        running.on_engine(lambda e: e.check_integrity())


def test_health_and_metrics_say_when_the_engine_is_stuck_with_work_waiting(tmp_path):
    # an engine thread alive but stuck in a worker call passed /health, so a load balancer kept
    # sending it requests that waited until the drain; /metrics had no figure to alert on
    import threading
    import time
    from dataclasses import replace

    from engine_utils import new_engine
    from fastapi.testclient import TestClient

    from radixflow.generation.tokenizer import TextTokenizer
    from radixflow.generation.tracker import RequestTracker
    from radixflow.models.io.tokenizer import save_tokenizer, train_tokenizer
    from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
    from radixflow.scheduler.request import Request
    from radixflow.scheduler.scheduler import SchedulerConfig
    from radixflow.server.app import create_app
    from radixflow.server.liveness import Liveness
    from radixflow.server.loop import EngineLoop
    from radixflow.server.state import Backend, ServerState

    save_tokenizer(train_tokenizer(512), tmp_path)
    tokenizer = TextTokenizer.load(tmp_path)
    release = threading.Event()

    class Stuck(SimRunner):
        def run(self, batch):
            release.wait()
            return super().run(batch)

    spec = replace(SIM_MODELS["qwen3_5-2b"], vocab_size=512, max_context=4096)
    cfg = SchedulerConfig(token_budget=64, max_requests=8, block_size=8, num_blocks=512, num_state_slots=32)
    engine = new_engine(Stuck(spec, HARDWARE["h100"]), cfg)
    backend = Backend(
        "m",
        None,
        engine.runner.model,
        engine.problem,
        engine.room,
        lambda metrics: EngineLoop(engine, metrics, 8, Liveness(0.05, first_round_s=0.05)),
    )
    state = ServerState(backend, ServerConfig(drain_s=0.0))

    def since_last_round(http) -> float:
        lines = http.get("/metrics").text.splitlines()
        return float(next(x for x in lines if x.startswith("radixflow_seconds_since")).split(" ")[1])

    with TestClient(create_app(state)) as http:
        try:  # the stuck call ends before the app does (its shutdown waits for the engine thread)
            assert http.get("/health").json() == {"status": "ok"}  # idle: however long since a round
            req = Request("r", (5, 6, 7, 8), sampling=SamplingParams(max_tokens=2))
            state.loop.submit([(req, RequestTracker(req, tokenizer))], lambda event: None, False)
            deadline = time.monotonic() + 30
            while (health := http.get("/health")).status_code == 200:
                assert time.monotonic() < deadline, "/health never said the engine is stuck"
                time.sleep(0.01)
            assert health.status_code == 503 and "no round finished" in health.json()["status"]
            assert since_last_round(http) >= 0.05
            released = time.monotonic()
            release.set()
            while http.get("/health").status_code != 200:  # answered: idle again
                assert time.monotonic() < deadline + 30, "/health never recovered"
                time.sleep(0.01)
            assert since_last_round(http) <= time.monotonic() - released  # rounds finished since
        finally:
            release.set()


@pytest.mark.parametrize("bad", [float("-inf"), float("nan")])
def test_a_non_finite_score_logprob_is_the_finite_stand_in_not_a_500(bad):
    # the other routes answer -9999 for a logprob JSON cannot hold; /v1/score passed it to
    # Starlette, which refuses non-finite numbers: a 500
    from fastapi.responses import JSONResponse

    from radixflow.generation.scoring import CandidateScore
    from radixflow.server.responses.logprobs import NEG_INF_LOGPROB
    from radixflow.server.score import entry

    got = entry(CandidateScore(0, (5, 6), (-0.5, bad), (1, 7), cached_tokens=0))
    body = json.loads(JSONResponse({"data": [got]}).body)["data"][0]
    assert body["token_logprobs"] == [-0.5, NEG_INF_LOGPROB]
    assert body["total_logprob"] == NEG_INF_LOGPROB and body["mean_logprob"] == NEG_INF_LOGPROB


def test_an_allow_list_of_only_ending_tokens_with_min_tokens_is_refused_at_every_door(served, llm):
    # it answered one token, finish_reason "stop": min_tokens silently broken (vLLM would sample
    # from a distribution with nothing left in it); a one-line refusal naming both fields
    (eos, *_) = llm.engine.runner.model.eos_token_ids
    said = "allowed_token_ids: every allowed token ends the output (a stop or end-of-sequence token id), "
    ending = (({"allowed_token_ids": [eos]}, 2), ({"allowed_token_ids": [42], "stop_token_ids": [42]}, 1))
    for change, n in ending:
        body = {"model": MODEL, "prompt": PROMPTS[2], "max_tokens": 3, "min_tokens": n, **change}
        r = served.http().post("/v1/completions", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == "allowed_token_ids", r.text
        assert r.json()["error"]["message"] == said + f"so min_tokens {n} cannot be met"
        params = SamplingParams(max_tokens=3, min_tokens=n, **{k: tuple(v) for k, v in change.items()})
        with pytest.raises(ValueError, match="^" + re.escape(said + f"so min_tokens {n} cannot be met")):
            llm.generate(PROMPTS[2], params)
    # an EOS ignored does not end it, and an ending token beside another is only held back
    for change in ({"ignore_eos": True}, {"allowed_token_ids": [eos, 42]}):
        body = {"model": MODEL, "prompt": PROMPTS[2], "max_tokens": 3, "min_tokens": 2}
        r = served.http().post("/v1/completions", json=body | {"allowed_token_ids": [eos]} | change)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 2, r.text
