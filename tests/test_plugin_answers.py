"""What an eviction policy or a router from outside the package answers (docs/extending.md) is
checked as a placement's is: an answer outside its protocol stops the run with one line naming
the entry and what it returned, not a traceback from deep in the cache or the fleet, nor a run
that goes on ranking by a key that means nothing."""

from __future__ import annotations

import math

import pytest

from radixflow.cache.eviction import EVICTION_POLICIES, LRU
from radixflow.cli.app import main
from radixflow.fleet import LOAD, ROUTERS, Decision, ReplicaState, RouterConfig, RouteRequest, make_router
from radixflow.problems import ProblemError
from radixflow.scheduler.policy import SCHEDULING_POLICIES, Native

# a cache short of blocks and slots: entries are ranked and evicted throughout
SHORT = ["bench", "--runner", "sim", "--policy", "native", "--groups", "8", "--candidates", "4"]
SHORT += ["--kv-blocks", "100", "--state-slots", "4"]


class Ranks(LRU):
    """A plugin eviction policy answering ``answer(node)`` for a key and ``clock``."""

    name = "ranks"
    answer = staticmethod(lambda node: (node.last_used,))

    def priority(self, node, kind):
        return self.answer(node)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        # each was taken: a key equal to every other one (None) ranked by node id instead; NaN,
        # never smaller nor larger, left the heap in no order at all
        (lambda node: None, "priority returned None: not a tuple of numbers"),
        (lambda node: (math.nan,), "priority returned (nan,): nan is not a number"),
        (lambda node: float(node.last_used), "not a tuple of numbers"),
        (lambda node: ("old",), "priority returned ('old',): 'old' is not a number"),
    ],
)
def test_an_eviction_key_outside_its_protocol_is_told_in_one_line(monkeypatch, capsys, answer, said):
    monkeypatch.setattr(Ranks, "answer", staticmethod(answer))
    monkeypatch.setitem(EVICTION_POLICIES, "ranks", Ranks)
    assert main([*SHORT, "--eviction", "ranks"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("radixflow: error: --eviction: 'ranks' (Ranks) ")
    assert said in err


@pytest.mark.parametrize(
    ("clock", "said"),
    [(None, "clock is None: not a number"), (math.nan, "clock is nan: not a number")],
)
def test_an_eviction_clock_that_is_no_number_is_told_in_one_line(monkeypatch, capsys, clock, said):
    monkeypatch.setattr(Ranks, "clock", clock)
    monkeypatch.setitem(EVICTION_POLICIES, "ranks", Ranks)
    assert main([*SHORT, "--eviction", "ranks"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("radixflow: error: --eviction: 'ranks' (Ranks) ")
    assert said in err


class Unwinds(LRU):
    """A clock that runs back at each eviction: the keys stamped with it then fall."""

    name = "unwinds"
    clock = 0.0

    def evicted(self, node, kind):
        self.clock -= 1.0


def test_an_eviction_clock_running_back_is_told_in_one_line(monkeypatch, capsys):
    monkeypatch.setitem(EVICTION_POLICIES, "unwinds", Unwinds)
    assert main([*SHORT, "--eviction", "unwinds"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("radixflow: error: --eviction: 'unwinds' (Unwinds) clock is -1.0: ")
    assert "below 0.0" in err


def test_an_eviction_policy_within_its_protocol_runs_as_the_built_in_one(monkeypatch, capsys):
    monkeypatch.setitem(EVICTION_POLICIES, "ranks", Ranks)
    assert main([*SHORT, "--eviction", "ranks"]) == 0
    mine = capsys.readouterr().out
    assert main([*SHORT, "--eviction", "lru"]) == 0
    assert mine.replace("ranks", "lru") == capsys.readouterr().out


class Sends:
    """A plugin router sending each request where ``answer(replicas)`` says."""

    name = "sends"
    uses_digests = False
    answer = staticmethod(lambda replicas: Decision(replicas[0].name, LOAD))

    def __init__(self, config: RouterConfig) -> None:
        pass

    def decide(self, request, replicas):
        return self.answer(replicas)

    def choose(self, request, replicas):
        return self.decide(request, replicas)

    def record(self, request, replica):
        pass

    def retract(self, request, replica):
        pass

    def forget(self, replica):
        pass


FLEET = [ReplicaState("a", 0, alive=False), ReplicaState("b", 3)]


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        # each was a StopIteration's traceback from the fleet sim (no replica of that name), or
        # an empty first rank handed to Ray Serve
        (lambda replicas: None, "returned None: not a Decision"),
        (lambda replicas: "b", "returned 'b': not a Decision"),
        (lambda replicas: Decision("z", LOAD), "'z' is none of the replicas ['a', 'b']"),
        # one reported dead answers only 503s: the protocol picks it only when all are
        (lambda replicas: Decision("a", LOAD), "'a' is reported dead while another is live"),
    ],
)
def test_a_router_answering_outside_its_protocol_is_told_in_one_line(monkeypatch, answer, said):
    monkeypatch.setattr(Sends, "answer", staticmethod(answer))
    monkeypatch.setitem(ROUTERS, "sends", Sends)
    router = make_router("sends")
    for method in (router.decide, router.choose):
        with pytest.raises(ProblemError) as caught:
            method(RouteRequest("n", (1, 2, 3)), FLEET)
        assert caught.value.problem.param == "router"
        assert str(caught.value).count("\n") == 0
        assert f"'sends' (Sends) {method.__name__} returned" in str(caught.value)
        assert said in str(caught.value)


def test_a_router_answering_within_its_protocol_routes(monkeypatch):
    monkeypatch.setitem(ROUTERS, "sends", Sends)
    router = make_router("sends")
    assert router.choose(RouteRequest("n", (1, 2, 3)), FLEET[1:]) == Decision("b", LOAD)
    every_one_dead = [ReplicaState("a", 0, alive=False)]
    assert router.choose(RouteRequest("n", (1, 2, 3)), every_one_dead) == Decision("a", LOAD)


class Orders(Native):
    """A plugin scheduling policy scanning the waiting queue in ``answer(waiting)``'s order."""

    name = "orders"
    answer = staticmethod(lambda waiting: waiting)

    def order(self, waiting):
        return self.answer(waiting)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (lambda waiting: None, "order returned None: not an iterable of the waiting requests"),
        # a KeyError's traceback from the queue as the same request was admitted twice
        (lambda waiting: [*waiting, *waiting], "twice"),
        (lambda waiting: ["g0c0"], "gave 'g0c0', not a waiting request"),
        # the engine's `scheduler bug: round 3 scheduled no chunk with 1 waiting` once the rest ran
        (lambda waiting: list(waiting)[1:], "left out 'g0c0', which is waiting"),
    ],
)
def test_a_scan_order_outside_its_protocol_is_told_in_one_line(monkeypatch, capsys, answer, said):
    monkeypatch.setattr(Orders, "answer", staticmethod(answer))
    monkeypatch.setitem(SCHEDULING_POLICIES, "orders", Orders)
    argv = ["bench", "--runner", "sim", "--policy", "orders", "--groups", "2", "--candidates", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("radixflow: error: --policy: 'orders' (Orders) order")
    assert said in err


def test_a_scan_order_within_its_protocol_runs(monkeypatch, capsys):
    monkeypatch.setattr(Orders, "answer", staticmethod(lambda waiting: list(waiting)[::-1]))
    monkeypatch.setitem(SCHEDULING_POLICIES, "orders", Orders)
    argv = ["bench", "--runner", "sim", "--policy", "orders", "--groups", "2", "--candidates", "2"]
    assert main(argv) == 0
    assert "bf7f64a01a30" in capsys.readouterr().out  # outputs as any policy's: a no-cache run's


class Counts(Native):
    """A plugin scheduling policy whose decision counts are ``answer``."""

    name = "counts"
    answer: object = {}

    def counters(self):
        return self.answer


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        # stored as they came in an experiment's results.json (a NaN: json's traceback there)
        (None, "counters returned None: not a dict of counts by name"),
        ({"x": math.nan}, "counters returned {'x': nan}: the count of 'x' is nan, not an integer"),
        ({"x": "2"}, "the count of 'x' is '2', not an integer"),
        ({1: 2}, "1 is not a name"),
    ],
)
def test_policy_counters_outside_the_protocol_are_told_in_one_line(monkeypatch, capsys, answer, said):
    monkeypatch.setattr(Counts, "answer", answer)
    monkeypatch.setitem(SCHEDULING_POLICIES, "counts", Counts)
    argv = ["bench", "--runner", "sim", "--policy", "counts", "--groups", "2", "--candidates", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("radixflow: error: --policy: 'counts' (Counts) ")
    assert said in err


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        # each was a traceback where the checkpoint was loaded: ValueError (unpacking), the
        # import's ModuleNotFoundError, an AttributeError
        ("my_llama_module", "'my_llama_module' is no 'module:Class'"),
        ("no_such_family_module:Llama", "cannot import 'no_such_family_module' (No module named"),
        ("json:NoSuchClass", "module 'json' has no 'NoSuchClass'"),
    ],
)
def test_a_model_family_entry_that_names_no_class_is_told_in_one_line(monkeypatch, entry, said):
    from radixflow.models.registry import FAMILIES, UnknownModelError, model_class

    monkeypatch.setitem(FAMILIES, "my_llama", entry)
    with pytest.raises(UnknownModelError) as caught:
        model_class("my_llama")
    assert str(caught.value).count("\n") == 0
    assert str(caught.value).startswith("model family 'my_llama': ")
    assert said in str(caught.value)


CONFIG = '{"model_type": "my_reader", "hidden_size": 256, "num_hidden_layers": 4, "vocab_size": 1000}'


@pytest.mark.parametrize(
    ("layers", "said"),
    [
        # was a TypeError's traceback (no len()) from the shape, an AttributeError from the costs
        (None, "returned None: not a tuple of Layers"),
        (["attention"], "returned ['attention']: 'attention' is not a Layer"),
    ],
)
def test_a_cost_model_reader_answering_no_layers_is_told_in_one_line(
    monkeypatch, capsys, tmp_path, layers, said
):
    from radixflow.costmodel.shape.config_readers import READERS

    monkeypatch.setitem(READERS, "my_reader", lambda cfg: layers)
    (tmp_path / "config.json").write_text(CONFIG)
    assert main(["cost", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("radixflow: error: ")
    assert "cost-model reader of model_type 'my_reader'" in err and said in err


def test_a_placement_answering_numpy_integers_runs_as_one_answering_ints(monkeypatch, capsys):
    # was refused: "np.int64(16) is not an integer"
    np = pytest.importorskip("numpy")
    from radixflow.scheduler.placement import PLACEMENTS

    class Numpy:
        name = "numpy"

        def positions(self, ctx):
            first = ctx.start // ctx.block_size * ctx.block_size + ctx.block_size
            return list(np.arange(first, ctx.end + 1, ctx.block_size))

    monkeypatch.setitem(PLACEMENTS, "numpy", Numpy)
    argv = ["bench", "--runner", "sim", "--policy", "native", "--groups", "2", "--candidates", "2"]
    assert main([*argv, "--placement", "numpy"]) == 0
    assert "bf7f64a01a30" in capsys.readouterr().out


def test_policy_counters_of_numpy_integers_are_kept_as_ints(monkeypatch):
    # was refused as no integer; a results.json cannot hold np.int64 as it came either
    np = pytest.importorskip("numpy")
    from radixflow.scheduler.policy import policy_counters

    monkeypatch.setattr(Counts, "answer", {"waited": np.int64(3)})
    counts = policy_counters(Counts())
    assert counts == {"waited": 3} and type(counts["waited"]) is int
