"""Routers' choices: deepest checkpoint wins, imbalance overrides affinity, new contexts are placed
where their siblings follow, a KV/text hit without a READY checkpoint does not count."""

from __future__ import annotations

import pytest

from radixflow.cache import RadixCache
from radixflow.cache.digest import CheckpointDigest, chain_hashes
from radixflow.fleet import (
    AFFINITY,
    BALANCE,
    LOAD,
    PLACEMENT,
    ReplicaState,
    RouterConfig,
    RouteRequest,
    make_router,
)
from radixflow.problems import ProblemError

BS = 4
CTX = tuple(range(100, 132))  # 8 blocks
PROMPT = CTX + (1, 2, 3, 4, 5)


def digest_at(tokens: tuple[int, ...], *blocks: int) -> CheckpointDigest:
    chain = chain_hashes("n", tokens, BS, max(blocks))
    return CheckpointDigest(BS, frozenset(chain[b - 1] for b in blocks))


def replica(name: str, queue: int = 0, digest: CheckpointDigest | None = None) -> ReplicaState:
    return ReplicaState(name, queue, digest or CheckpointDigest(BS, frozenset()))


def route(router, replicas, tokens=PROMPT):
    return router.choose(RouteRequest("n", tokens), replicas)


def test_deepest_ready_checkpoint_wins():
    router = make_router("checkpoint", RouterConfig(block_size=BS))
    fleet = [replica("a", 1, digest_at(PROMPT, 2)), replica("b", 1, digest_at(PROMPT, 8)), replica("c", 0)]
    d = route(router, fleet)
    assert (d.replica, d.reason, d.depth) == ("b", AFFINITY, 32)


def test_a_checkpoint_the_prompt_cannot_use_does_not_count():
    other = CTX[:8] + (7,) * 24  # shares two blocks with PROMPT, then diverges
    router = make_router("checkpoint", RouterConfig(block_size=BS))
    fleet = [replica("a", 0, digest_at(other, 8)), replica("b", 0, digest_at(PROMPT, 2)), replica("c", 0)]
    assert route(router, fleet).replica == "b"


def test_imbalance_overrides_affinity():
    router = make_router("checkpoint", RouterConfig(block_size=BS, imbalance_ratio=1.5, imbalance_slack=2))
    hot = replica("a", 20, digest_at(PROMPT, 8))
    fleet = [hot, replica("b", 2, digest_at(PROMPT, 2)), replica("c", 1)]
    d = route(router, fleet)
    assert (d.replica, d.reason, d.depth) == ("b", BALANCE, 8)  # the next deepest, not just any
    # within the threshold affinity holds
    fleet = [replica("a", 4, digest_at(PROMPT, 8)), replica("b", 2), replica("c", 1)]  # 4 <= mean + 2
    assert route(make_router("checkpoint"), fleet).replica == "a"


def test_new_context_is_placed_and_its_siblings_follow():
    router = make_router("checkpoint", RouterConfig(block_size=BS, seed=3))
    fleet = [replica("a", 2), replica("b", 0), replica("c", 1)]
    first = route(router, fleet)
    assert (first.replica, first.reason) == ("b", PLACEMENT)  # the least loaded
    # a sibling arrives before any checkpoint is READY: it follows, though b is now busier
    fleet = [replica("a", 1), replica("b", 2), replica("c", 1)]
    sibling = route(router, fleet, CTX + (9, 9, 9, 9, 9))
    assert (sibling.replica, sibling.reason, sibling.depth) == ("b", AFFINITY, 32)


def test_a_kv_hit_without_a_ready_checkpoint_does_not_count():
    """Replica a holds the prompt's KV (it served the same text) but no checkpoint; b holds a
    READY checkpoint at the shared context. `prefix` follows the text; `checkpoint` the state."""
    cache_a, cache_b = RadixCache(BS, 64, 8), RadixCache(BS, 64, 8)
    blocks = cache_a.alloc_blocks(9)
    cache_a.extend("n", PROMPT, 0, 36, blocks, [], "r")  # KV only
    cache_a.commit("r")
    cache_b.extend("n", PROMPT, 0, 16, cache_b.alloc_blocks(4), [16], "r")
    cache_b.commit("r")
    fleet = [replica("a", 0, cache_a.ready_digest()), replica("b", 0, cache_b.ready_digest())]
    assert route(make_router("checkpoint"), fleet).replica == "b"

    prefix = make_router("prefix", RouterConfig(block_size=BS))
    prefix.choose(RouteRequest("n", PROMPT), [replica("a", 0)])  # it sent this text to a before
    d = route(prefix, fleet)
    assert (d.replica, d.reason) == ("a", AFFINITY)


def test_on_an_attention_only_model_the_kv_of_a_shared_context_counts():
    # a: an attention-only replica that served PROMPT (its KV, no checkpoint: none is needed);
    # a sibling sharing the context resumes there from its 32 tokens of KV, yet the router saw
    # depth 0 (the digest named only where a's run ended) and placed it as a new context
    cache = RadixCache(BS, 64, 8)
    cache.extend("n", PROMPT, 0, 36, cache.alloc_blocks(9), [], "r")
    cache.commit("r")
    fleet = [replica("a", 1, cache.ready_digest(kv_runs=True)), replica("b", 0)]
    sibling = CTX + (9, 9, 9, 9, 9)
    d = route(make_router("checkpoint", RouterConfig(block_size=BS)), fleet, sibling)
    assert (d.replica, d.reason, d.depth) == ("a", AFFINITY, 32)


def test_prefix_affinity_needs_the_match_threshold_and_balance():
    prefix = make_router("prefix", RouterConfig(block_size=BS, match_threshold=0.5))
    prefix.choose(RouteRequest("n", PROMPT), [replica("a", 0)])
    short = CTX[:8] + (8,) * 28  # matches 8 of 36 tokens: below the threshold
    assert route(prefix, [replica("a", 0), replica("b", 0)], short).reason == PLACEMENT
    assert route(prefix, [replica("a", 0), replica("b", 0)]).replica == "a"
    d = route(prefix, [replica("a", 30), replica("b", 0), replica("c", 0)])  # imbalanced: pow2
    assert d.reason == LOAD and d.replica in ("b", "c")


def test_pow2_picks_the_shorter_of_two_queues():
    router = make_router("pow2", RouterConfig(seed=1))
    fleet = [replica("a", 5), replica("b", 0)]
    assert all(route(router, fleet).replica == "b" for _ in range(20))
    counts = {"a": 0, "b": 0, "c": 0}
    fleet3 = [replica("a", 9), replica("b", 0), replica("c", 0)]
    for _ in range(300):
        counts[route(router, fleet3).replica] += 1
    assert counts["a"] == 0 and min(counts["b"], counts["c"]) > 100  # never the longest of three
    assert route(router, [replica("solo", 7)]).replica == "solo"


def test_forgotten_replica_is_not_followed():
    router = make_router("checkpoint", RouterConfig(block_size=BS))
    route(router, [replica("a", 0)])
    router.forget("a")
    d = route(router, [replica("b", 1), replica("c", 0)])
    assert (d.replica, d.reason) == ("c", PLACEMENT)


def test_unknown_router_is_one_line_naming_it():
    with pytest.raises(ProblemError) as e:
        make_router("round_robin")
    assert e.value.problem.param == "router" and "round_robin" in e.value.problem.message


def test_a_replica_yet_to_report_does_not_hide_the_others_checkpoints():
    # the prompt's chain was cut at the first replica's block size: one that had not reported yet
    # (Serve's default digest, 16-token blocks) hid every other replica's checkpoints (4-token
    # blocks), and the router's memory was cut at whichever block size came first
    router = make_router("checkpoint", RouterConfig(block_size=BS))
    fleet = [ReplicaState("new", 0), replica("b", 1, digest_at(PROMPT, 8)), replica("c", 0)]
    d = route(router, fleet)
    assert (d.replica, d.reason, d.depth) == ("b", AFFINITY, 32)
    placed = route(router, [replica("a", 0), ReplicaState("new", 1)], CTX + (6,) * 8)
    sibling = route(router, [ReplicaState("new", 0), replica("a", 1), replica("z", 0)], CTX + (5,) * 8)
    assert placed.replica == "a" and (sibling.replica, sibling.reason) == ("a", AFFINITY)


def test_a_context_sharing_only_a_preamble_is_placed_where_it_is_light():
    # every prompt opening with the same few tokens (a chat template) made the replicas that had
    # seen them "affine" for every new context: 3 of 4 replicas took all of them, one none
    router = make_router("checkpoint", RouterConfig(block_size=BS, seed=0))
    preamble = CTX[:4]  # one block of a 60-token prompt: under the 10% match threshold
    queues = {"a": 0, "b": 0, "c": 0, "d": 0}
    for i in range(40):  # 40 unrelated contexts, nothing finishes
        d = route(router, [replica(k, q) for k, q in queues.items()], preamble + (1000 + i,) * 56)
        assert d.reason == PLACEMENT
        queues[d.replica] += 1
    assert set(queues.values()) == {10}
    # a sibling still follows its context (its match is most of the prompt)
    sibling = route(router, [replica(k, 0) for k in queues], preamble + (1000,) * 55 + (7,))
    assert sibling.reason == AFFINITY and sibling.depth == 56


@pytest.mark.parametrize("name", ["pow2", "prefix", "checkpoint"])
def test_a_replica_whose_loop_died_is_never_picked(name):
    # a dead replica answers every job at once with a 503, so its queue reads 0 and it holds the
    # deepest checkpoint: it looked the best choice and absorbed the traffic until Serve replaced it
    router = make_router(name, RouterConfig(block_size=BS))
    dead = ReplicaState("dead", 0, digest_at(PROMPT, 8), alive=False)
    for i in range(50):
        d = route(router, [dead, replica("b", 5), replica("c", 6)], PROMPT + (i,))
        assert d.replica != "dead"


def test_when_every_replica_is_dead_one_still_answers():
    # its answer is the 503 naming the failure, not a hang
    router = make_router("checkpoint", RouterConfig(block_size=BS))
    d = route(router, [ReplicaState("x", 0, alive=False), ReplicaState("y", 1, alive=False)])
    assert d.replica in {"x", "y"}


def test_an_overloaded_replicas_context_spills_to_the_lightest_not_to_a_preamble_holder():
    # a, overloaded, holds the context; b had only a 4-token preamble of this 72-token prompt sent
    # to it (under the 10% threshold: no hit), c is idle: the spill went to b, the busier, with
    # BALANCE and depth 4, as if a preamble were a reason to queue there
    router = make_router("checkpoint", RouterConfig(block_size=BS))
    prompt = CTX + tuple(range(1, 41))
    route(router, [replica("b", 0)], CTX[:4] + (7,) * 60)  # another context, same preamble, to b
    fleet = [replica("a", 10, digest_at(prompt, 8)), replica("b", 3), replica("c", 0)]
    d = route(router, fleet, prompt)
    assert (d.replica, d.reason, d.depth) == ("c", BALANCE, 0)


@pytest.mark.parametrize("name", ["prefix", "checkpoint"])
def test_a_prompt_retracted_from_a_replica_draws_no_sibling_there(name):
    # the replica refused it (its queue was full): it never cached the prompt's prefix
    router = make_router(name, RouterConfig(block_size=BS))
    replicas = [replica("a"), replica("b")]
    first = route(router, replicas)
    other = "b" if first.replica == "a" else "a"
    router.retract(RouteRequest("n", PROMPT), first.replica)
    router.record(RouteRequest("n", PROMPT), other)  # its retry, which the other took
    for _ in range(5):
        sibling = route(router, replicas, CTX + (7, 8, 9, 10, 11))
        assert (sibling.replica, sibling.reason) == (other, AFFINITY)


def test_pow2_has_nothing_to_retract():
    router = make_router("pow2", RouterConfig(block_size=BS))
    router.retract(RouteRequest("n", PROMPT), "a")  # remembers nothing: nothing breaks
    assert route(router, [replica("a")]).replica == "a"


class NoRetract:
    """A router added from outside that predates `Router.retract`."""

    name = "noretract"
    uses_digests = False

    def __init__(self, config: RouterConfig) -> None:
        self.config = config

    def decide(self, request, replicas): ...
    def record(self, request, replica): ...
    def choose(self, request, replicas): ...
    def forget(self, replica): ...


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        (NoRetract, "'bad' (NoRetract) is no Router: it lacks retract"),
        (lambda: None, "cannot be called as factory(config)"),
    ],
)
def test_a_bad_router_entry_is_refused_in_one_line_when_built(monkeypatch, entry, says) -> None:
    # an entry that cannot serve failed mid-route (AttributeError on the first refusal)
    from radixflow.fleet import routers

    monkeypatch.setitem(routers.ROUTERS, "bad", entry)
    with pytest.raises(ProblemError, match="router") as raised:
        make_router("bad")
    assert says in str(raised.value)
