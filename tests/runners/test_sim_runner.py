"""The sim runner against a request's sampling rules: what it honours, what it refuses, and its picks
against the torch sampler's (the only test here that needs torch)."""

from __future__ import annotations

import math
import random

import pytest
from engine_utils import new_engine

from radixflow.engine.runner import ending_allow_list_problem
from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner, sim_pick, sim_token
from radixflow.runners.token_rules import token_rules
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.output import ScheduledChunk
from radixflow.scheduler.samples import FinishReason
from radixflow.scheduler.sampling import SamplingParams

RUNNER = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
VOCAB = RUNNER.model.vocab_size
CFG = SchedulerConfig(token_budget=128, max_requests=8, block_size=8, num_blocks=256, num_state_slots=32)
PROMPT = (1, 2, 3)
FIRST = sim_token("default", PROMPT, VOCAB)  # the sim's token after PROMPT when nothing forbids it


def run(**params: object) -> Request:
    req = Request("r", PROMPT, sampling=SamplingParams(**params))  # type: ignore[arg-type]
    new_engine(RUNNER, CFG).run([req])
    return req


def hash_chain(n: int) -> list[int]:
    out: list[int] = []
    for _ in range(n):
        out.append(sim_token("default", PROMPT + tuple(out), VOCAB))
    return out


def test_min_tokens_holds_back_a_stop_token_the_sim_would_pick():
    """The stop token was the sim's first pick: it ended the request at once, min_tokens unsaid."""
    assert run(max_tokens=5, stop_token_ids=(FIRST,)).output == [FIRST]
    req = run(max_tokens=5, min_tokens=3, stop_token_ids=(FIRST,))
    assert req.status is RequestStatus.FINISHED and len(req.output) >= 3
    assert FIRST not in req.output[:3]
    assert req.output[0] == (FIRST + 1) % VOCAB  # the sim's next preference: the id after its own


def test_allowed_token_ids_are_the_only_tokens_the_sim_picks():
    allowed = (7, 8, VOCAB - 1)
    req = run(max_tokens=6, allowed_token_ids=allowed)
    assert len(req.output) == 6 and set(req.output) <= set(allowed)


def test_an_allowed_sim_token_is_kept():
    assert run(max_tokens=1, allowed_token_ids=(5, FIRST)).output == [FIRST]


def test_token_choices_make_the_output_one_of_them():
    choices = ((7, 8), (9,), (7, 10, 11))
    req = run(max_tokens=8, token_choices=choices)
    assert tuple(req.output) in choices and req.finish_reason is FinishReason.STOP


def test_a_whole_choice_a_longer_one_extends_goes_on_without_an_end_of_sequence_token():
    """The sim has no end-of-sequence token: after (7,) it can only go on to (7, 8)."""
    req = run(max_tokens=8, token_choices=((7,), (7, 8)))
    assert req.output == [7, 8] and req.finish_reason is FinishReason.STOP


def test_a_banned_token_is_never_picked():
    chain = hash_chain(3)
    req = run(max_tokens=3, bad_token_sequences=((chain[1],),))
    assert req.output[0] == chain[0] and chain[1] not in req.output


def test_a_banned_sequence_bans_its_last_token_only_after_the_rest():
    chain = hash_chain(2)
    req = run(max_tokens=2, bad_token_sequences=(tuple(chain),))
    assert req.output[0] == chain[0] and req.output[1] != chain[1]
    assert run(max_tokens=2, bad_token_sequences=((chain[1], chain[1]),)).output == chain


@pytest.mark.parametrize(
    "params",
    [
        {"temperature": 1.0, "seed": 3, "top_p": 0.5, "top_k": 4, "min_p": 0.1},
        {"logit_bias": {5: 100.0}, "presence_penalty": 2.0, "repetition_penalty": 1.5},
    ],
)
def test_settings_that_cannot_move_the_sims_point_mass_leave_its_tokens_alone(params):
    """The sim's model puts all its probability on `sim_token` (every other token at -inf):
    temperature, cuts, seeds, finite biases and penalties leave that token the only one."""
    assert run(max_tokens=4, **params).output == hash_chain(4)


@pytest.mark.parametrize("k", [0, 3])
def test_logprobs_are_refused_the_sim_computes_none(k):
    """The sim answered logprobs=k with logprob 0 and no alternatives: nothing computed."""
    req = run(max_tokens=2, logprobs=k)
    assert req.status is RequestStatus.FAILED
    assert req.error == "logprobs: the sim runner computes no logits: they need the torch runner"


def random_params(rng: random.Random, vocab: int) -> SamplingParams:
    ids = lambda k: tuple(rng.sample(range(vocab), k))  # noqa: E731
    allowed = ids(rng.randint(1, 4)) if rng.random() < 0.4 else None
    choices = (
        tuple(ids(rng.randint(1, 3)) for _ in range(rng.randint(1, 3)))
        if not allowed and rng.random() < 0.4
        else None
    )
    return SamplingParams(
        max_tokens=8,
        min_tokens=rng.choice([0, 0, 1, 3]),
        stop_token_ids=ids(rng.randint(0, 3)),
        ignore_eos=rng.random() < 0.3,
        allowed_token_ids=allowed,
        token_choices=choices,
        bad_token_sequences=tuple(ids(rng.randint(1, 2)) for _ in range(rng.randint(0, 3))),
    )


def test_the_sims_pick_is_the_torch_samplers_greedy_pick_on_logits_of_its_order():
    """Logits falling from the sim's token through the ids after it (wrapping) are the sim's
    order: greedy on them under the same rules, the torch sampler picks what `sim_pick` does
    (but where every token left is banned: the sampler's ties go to the lowest id)."""
    torch = pytest.importorskip("torch")
    from radixflow.runners.sampler import SampleRow, adjusted

    vocab, eos, rng, checked, moved = 24, (5,), random.Random(0), 0, 0
    for _ in range(400):
        params = random_params(rng, vocab)
        if params.problem() or ending_allow_list_problem(params, eos):
            continue
        tokens = tuple(rng.randrange(vocab) for _ in range(rng.randint(2, 6)))
        prompt_len = rng.randint(1, len(tokens))
        chunk = ScheduledChunk(
            "r", "ns", tokens, 0, len(tokens), (), None, (), True, params, None, prompt_len
        )
        rules = token_rules(params, tokens[prompt_len:], eos)
        left = set(range(vocab) if rules.only is None else rules.only) - rules.held
        if left <= rules.banned:
            continue
        first = sim_token("ns", tokens, vocab)
        logits = torch.tensor([[-float((t - first) % vocab) for t in range(vocab)]])
        row = SampleRow(params, len(tokens), tokens, prompt_len)
        pick = sim_pick(chunk, vocab, eos)
        assert pick == int(adjusted(logits, [row], eos).argmax()), params
        checked, moved = checked + 1, moved + (pick != first)
    assert checked > 250 and moved > 100  # the rules moved the pick off the sim's own token


def test_a_token_the_rules_forced_off_the_sims_own_has_no_probability():
    """Its sample said logprob 0 (probability 1) for a token the sim's model gives none."""
    forced = run(max_tokens=1, allowed_token_ids=((FIRST + 1) % VOCAB,))
    own = run(max_tokens=1, allowed_token_ids=(FIRST,))
    assert [s.logprob for s in forced.output_logprobs] == [-math.inf]
    assert [s.logprob for s in own.output_logprobs] == [0.0]


def test_a_bad_logprobs_value_is_said_as_every_runner_says_it():
    """logprobs=-1 was told it needs the torch runner, which refuses it as a bad value anyway."""
    req = run(max_tokens=2, logprobs=-1)
    torchless = SamplingParams(max_tokens=2, logprobs=-1).problem()
    assert torchless is not None and req.error == str(torchless)
