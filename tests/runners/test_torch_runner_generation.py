"""Greedy generation through the engine equals transformers' ``generate``, token for token.

For every family's tiny zoo preset and for the real SmolLM2-135M, under the three policies: prompts
sharing a prefix decode 32 tokens side by side in one engine; a later wave reuses the cached
prefix, and a follow-up turn reuses the decoded conversation's tail checkpoint. transformers
runs each prompt alone with its own plain DynamicCache (no prefix caching on its side).
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest
import torch
from engine_utils import drive, new_engine
from model_utils import ZOO_PARITY, needs_smollm2, one_thread, zoo_model  # noqa: F401  (a fixture)

from radixflow.runners.torch_runner import TorchRunner
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.samples import FinishReason
from radixflow.scheduler.sampling import SamplingParams

transformers = pytest.importorskip("transformers")

CFG = SchedulerConfig(token_budget=96, max_requests=8, block_size=16, num_blocks=96, num_state_slots=32)
N = 32
TAILS = (5, 11, 27)  # first-wave prompts: the shared prefix plus this many tokens
GREEDY = SamplingParams(max_tokens=N, ignore_eos=True)
TOL = 1e-4  # our logprobs against transformers'


class Pair:
    """Our runner and transformers' model on one checkpoint; transformers' outputs memoized."""

    def __init__(self, name: str, path) -> None:
        self.name = name
        self.runner = TorchRunner(path, CFG.block_size, CFG.num_blocks, CFG.num_state_slots)
        self.ref = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
        self._generated: dict[tuple[int, ...], list[int]] = {}
        self._runs: dict[str, tuple[list[Request], list[Request]]] = {}

    def conversation(self, policy: str) -> tuple[list[Request], list[Request]]:
        if policy not in self._runs:
            self._runs[policy] = shared_prefix_conversation(self.runner, policy)
        return self._runs[policy]

    def generate(self, prompt: tuple[int, ...]) -> list[int]:
        if prompt not in self._generated:
            with torch.no_grad():
                ids = torch.tensor([prompt])  # eos_token_id None: 32 tokens, like ignore_eos
                out = self.ref.generate(
                    ids, max_new_tokens=N, do_sample=False, eos_token_id=None, pad_token_id=0
                )
            self._generated[prompt] = out[0, len(prompt) :].tolist()
        return self._generated[prompt]


@pytest.fixture(scope="module", params=ZOO_PARITY)
def pair(request, tmp_path_factory, one_thread):  # noqa: F811
    return Pair(request.param, zoo_model(tmp_path_factory, request.param))


def random_tokens(vocab: int, n: int, g: torch.Generator) -> tuple[int, ...]:
    return tuple(torch.randint(3, vocab, (n,), generator=g).tolist())


def shared_prefix_conversation(runner: TorchRunner, policy: str) -> tuple[list[Request], list[Request]]:
    """Three prompts on one 37-token prefix at once; then a fourth on it, and a follow-up turn."""
    g = torch.Generator().manual_seed(7)
    vocab = runner.model.vocab_size
    prefix = random_tokens(vocab, 37, g)
    first = [
        Request(f"a{i}", prefix + random_tokens(vocab, n, g), sampling=GREEDY) for i, n in enumerate(TAILS)
    ]
    engine = new_engine(runner, CFG, policy=policy)
    drive(engine, first)
    a0 = first[0]
    later = [
        Request("late", prefix + random_tokens(vocab, 9, g), sampling=GREEDY),
        Request("turn2", a0.prompt + tuple(a0.output) + random_tokens(vocab, 3, g), sampling=GREEDY),
    ]
    drive(engine, later)
    return first, later


def comparable(req: Request) -> int:
    """How many of ``req``'s tokens must equal transformers': all up to its first near-tie (a
    top-1 margin within 2 * TOL, where either side's rounding may pick the other token; after it
    the two continue from different contexts)."""
    margins = [s.top[0][1] - s.top[1][1] for s in req.output_logprobs]
    return next((i for i, m in enumerate(margins) if m <= 2 * TOL), len(req.output))


@pytest.mark.parametrize("policy", ["native", "radixflow", "adaptive"])
def test_greedy_32_tokens_equal_transformers_generate(pair, policy):
    first, later = pair.conversation(policy)
    for req in first + later:
        assert req.status is RequestStatus.FINISHED and req.finish_reason is FinishReason.LENGTH
        n = comparable(req)
        assert req.output[:n] == pair.generate(req.prompt)[:n], req.id
    late, turn2 = later
    assert late.reused >= CFG.block_size  # the prefix came from the cache
    assert turn2.reused > len(first[0].prompt)  # ...and the follow-up reused decoded tokens too
    margins = [s.top[0][1] - s.top[1][1] for r in first + later for s in r.output_logprobs]
    print(
        f"{pair.name} {policy}: {len(margins)} tokens, top-1 margin min {min(margins):.2e} "
        f"median {statistics.median(margins):.3f}"
    )


def test_every_output_logprob_matches_transformers(pair):
    """The logprob and top-5 reported with each generated token are transformers' own."""
    req = pair.conversation("radixflow")[1][1]  # the follow-up turn: its context came from the cache
    with torch.no_grad():
        logits = pair.ref(torch.tensor([req.sequence[:-1]])).logits[0, len(req.prompt) - 1 :].float()
    expected = torch.log_softmax(logits, dim=-1)
    worst = 0.0
    for sample, row, token in zip(req.output_logprobs, expected, req.output, strict=True):
        vals, ids = row.topk(5)
        assert len(sample.top) == 5 and sample.top[0][0] == sample.token == token
        assert token == int(ids[0]) or float(vals[0] - vals[1]) <= 2 * TOL  # the same but at a near-tie
        diffs = [abs(sample.logprob - float(row[token]))]
        diffs += [abs(v - float(e)) for (_, v), e in zip(sample.top, vals, strict=True)]
        worst = max(worst, *diffs)
    assert worst <= TOL
    print(f"{pair.name}: output logprobs max |Δ| vs transformers {worst:.2e}")


def test_repetition_penalty_equals_transformers_generate(pair):
    """Greedy under a repetition penalty: our tokens are transformers' own (its rule over the
    prompt and the output so far), two prompts on a shared prefix decoding side by side."""
    g = torch.Generator().manual_seed(11)
    vocab = pair.runner.model.vocab_size
    prefix = random_tokens(vocab, 20, g)
    penalized = replace(GREEDY, max_tokens=16, repetition_penalty=1.3)
    reqs = [Request(f"r{n}", prefix + random_tokens(vocab, n, g), sampling=penalized) for n in (3, 9)]
    drive(new_engine(pair.runner, CFG, policy="adaptive"), reqs)
    for req in reqs:
        with torch.no_grad():
            kw = {"max_new_tokens": 16, "do_sample": False, "eos_token_id": None, "pad_token_id": 0}
            out = pair.ref.generate(torch.tensor([req.prompt]), repetition_penalty=1.3, **kw)
        assert req.output == out[0, len(req.prompt) :].tolist(), req.id


@needs_smollm2
def test_chat_answer_stops_at_eos_like_transformers(tmp_path_factory, one_thread):  # noqa: F811
    """SmolLM2-Instruct answers a chat turn and ends it with <|im_end|>, its EOS."""
    from tokenizers import Tokenizer

    path = zoo_model(tmp_path_factory, "smollm2-135m")
    runner = TorchRunner(path, CFG.block_size, CFG.num_blocks, CFG.num_state_slots)
    assert runner.model.eos_token_ids == (2,)
    text = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    prompt = tuple(Tokenizer.from_file(str(path / "tokenizer.json")).encode(text).ids)
    req = Request("chat", prompt, sampling=SamplingParams(max_tokens=N))
    drive(new_engine(runner, CFG), [req])
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    with torch.no_grad():
        expected = ref.generate(torch.tensor([prompt]), max_new_tokens=N, do_sample=False)[0, len(prompt) :]
    assert req.finish_reason is FinishReason.STOP and req.output[-1] == 2 and len(req.output) < N
    n = comparable(req)
    assert req.output[:n] == expected.tolist()[:n]
