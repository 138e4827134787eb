"""Fork history: where a namespace's requests fork, and where a lone request should checkpoint."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from radixflow.scheduler.forks import ForkHistory


def test_no_history_predicts_nothing_and_namespaces_are_apart():
    forks = ForkHistory()
    assert forks.predict("a", 544, 16) is None
    forks.observe("b", 544, 512)
    assert forks.predict("a", 544, 16) is None
    assert forks.predict("b", 544, 16) == 512


def test_the_prediction_serves_most_tokens_of_past_forks_not_the_longest_tail():
    forks = ForkHistory()
    for _ in range(6):
        forks.observe("ns", 544, 512)  # candidates of 32 tokens after a shared context
    forks.observe("ns", 544, 16)  # a first candidate sharing only a system prompt
    forks.observe("ns", 544, 0)  # an unrelated request
    assert forks.predict("ns", 544, 16) == 512
    # a longer prompt keeps the tail, so its checkpoint moves with its end (floored to a block)
    assert forks.predict("ns", 1000, 16) == 960


def test_a_request_sharing_nothing_counts_against_no_position():
    forks = ForkHistory()
    forks.observe("ns", 100, 0)
    assert forks.predict("ns", 100, 16) == 0  # history, but nowhere worth a checkpoint
    forks.observe("ns", 100, 64)
    assert forks.predict("ns", 100, 16) == 64


def test_a_tail_longer_than_the_prompt_gives_no_position():
    forks = ForkHistory()
    forks.observe("ns", 1000, 900)  # tail 100
    assert forks.predict("ns", 100, 16) == 0
    assert forks.predict("ns", 116, 16) == 16


def test_history_is_bounded_per_namespace_and_in_namespaces():
    forks = ForkHistory(per_namespace=3, namespaces=2)
    for _ in range(3):
        forks.observe("ns", 544, 16)
    for _ in range(3):  # the old tails are forgotten: only the recent ones decide
        forks.observe("ns", 544, 512)
    assert forks.predict("ns", 544, 16) == 512
    forks.observe("other", 10, 5)
    forks.observe("ns", 544, 512)  # "ns" seen more recently than "other"
    forks.observe("third", 10, 5)  # evicts "other", the namespace seen least recently
    assert forks.predict("other", 10, 1) is None
    assert forks.predict("ns", 544, 16) == 512


def _gain(tails: list[int], prompt_len: int, pos: int) -> int:
    return pos * sum(1 for t in tails if t <= prompt_len - pos)


def _by_definition(tails: list[int], prompt_len: int, block: int) -> int:
    """The block boundary maximising position × tails it serves, the earliest on a tie."""
    best, best_gain = 0, 0
    for pos in range(block, prompt_len + 1, block):
        if _gain(tails, prompt_len, pos) > best_gain:
            best, best_gain = pos, _gain(tails, prompt_len, pos)
    return best


@given(
    st.lists(st.integers(0, 300), min_size=1, max_size=40),
    st.integers(1, 400),
    st.sampled_from([1, 4, 16]),
    st.integers(1, 12),
)
@settings(max_examples=300, deadline=None)
def test_prediction_matches_its_definition_with_repeated_tails_and_a_full_history(
    tails: list[int], prompt_len: int, block: int, size: int
):
    forks = ForkHistory(per_namespace=size)
    for tail in tails:
        forks.observe("ns", 1000, 1000 - tail)
    kept = tails[-size:]
    predicted = forks.predict("ns", prompt_len, block)
    expected = _by_definition(kept, prompt_len, block)
    # equal gains at two positions: either is the best; both serve the same tokens
    same = predicted > 0 and _gain(kept, prompt_len, predicted) == _gain(kept, prompt_len, expected)
    assert predicted == expected or same
