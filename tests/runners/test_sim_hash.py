"""The sim runner's cached token hash (`PrefixHashes`) is `sim_token` exactly, and a decode step
hashes only its last block again."""

from __future__ import annotations

import random

from radixflow.runners.sim import sim_token
from radixflow.runners.sim_hash import PrefixHashes

VOCAB = 151_936


def test_every_length_around_the_blocks_is_sim_token():
    hashes = PrefixHashes(block=4, capacity=64)
    seq = tuple(random.Random(1).randrange(VOCAB) for _ in range(13))
    for n in range(len(seq) + 1):  # the empty sequence, partial and whole blocks, twice each
        for _ in range(2):
            assert hashes.token("default", seq[:n], VOCAB) == sim_token("default", seq[:n], VOCAB), n


def test_namespaces_shared_prefixes_and_evictions_change_nothing():
    rng = random.Random(2)
    hashes = PrefixHashes(block=3, capacity=5)  # far fewer states than the prefixes seen: evicts
    context = [rng.randrange(VOCAB) for _ in range(10)]
    for i in range(60):
        namespace = rng.choice(["default", "é|ns", "a,b"])
        tokens = context[: rng.randrange(11)] + [rng.randrange(VOCAB) for _ in range(rng.randrange(8))]
        for seq in (tokens, tuple(tokens)):  # a list or a tuple, as a chunk carries
            assert hashes.token(namespace, seq, VOCAB) == sim_token(namespace, tuple(seq), VOCAB), i
        assert len(hashes) <= 5


def test_a_decode_step_keeps_at_most_one_new_state():
    hashes = PrefixHashes(block=8, capacity=1000)
    seq = tuple(range(100, 140))
    hashes.digest("default", seq)
    held = len(hashes)  # the namespace's state and one per whole block
    assert held == 1 + len(seq) // 8
    for n in range(len(seq) + 1, len(seq) + 20):
        seq += (n,)
        hashes.digest("default", seq)
        # none: each step resumes from the state after the step before (one end state is kept)
        assert len(hashes) == held and len(hashes._ends._states) == 1


def test_each_runner_keeps_its_own_states_and_decodes_sim_tokens():
    # one store per runner, not one per process: nothing a run leaves moves another's memory
    from engine_utils import new_engine

    from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
    from radixflow.scheduler import Request, SchedulerConfig
    from radixflow.scheduler.sampling import SamplingParams

    cfg = SchedulerConfig(token_budget=128, max_requests=4, block_size=8, num_blocks=64, num_state_slots=8)
    used, idle = (SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"]) for _ in range(2))
    prompt = tuple(range(1, 150))  # two whole blocks of the store's 64
    req = Request("r", prompt, sampling=SamplingParams(max_tokens=5, ignore_eos=True))
    new_engine(used, cfg).run([req])
    expected: list[int] = []
    for _ in range(5):
        expected.append(sim_token("default", prompt + tuple(expected), used.model.vocab_size))
    assert list(req.output) == expected
    assert len(used.hashes) == 3 and len(idle.hashes) == 0  # the namespace's state and two blocks


def test_a_copy_or_a_pickle_starts_empty_and_hashes_alike():
    # a deep-copied runner (the twin's replays) could not copy the lock or hashlib's states
    import copy
    import pickle

    hashes = PrefixHashes(block=4, capacity=64)
    seq = tuple(range(3, 20))
    hashes.digest("default", seq)
    for other in (copy.deepcopy(hashes), copy.copy(hashes), pickle.loads(pickle.dumps(hashes))):
        assert (len(other), other.block, other.capacity) == (0, 4, 64)
        assert other.token("default", seq, VOCAB) == sim_token("default", seq, VOCAB)


def test_sequences_decoded_side_by_side_are_sim_token_however_their_end_states_go():
    # the state after each sequence is kept by its last tokens, for its next decode step: here
    # sequences decode side by side, some alike up to a last token or in their last tokens (the
    # key finds another sequence's state), some hashed again, some skipping tokens, and the end
    # states kept are fewer than the sequences (dropped): each token is still `sim_token`'s
    rng = random.Random(3)
    hashes = PrefixHashes(block=4, capacity=16, end_tokens=100)
    suffix = [7] * 10  # every sequence ending in it shares the key's last tokens
    running = [[rng.randrange(5) for _ in range(rng.randrange(1, 9))] for _ in range(6)]
    for step in range(300):
        seq = rng.choice(running)
        token = [rng.randrange(5)]  # a decode step, mostly
        seq.extend(rng.choice([token, token, token, token, [], suffix[: rng.randrange(1, 10)], [1, 2]]))
        namespace = rng.choice(["default"] * 5 + ["b"])
        assert hashes.token(namespace, seq, VOCAB) == sim_token(namespace, tuple(seq), VOCAB), step
        if len(seq) > 30:
            seq[:] = seq[: rng.randrange(1, 6)]  # a new sequence, alike in its first tokens
        assert hashes._ends.held <= 100


def test_a_decode_step_resumes_from_the_state_after_the_step_before():
    hashes = PrefixHashes(block=4, capacity=64)
    seq = tuple(range(50, 70))
    hashes.digest("default", seq)
    walked = hashes._walk
    hashes._walk = None  # type: ignore[assignment]  # a walk would fail: none is made
    for n in range(5):
        seq += (n,)
        assert hashes.token("default", seq, VOCAB) == sim_token("default", seq, VOCAB)
    hashes._walk = walked  # type: ignore[method-assign]
    assert hashes.token("b", seq, VOCAB) == sim_token("b", seq, VOCAB)  # another namespace: walked
    # a sequence alike in its last tokens takes seq's key: seq's next step finds its end state
    # there, which the check refuses (a walk)
    other = (1,) + seq[1:]
    assert hashes.token("default", other, VOCAB) == sim_token("default", other, VOCAB)
    assert hashes.token("default", seq + (9,), VOCAB) == sim_token("default", seq + (9,), VOCAB)
