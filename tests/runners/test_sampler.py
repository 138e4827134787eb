"""Sampling: greedy, temperature, top-k, top-p, seeds; and seeded generation through the engine."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from engine_utils import new_engine
from model_utils import one_thread, zoo_model  # noqa: F401  (one_thread is a fixture)

from radixflow.runners.draw import draw
from radixflow.runners.sampler import MIN_TOP, Sampler, SampleRow, adjusted, row_seed
from radixflow.runners.torch_runner import TorchRunner
from radixflow.scheduler import Request, SchedulerConfig
from radixflow.scheduler.sampling import SamplingParams

VOCAB = 50
HOT = SamplingParams(temperature=1.0)


def logits_batch(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * 2


def test_a_temperature_below_1e_5_is_greedy_as_in_vllm():
    """temperature 1e-6 drew among the tokens tied for the best (greedy takes the first) and
    advanced the generator of unseeded requests; vLLM treats it as greedy."""
    logits = torch.zeros(20, VOCAB)
    logits[:, [3, 9]] = 5.0
    for t in (1e-6, 9.9e-6):
        assert SamplingParams(temperature=t).greedy
        rows = [SampleRow(replace(HOT, temperature=t, seed=s), 0) for s in range(20)]
        assert {s.token for s in Sampler().sample(logits, rows)} == {3}
    sampler = Sampler(seed=1)
    before = sampler.generator.get_state()
    sampler.sample(logits[:1], [SampleRow(replace(HOT, temperature=1e-6), 0)])
    assert torch.equal(sampler.generator.get_state(), before)
    assert not SamplingParams(temperature=1e-5).greedy  # from there on, a temperature samples


def test_greedy_reports_the_raw_distribution():
    logits = logits_batch(3)
    params = [SamplingParams(), SamplingParams(logprobs=8), SamplingParams(logprobs=2)]
    samples = Sampler().sample(logits, [SampleRow(p, 10) for p in params])
    logprobs = torch.log_softmax(logits, dim=-1)
    for s, row, p in zip(samples, logprobs, params, strict=True):
        assert s.token == int(row.argmax()) and s.logprob == pytest.approx(float(row.max()))
        vals, ids = row.topk(max(p.logprobs or 0, MIN_TOP))
        assert [t for t, _ in s.top] == ids.tolist()
        assert [v for _, v in s.top] == pytest.approx(vals.tolist())


def test_top_k_1_and_tiny_top_p_are_greedy():
    logits = logits_batch(8, seed=1)
    greedy = logits.argmax(-1).tolist()
    for params in (SamplingParams(temperature=2.0, top_k=1), SamplingParams(temperature=2.0, top_p=1e-6)):
        for seed in range(5):
            rows = [SampleRow(replace(params, seed=seed), 7)] * 8
            assert [s.token for s in Sampler().sample(logits, rows)] == greedy


@pytest.mark.parametrize("bad", [math.nan, math.inf])
@pytest.mark.parametrize("params", [SamplingParams(), replace(HOT, seed=1), replace(HOT, seed=1, top_p=0.5)])
def test_logits_no_token_can_be_sampled_from_are_refused_by_name(bad, params):
    """A row of the model's logits holding NaN or +inf (a dtype's overflow) was sampled greedily
    as token 0 (or the inf one) with a NaN logprob, and failed a drawn row's round on 'index -1
    is out of bounds'. Such a row names what is wrong instead."""
    logits = logits_batch(3, seed=4)
    logits[1, 7] = bad
    rows = [SampleRow(SamplingParams(), 0), SampleRow(params, 0), SampleRow(HOT, 0)]
    with pytest.raises(ValueError, match=r"logits are not finite in 1 of the round's 3 rows"):
        Sampler().sample(logits, rows)


def test_logprob_is_the_models_own_whatever_the_temperature():
    logits = logits_batch(1, seed=2)
    s = Sampler().sample(logits, [SampleRow(SamplingParams(temperature=5.0, seed=3), 0)])[0]
    assert s.logprob == pytest.approx(float(torch.log_softmax(logits[0], -1)[s.token]))


def test_seeded_rows_ignore_their_neighbours_and_the_draw_order():
    logits = logits_batch(4, seed=3)
    me = SampleRow(replace(HOT, seed=42), 17)
    alone = Sampler(seed=0).sample(logits[:1], [me])[0].token
    sampler = Sampler(seed=99)
    sampler.sample(logits, [SampleRow(HOT, 3)] * 4)  # advance the shared generator
    others = [SampleRow(HOT, 5), SampleRow(replace(HOT, seed=1), 17), SampleRow(replace(HOT, seed=42), 18)]
    batched = sampler.sample(torch.cat([logits[1:], logits[:1]]), [*others, me])[-1].token
    assert batched == alone
    # the seed is mixed with the position: the same seed draws differently along a sequence
    assert len({row_seed(42, p) for p in range(100)}) == 100 and row_seed(1, 0) != row_seed(0, 1)


def test_unseeded_rows_follow_the_sampler_generator():
    logits = logits_batch(6, seed=4)
    rows = [SampleRow(HOT, 9)] * 6
    a = [s.token for s in Sampler(seed=5).sample(logits, rows)]
    assert a == [s.token for s in Sampler(seed=5).sample(logits, rows)]
    assert any(a != [s.token for s in Sampler(seed=s).sample(logits, rows)] for s in range(6, 10))


def frequencies(probs: torch.Tensor, params: SamplingParams, n: int = 4000) -> torch.Tensor:
    logits = probs.log()[None].expand(n, -1)
    rows = [SampleRow(replace(params, seed=i), 0) for i in range(n)]
    tokens = torch.tensor([s.token for s in Sampler().sample(logits, rows)])
    return torch.bincount(tokens, minlength=len(probs)).float() / n


def test_distribution_temperature_top_k_and_top_p():
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1])
    # temperature 1: the model's distribution (4000 draws: 4 sigma is about 0.03)
    assert torch.allclose(frequencies(probs, HOT), probs, atol=0.03)
    # top_k 2: the two best, renormalised
    best_two = torch.tensor([4.0, 3.0, 0.0, 0.0]) / 7
    assert torch.allclose(frequencies(probs, replace(HOT, top_k=2)), best_two, atol=0.03)
    # top_p 0.5: the smallest set reaching 0.5 is {0, 1}; 0.75 needs {0, 1, 2}
    assert torch.allclose(frequencies(probs, replace(HOT, top_p=0.5)), best_two, atol=0.03)
    best_three = torch.tensor([4.0, 3.0, 2.0, 0.0]) / 9
    assert torch.allclose(frequencies(probs, replace(HOT, top_p=0.75)), best_three, atol=0.03)
    # temperature 2 flattens: p ** 0.5, renormalised; 0.25 sharpens towards the best token
    flat = probs.sqrt() / probs.sqrt().sum()
    assert torch.allclose(frequencies(probs, replace(HOT, temperature=2.0)), flat, atol=0.03)
    sharp = probs**4 / (probs**4).sum()
    assert torch.allclose(frequencies(probs, replace(HOT, temperature=0.25)), sharp, atol=0.03)


def test_top_k_keeps_exactly_k_tokens_ties_at_the_kth_broken_by_token_id():
    # as SamplingParams documents it (vLLM keeps every token tied with the k-th)
    logits = torch.full((400, VOCAB), -5.0)
    logits[:, [30, 4, 17, 9]] = torch.tensor([2.0, 1.0, 1.0, 1.0])
    rows = [SampleRow(replace(HOT, top_k=2, seed=i), 0) for i in range(200)]
    rows += [SampleRow(replace(HOT, top_k=3, top_p=0.99, seed=i), 0) for i in range(200)]
    tokens = [s.token for s in Sampler().sample(logits, rows)]
    assert set(tokens[:200]) == {30, 4} and set(tokens[200:]) == {30, 4, 9}


def test_zero_probability_tokens_are_never_drawn():
    logits = torch.full((200, VOCAB), -math.inf)
    logits[:, 7], logits[:, 30] = 0.0, 1.0
    rows = [SampleRow(replace(HOT, seed=i), 0) for i in range(200)]
    assert {s.token for s in Sampler().sample(logits, rows)} == {7, 30}


# ---------------------------------------------------------------------------------------------
# Through the engine on a real (tiny) model

CFG = SchedulerConfig(token_budget=128, max_requests=8, block_size=16, num_blocks=64, num_state_slots=32)


@pytest.fixture(scope="module")
def runner(tmp_path_factory, one_thread):  # noqa: F811
    path = zoo_model(tmp_path_factory, "qwen3_5-tiny")
    return TorchRunner(path, CFG.block_size, CFG.num_blocks, CFG.num_state_slots)


def generate(runner: TorchRunner, reqs: list[Request]) -> dict[str, list[int]]:
    engine = new_engine(runner, CFG)
    engine.run(reqs)
    return {r.id: r.output for r in engine.requests}


def prompt(runner: TorchRunner, seed: int, n: int = 20) -> tuple[int, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(3, runner.model.vocab_size, (n,), generator=g).tolist())


def test_same_seed_same_tokens_alone_or_batched(runner):
    params = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.9, seed=1234, ignore_eos=True)
    mine = prompt(runner, 1)
    alone = generate(runner, [Request("me", mine, sampling=params)])["me"]
    crowd = [
        Request("x", prompt(runner, 2), sampling=replace(params, seed=None)),
        Request("me", mine, sampling=params, arrival_s=1e-9),  # joins a round already decoding
        Request("y", mine, sampling=replace(params, seed=99)),
        Request("z", prompt(runner, 3, 40), sampling=replace(params, temperature=0.0)),
    ]
    batched = generate(runner, crowd)
    assert batched["me"] == alone and len(alone) == 16
    assert batched["y"] != alone  # another seed, another continuation of the same prompt
    assert generate(runner, [Request("me", mine, sampling=replace(params, seed=1235))])["me"] != alone


def test_top_k_1_through_the_engine_is_greedy(runner):
    mine = prompt(runner, 4)
    greedy = SamplingParams(max_tokens=12, ignore_eos=True)
    greedy_out = generate(runner, [Request("g", mine, sampling=greedy)])["g"]
    hot = replace(greedy, temperature=1.5, top_k=1)
    assert generate(runner, [Request("k", mine, sampling=hot)])["k"] == greedy_out


def reference_adjusted(
    row: list[float], params: SamplingParams, tokens: list[int], prompt_len: int
) -> list[float]:
    """The adjustments written out one logit at a time: bias, repetition, frequency, presence."""
    out = list(row)
    for token, bias in params.logit_bias:
        out[token] += bias
    for token in set(tokens):
        r = params.repetition_penalty
        out[token] = out[token] / r if out[token] > 0 else out[token] * r
    generated = tokens[prompt_len:]
    for token in set(generated):
        out[token] -= params.frequency_penalty * generated.count(token) + params.presence_penalty
    return out


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(logit_bias=((3, 5.0), (7, -100.0))),
        SamplingParams(repetition_penalty=1.7),
        SamplingParams(repetition_penalty=0.6),
        SamplingParams(frequency_penalty=0.5),
        SamplingParams(presence_penalty=-1.25),
        SamplingParams(
            frequency_penalty=2.0, presence_penalty=2.0, repetition_penalty=1.2, logit_bias=((9, 1.5),)
        ),
    ],
)
def test_bias_and_penalties_are_applied_as_written(params):
    logits = logits_batch(2, seed=4)
    tokens = (1, 2, 2, 9, 3, 9, 9, 40)  # a prompt of 4, then 4 generated (9 twice among them)
    rows = [SampleRow(params, 8, tokens, 4), SampleRow(SamplingParams(), 8, tokens, 4)]
    out = adjusted(logits, rows)
    expected = reference_adjusted(logits[0].tolist(), params, list(tokens), 4)
    assert out[0].tolist() == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert torch.equal(out[1], logits[1])  # a row without adjustments is left alone
    plain = logits[1:]
    assert adjusted(plain, rows[1:]) is plain  # no row adjusts: no copy


def test_a_bias_picks_the_token_while_the_reported_logprobs_stay_the_models():
    logits = logits_batch(1, seed=2)
    worst = int(logits[0].argmin())
    (sample,) = Sampler().sample(logits, [SampleRow(SamplingParams(logit_bias=((worst, 100.0),)), 5)])
    raw = torch.log_softmax(logits[0], dim=-1)
    assert sample.token == worst and sample.logprob == pytest.approx(float(raw[worst]))
    assert sample.top[0][0] == int(raw.argmax())  # the model's own best, not the biased one
    banned = int(logits[0].argmax())
    (other,) = Sampler().sample(logits, [SampleRow(SamplingParams(logit_bias=((banned, -100.0),)), 5)])
    assert other.token != banned


# an integer past int64 (LLM takes one; the round failed on it: "OverflowError: int too big")
PENALTIES = [1.6e-130, 1e-30, 1e30, 1e300, 2**64, 10**300]


@pytest.mark.parametrize("penalty", PENALTIES, ids=["1.6e-130", "1e-30", "1e30", "1e300", "2**64", "10**300"])
@pytest.mark.parametrize("params", [SamplingParams(), HOT, replace(HOT, top_p=0.5), replace(HOT, top_k=3)])
def test_an_extreme_penalty_still_picks_a_token(penalty, params):
    # every token seen, logits of both signs: the penalty sends some past float32's range
    logits = logits_batch(2, seed=6)
    rows = [SampleRow(replace(params, repetition_penalty=penalty, seed=1), 60, tuple(range(VOCAB)), 10)] * 2
    samples = Sampler().sample(logits, rows)
    assert all(0 <= s.token < VOCAB and math.isfinite(s.logprob) for s in samples)


def test_biases_given_as_a_mapping_are_kept_as_pairs_and_checked():
    params = SamplingParams(logit_bias={3: 1.5, 9: -100})
    assert params.logit_bias == ((3, 1.5), (9, -100)) and params.problem() is None and hash(params)
    assert str(SamplingParams(logit_bias={3: 101}).problem()) == (
        "logit_bias: token 3's bias must be a number in [-100, 100], got 101"
    )
    assert str(SamplingParams(logit_bias={"3": 1}).problem()) == "logit_bias: keys must be token ids, got '3'"


def test_a_token_biased_twice_is_refused_not_summed_past_the_range():
    # two pairs for one token would add up (100 + 100), past the range each is checked against
    twice = SamplingParams(logit_bias=((3, 100.0), (9, 1.0), (3, 100.0)))
    assert str(twice.problem()) == "logit_bias: token 3 is given twice"


def test_min_tokens_hold_back_stop_and_eos_tokens_until_reached():
    logits = logits_batch(1, seed=8)
    best = int(logits[0].argmax())
    held = SamplingParams(min_tokens=3, stop_token_ids=(best,))
    prompt = (1, 2, 3)
    for generated, allowed in ((0, False), (2, False), (3, True)):
        tokens = prompt + (7,) * generated
        row = SampleRow(held, len(tokens), tokens, len(prompt))
        (sample,) = Sampler(eos_token_ids=(4,)).sample(logits, [row])
        assert (sample.token == best) is allowed, generated
    eos_first = logits.clone()
    eos_first[0, 4] = 50.0  # the model's end-of-sequence token is by far the best
    row = SampleRow(SamplingParams(min_tokens=2), 3, prompt, 3)
    assert Sampler(eos_token_ids=(4,)).sample(eos_first, [row])[0].token != 4
    ignoring = SampleRow(SamplingParams(min_tokens=2, ignore_eos=True), 3, prompt, 3)
    assert Sampler(eos_token_ids=(4,)).sample(eos_first, [ignoring])[0].token == 4  # EOS ends nothing then


@pytest.mark.parametrize("params", [SamplingParams(), HOT, replace(HOT, top_p=0.3), replace(HOT, top_k=2)])
def test_only_allowed_tokens_are_picked_and_the_reported_logprobs_stay_the_models(params):
    logits = logits_batch(3, seed=9)
    worst = [int(row.argmin()) for row in logits]
    allowed = (worst[0], worst[1], 17, 17)  # the least likely tokens and one more, one twice
    rows = [SampleRow(replace(params, allowed_token_ids=allowed, seed=s), 40) for s in range(3)]
    raw = torch.log_softmax(logits, dim=-1)
    for _ in range(20 if not params.greedy else 1):
        for i, s in enumerate(Sampler().sample(logits, rows)):
            assert s.token in allowed and s.logprob == pytest.approx(float(raw[i, s.token]))
            assert s.top[0][0] == int(raw[i].argmax())  # the model's own best, whatever was allowed
        rows = [replace(r, position=r.position + 1) for r in rows]
    greedy = SampleRow(SamplingParams(allowed_token_ids=allowed), 5)
    best_allowed = max(set(allowed), key=lambda t: float(logits[0, t]))
    assert Sampler().sample(logits[:1], [greedy])[0].token == best_allowed


def test_allowed_tokens_that_are_all_held_back_by_min_tokens_stay_pickable():
    """min_tokens holds back stop and EOS tokens, unless they are every allowed token: a row
    always has a token to pick."""
    logits = logits_batch(1, seed=10)
    prompt = (1, 2, 3)
    only_stops = SamplingParams(min_tokens=3, stop_token_ids=(8,), allowed_token_ids=(8, 4))
    row = SampleRow(only_stops, 3, prompt, 3)
    assert Sampler(eos_token_ids=(4,)).sample(logits, [row])[0].token in (8, 4)
    one_more = replace(only_stops, allowed_token_ids=(8, 4, 11))
    assert Sampler(eos_token_ids=(4,)).sample(logits, [SampleRow(one_more, 3, prompt, 3)])[0].token == 11


def test_allowed_token_ids_are_checked():
    assert SamplingParams(allowed_token_ids=[3, 5]).allowed_token_ids == (3, 5)
    for bad in ([], ["3"], [True], 7):
        assert str(SamplingParams(allowed_token_ids=bad).problem()).startswith(
            "allowed_token_ids: must be a non-empty list of ids"
        )


@pytest.mark.parametrize("params", [SamplingParams(), HOT, replace(HOT, top_k=1)])
def test_token_choices_pick_only_what_continues_a_choice(params):
    logits = logits_batch(1, seed=11)
    choices = ((5, 9), (5, 9, 40), (21,))
    prompt = (1, 2, 3)
    eos = (int(logits[0].argmax()),)  # the model's favourite: an end-of-sequence token here
    picked: dict[tuple[tuple[int, ...], bool], set[int]] = {}
    sampler = Sampler(eos_token_ids=eos)
    for generated in ((), (5,), (5, 9)):
        for ignore in (False, True):
            p = replace(params, token_choices=choices, ignore_eos=ignore)
            for seed in range(12):
                row = SampleRow(replace(p, seed=seed), 3 + len(generated), prompt + generated, 3)
                picked.setdefault((generated, ignore), set()).add(sampler.sample(logits, [row])[0].token)
    assert picked[((), False)] <= {5, 21} and picked[((), True)] <= {5, 21}
    assert picked[((5,), False)] == picked[((5,), True)] == {9}
    # a whole choice that a longer one extends: the end-of-sequence may end it, unless ignored
    assert picked[((5, 9), False)] <= {40, eos[0]} and picked[((5, 9), True)] == {40}
    if params.greedy or params.top_k == 1:
        assert picked[((5, 9), False)] == {eos[0]}


@pytest.mark.parametrize("params", [SamplingParams(), HOT])
def test_a_choice_a_banned_sequence_is_inside_is_never_started(params):
    logits = logits_batch(1, seed=11)
    logits[0, 5] = 60.0  # the best by far: the start of the choice (5, 9), whose 9 is banned after 5
    choices = ((5, 9), (21,))
    p = replace(params, token_choices=choices, bad_token_sequences=((5, 9),))
    for seed in range(12):
        row = SampleRow(replace(p, seed=seed), 3, (1, 2, 3), 3)
        assert Sampler().sample(logits, [row])[0].token == 21


@pytest.mark.parametrize("params", [SamplingParams(), HOT, replace(HOT, top_k=3)])
def test_a_banned_sequence_is_never_completed(params):
    logits = logits_batch(1, seed=12)
    best = int(logits[0].argmax())
    banned = ((best,), (3, 4, 9))
    prompt = (1, 2)
    sampler = Sampler()
    for generated in ((), (3, 4), (4, 3)):
        p = replace(params, bad_token_sequences=banned)
        picks = set()
        for seed in range(12):
            row = SampleRow(replace(p, seed=seed), 2 + len(generated), prompt + generated, 2)
            picks.add(sampler.sample(logits, [row])[0].token)
        assert best not in picks
        if generated == (3, 4):
            assert 9 not in picks
    boosted = logits.clone()
    boosted[0, 9] = 60.0  # the best by far: picked unless (3, 4) came just before
    for generated, allowed in (((3, 4), False), ((4, 3), True), ((3, 4, 1), True)):
        row = SampleRow(SamplingParams(bad_token_sequences=banned), 2 + len(generated), prompt + generated, 2)
        assert (sampler.sample(boosted, [row])[0].token == 9) is allowed


@pytest.mark.parametrize("temperature", [1e38, 1e39, 1e300])
def test_a_banned_token_stays_impossible_at_any_temperature(temperature):
    """A banned token sits at float32's lowest logit (pickable only when nothing else is): a
    temperature past 1e36 scaled even that into exp's range (-3.4e38 / 3.4e38 = -1), and a
    banned token was drawn beside the others."""
    logits = -1 - logits_batch(1, seed=13).abs()  # every logit below 0: nothing overflows
    p = replace(HOT, temperature=temperature, max_tokens=4, bad_token_sequences=((3,),))
    u = (torch.arange(2000, dtype=torch.float64) + 0.5) / 2000
    rows = [SampleRow(p, 2, (1, 2), 2)] * len(u)
    picked = draw(adjusted(logits.expand(len(u), -1), rows), [p] * len(u), u)
    assert 3 not in picked.tolist() and len(set(picked.tolist())) == VOCAB - 1
