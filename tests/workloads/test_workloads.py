"""Workload generator and JSONL traces."""

from __future__ import annotations

import codecs
import gzip
import inspect
import itertools
import json
import random
import re
from dataclasses import replace

import pytest

from radixflow.scheduler.request import Request
from radixflow.workloads import build
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import (
    ARRIVALS,
    KINDS,
    MAX_WORKLOAD_REQUESTS,
    MAX_WORKLOAD_TOKENS,
    ORDERS,
    WorkloadSpec,
)
from radixflow.workloads.jsonl_trace import TraceError, read_trace, write_trace
from radixflow.workloads.workload import CANDIDATE, INDEPENDENT, RequestTag, Workload


def test_grouped_shares_context_within_group_only():
    reqs = build_workload(WorkloadSpec(groups=2, candidates=3, context_len=20, candidate_len=5)).requests
    assert [r.id for r in reqs] == ["g0c0", "g0c1", "g0c2", "g1c0", "g1c1", "g1c2"]
    assert reqs[0].prompt[:20] == reqs[2].prompt[:20] != reqs[3].prompt[:20]
    assert all(len(r.prompt) == 25 for r in reqs)


def test_orders_and_seed_determinism():
    inter = build_workload(WorkloadSpec(groups=2, candidates=2, order="interleaved")).requests
    assert [r.id for r in inter] == ["g0c0", "g1c0", "g0c1", "g1c1"]
    a = build_workload(WorkloadSpec(order="shuffled", seed=3)).requests
    b = build_workload(WorkloadSpec(order="shuffled", seed=3)).requests
    assert [(r.id, r.prompt) for r in a] == [(r.id, r.prompt) for r in b]
    assert [r.id for r in a] != sorted(r.id for r in a)


def test_arrivals():
    pois = build_workload(WorkloadSpec(groups=4, candidates=4, arrival="poisson", rate=10.0)).requests
    times = [r.arrival_s for r in pois]
    assert times == sorted(times) and times[-1] > 0
    bursty = WorkloadSpec(groups=2, candidates=8, arrival="bursty", rate=16, burst_size=8)
    burst = build_workload(bursty).requests
    assert sorted({r.arrival_s for r in burst}) == [0.0, 0.5]


def test_independent_requests_and_namespaces():
    work = build_workload(WorkloadSpec(groups=2, candidates=2, independent=3, namespaces=2))
    assert sum(work.tag(r).kind == INDEPENDENT for r in work.requests) == 3
    assert {r.namespace for r in work.requests if work.tag(r).group is not None} == {"ns0", "ns1"}


def test_every_request_is_tagged_with_its_group_and_kind():
    work = build_workload(WorkloadSpec(groups=3, candidates=2, independent=2, order="shuffled", seed=5))
    assert [r.id for r in work.requests] == list(work.tags)  # tags in queue order
    for r in work.requests:
        if r.id.startswith("i"):
            assert work.tag(r) == RequestTag(group=None, kind=INDEPENDENT)
        else:  # "g{group}c{candidate}"
            assert work.tag(r) == RequestTag(group=int(r.id[1 : r.id.index("c")]), kind=CANDIDATE)


def test_a_single_independent_request_is_a_workload():
    work = build_workload(WorkloadSpec(groups=0, independent=1))
    assert [(r.id, work.tag(r)) for r in work.requests] == [("i0", RequestTag(None, INDEPENDENT))]


def test_the_engine_request_carries_no_workload_tags():
    names = set(Request.__dataclass_fields__)
    assert not names & {"group", "kind"}
    assert not hasattr(Request, "output_token") and not hasattr(Request, "top_logprobs")


@pytest.mark.parametrize(
    "ids, tagged",
    [
        (["a", "b"], ["a"]),  # a request without a tag
        (["a"], ["a", "b"]),  # a tag without a request
        (["a", "a"], ["a"]),  # two requests, one id
    ],
)
def test_workload_needs_one_tag_per_unique_request_id(ids, tagged):
    with pytest.raises(ValueError, match="one tag per request"):
        Workload([Request(i, (1,)) for i in ids], {i: RequestTag() for i in tagged})


@pytest.mark.parametrize(
    "spec",
    [
        WorkloadSpec(groups=0, independent=0),
        WorkloadSpec(rate=-1.0),
        WorkloadSpec(order="sideways"),
        WorkloadSpec(candidate_len=0),
        WorkloadSpec(rate=float("nan")),
        WorkloadSpec(rate=float("inf")),
        WorkloadSpec(rate=1e-300),
    ],
)
def test_bad_specs_are_rejected(spec):
    with pytest.raises(ValueError):
        build_workload(spec)


def test_trace_round_trip(tmp_path):
    work = build_workload(WorkloadSpec(groups=2, candidates=2, independent=1, arrival="poisson"))
    path = tmp_path / "t.jsonl"
    write_trace(path, work)
    back = read_trace(path)
    assert [(r.id, r.prompt, r.namespace, r.arrival_s) for r in back.requests] == [
        (r.id, r.prompt, r.namespace, r.arrival_s) for r in work.requests
    ]
    assert back.tags == work.tags
    assert {RequestTag(0, CANDIDATE), RequestTag(1, CANDIDATE), RequestTag(None, INDEPENDENT)} == set(
        back.tags.values()
    )


def test_trace_lines_keep_their_format(tmp_path):
    work = build_workload(WorkloadSpec(groups=1, candidates=1, context_len=1, candidate_len=1, independent=1))
    path = tmp_path / "t.jsonl"
    write_trace(path, work)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [list(row) for row in rows] == [["id", "namespace", "arrival_s", "group", "kind", "prompt"]] * 2
    assert [(row["id"], row["group"], row["kind"]) for row in rows] == [
        ("i0", None, "independent"),  # mixed in evenly: before the one candidate
        ("g0c0", 0, "candidate"),
    ]


def test_trace_written_before_tags_left_the_request_still_loads(tmp_path):
    # lines as older versions wrote them (group and kind beside the prompt), one with no tags at all,
    # and a kind this version never generates: all are kept as tags
    path = tmp_path / "old.jsonl"
    rows = [
        '{"id": "g3c0", "namespace": "ns1", "arrival_s": 0.5, "group": 3, "kind": "candidate", '
        '"prompt": [5, 6]}',
        '{"id": "i0", "namespace": "ns0", "arrival_s": 0.0, "group": null, "kind": "independent", '
        '"prompt": [7]}',
        '{"id": "bare", "prompt": [8]}',
        '{"id": "odd", "prompt": [9], "kind": "probe"}',
    ]
    path.write_text("\n".join(rows) + "\n")
    work = read_trace(path)
    assert [(r.id, r.prompt, r.namespace, r.arrival_s) for r in work.requests] == [
        ("g3c0", (5, 6), "ns1", 0.5),
        ("i0", (7,), "ns0", 0.0),
        ("bare", (8,), "default", 0.0),
        ("odd", (9,), "default", 0.0),
    ]
    assert work.tags == {
        "g3c0": RequestTag(3, CANDIDATE),
        "i0": RequestTag(None, INDEPENDENT),
        "bare": RequestTag(None, CANDIDATE),
        "odd": RequestTag(None, "probe"),
    }


@pytest.mark.parametrize(
    "line, needle",
    [
        ('{"id": "a", "prompt": [1], "group": "g1"}', "'group' must be an integer or null"),
        ('{"id": "a", "prompt": [1], "kind": ""}', "'kind' must be a non-empty string"),
    ],
)
def test_bad_tags_in_a_trace_name_their_line(tmp_path, line, needle):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(TraceError, match=rf"bad.jsonl:1: {needle}"):
        read_trace(path)


@pytest.mark.parametrize(
    "line, needle",
    [
        ("{not json", "not valid JSON"),
        ('{"id": "a", "prompt": []}', "'prompt'"),
        ('{"id": "a", "prompt": [1, "x"]}', "'prompt'"),
        ('{"id": "a", "prompt": [1], "arrival_s": -2}', "'arrival_s'"),
        ('{"prompt": [1]}', "'id'"),
    ],
)
def test_malformed_trace_line_names_its_line(tmp_path, line, needle):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "ok", "prompt": [1, 2]}\n' + line + "\n")
    with pytest.raises(TraceError, match=rf"bad.jsonl:2: .*{needle}"):
        read_trace(path)


def test_workload_size_limit_is_checked_before_any_token_is_drawn():
    spec = WorkloadSpec(groups=100_000_000)
    assert spec.total_tokens > MAX_WORKLOAD_TOKENS
    with pytest.raises(ValueError, match=f"the limit is {MAX_WORKLOAD_TOKENS}"):
        build_workload(spec)  # returns at once: nothing is drawn


def test_trace_token_limit_names_the_line_where_it_is_passed(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "prompt": [1, 2, 3]}\n{"id": "b", "prompt": [4, 5, 6]}\n')
    assert len(read_trace(path, max_tokens=6).requests) == 2
    with pytest.raises(TraceError, match=r"t\.jsonl:2: the trace exceeds the limit of 5 prompt tokens"):
        read_trace(path, max_tokens=5)


def test_trace_request_limit_names_the_line_where_it_is_passed(tmp_path):
    """A generated workload holds at most MAX_WORKLOAD_REQUESTS requests (each ~1.5 KB of Python
    objects); a trace of one-token prompts was bounded by its 2**25 tokens alone, 33M requests."""
    path = tmp_path / "t.jsonl"
    path.write_text("".join(f'{{"id": "r{i}", "prompt": [1]}}\n' for i in range(3)))
    assert len(read_trace(path, max_requests=3).requests) == 3
    with pytest.raises(TraceError, match=r"t\.jsonl:3: the trace exceeds the limit of 2 requests"):
        read_trace(path, max_requests=2)
    assert inspect.signature(read_trace).parameters["max_requests"].default == MAX_WORKLOAD_REQUESTS


def test_trace_with_a_utf8_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "prompt": [1, 2]}\n', encoding="utf-8-sig")
    assert [r.id for r in read_trace(path).requests] == ["a"]


@pytest.mark.parametrize("end", ["\r\n", "\r"])
def test_a_trace_s_lines_end_as_text_mode_ends_them_and_are_named_so(tmp_path, end):
    """Lines ended by a lone carriage return (as score --input and run-batch read them, and text
    mode does) were one line: 't.jsonl:1: not valid JSON (Extra data)', the fault of no line."""
    path = tmp_path / "t.jsonl"
    rows = ['{"id": "a", "prompt": [1]}', '{"id": "b", "prompt": [2]}', '{"id": "c", "prompt": "x"}']
    path.write_bytes(end.join(rows[:2]).encode() + end.encode())
    assert [r.id for r in read_trace(path).requests] == ["a", "b"]
    path.write_bytes((end.join(rows) + end).encode())
    with pytest.raises(TraceError, match=r"t\.jsonl:3: 'prompt' must be"):
        read_trace(path)


def test_trace_namespace_null_no_longer_merges_with_the_string_none(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [
        '{"id": "a", "prompt": [1], "namespace": "None"}',
        '{"id": "b", "prompt": [1], "namespace": null}',
    ]
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(TraceError, match=r"t\.jsonl:2: 'namespace' must be a non-empty string, got null"):
        read_trace(path)


def test_nested_sharing_puts_one_system_prompt_before_every_context():
    reqs = build_workload(
        WorkloadSpec(groups=3, candidates=2, context_len=8, candidate_len=4, shared_prefix_len=5)
    ).requests
    system = reqs[0].prompt[:5]
    assert all(r.prompt[:5] == system and len(r.prompt) == 17 for r in reqs)
    contexts = {r.prompt[5:13] for r in reqs}
    assert len(contexts) == 3  # the contexts still differ per group


def test_without_a_shared_prefix_the_workload_is_unchanged():
    spec = WorkloadSpec(groups=2, candidates=2, context_len=8, candidate_len=4)
    assert [r.prompt for r in build_workload(spec).requests] == [
        r.prompt for r in build_workload(WorkloadSpec(**{**spec.to_dict(), "shared_prefix_len": 0})).requests
    ]
    assert build_workload(spec).requests[0].prompt[:8] != build_workload(spec).requests[2].prompt[:8]


def test_negative_shared_prefix_is_refused():
    with pytest.raises(ValueError, match="shared_prefix_len: must be at least 0"):
        WorkloadSpec(shared_prefix_len=-1).validate()


def test_chat_turns_extend_the_previous_turn():
    spec = WorkloadSpec(groups=2, candidates=4, context_len=32, candidate_len=8, kind="chats", seed=3)
    reqs = {r.id: r for r in build_workload(spec).requests}
    for g in range(2):
        turns = [reqs[f"g{g}c{k}"].prompt for k in range(4)]
        assert [len(t) for t in turns] == [40, 48, 56, 64]
        assert all(b[: len(a)] == a for a, b in itertools.pairwise(turns))
    assert spec.prompt_len == 64


def test_skew_gives_the_first_groups_most_requests():
    spec = WorkloadSpec(groups=8, candidates=4, context_len=16, candidate_len=4, skew=1.0)
    sizes = spec.group_sizes()
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > 3 * sizes[-1] and min(sizes) >= 1
    assert len(build_workload(spec).requests) == sum(sizes) == spec.requests
    assert WorkloadSpec(skew=0.0).group_sizes() == [8] * 8
    assert WorkloadSpec(skew=-1.0).problem().param == "skew"
    assert WorkloadSpec(kind="essays").problem().param == "kind"


@pytest.mark.parametrize("arrival", ["1" + "0" * 400, "-1" + "0" * 400])
def test_trace_arrival_too_large_for_a_float_names_its_line(tmp_path, arrival):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "prompt": [1], "arrival_s": ' + arrival + "}\n")
    with pytest.raises(TraceError, match=r"t\.jsonl:1: 'arrival_s' must be a finite number >= 0"):
        read_trace(path)


@pytest.mark.parametrize("arrival", ["1e303", "1.7e12"])
def test_a_trace_arrival_past_the_clock_s_resolution_names_its_line(tmp_path, arrival):
    """An arrival in ms or ns since the epoch (or any past 2**32 s) leaves no µs to tell a round's
    start from its end: latencies came out 0, and a --trace-out trace failed with a traceback
    (its µs timestamps overflowed to infinity)."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "prompt": [1]}\n{"id": "b", "prompt": [1], "arrival_s": ' + arrival + "}\n")
    with pytest.raises(TraceError, match=r"t\.jsonl:2: 'arrival_s' must be at most 4294967296"):
        read_trace(path)


def test_a_trace_arrival_in_seconds_since_the_epoch_is_read(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "prompt": [1], "arrival_s": 1765000000.25}\n')
    assert read_trace(path).requests[0].arrival_s == 1765000000.25


@pytest.mark.parametrize("arrival", ["poisson", "bursty"])
def test_a_generated_workload_arriving_past_the_trace_limit_is_refused(tmp_path, arrival):
    """A workload whose arrivals pass what a trace may hold (2**32 s) was built and run, and its
    --write-trace trace was then refused by --trace: the same run could not be replayed."""
    spec = WorkloadSpec(groups=100, candidates=50, context_len=1, candidate_len=1, arrival=arrival, rate=1e-6)
    problem = spec.problem()
    assert problem is not None and problem.param == "rate" and "4294967296" in problem.message
    fits = replace(spec, rate=1e-4)  # 5,000 requests over 5e7 s
    assert fits.problem() is None
    path = tmp_path / "t.jsonl"
    write_trace(path, build_workload(fits))
    assert len(read_trace(path).requests) == 5000


def test_a_gzipped_trace_says_so(tmp_path):
    # it said only "not UTF-8 text (byte 0x8b at column 2)"
    path = tmp_path / "t.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write('{"id": "a", "prompt": [1]}\n')
    said = "t.jsonl.gz:1: not UTF-8 text (a gzip-compressed file: decompress it first)"
    with pytest.raises(TraceError, match=re.escape(said)):
        read_trace(path)


@pytest.mark.parametrize(
    ("encoding", "mark"), [("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE)]
)
def test_a_utf16_trace_says_so_as_every_other_jsonl_input_does(tmp_path, encoding, mark):
    """Windows PowerShell 5's `>` writes UTF-16: --input and the other JSONL readers say so, the
    trace reader gave only a byte (0xff at column 1)."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(mark + '{"id": "a", "prompt": [1]}\n'.encode(encoding))
    with pytest.raises(TraceError, match=re.escape("t.jsonl:1: not UTF-8 text (UTF-16: save it as UTF-8)")):
        read_trace(path)


def test_a_skewed_workload_far_too_large_is_refused_before_its_groups_are_sized():
    problem = WorkloadSpec(groups=10**12, skew=1.0).problem()  # a list of 10**12 sizes never fits
    assert problem is not None and problem.param == "groups" and "too large" in problem.message


def test_skewed_group_sizes_take_time_linear_in_the_groups():
    spec = WorkloadSpec(groups=200_000, candidates=1, context_len=0, candidate_len=1, skew=1.0)
    assert spec.problem() is None  # was quadratic: the weights were summed again for every group
    assert spec.requests == sum(spec.group_sizes()) >= 200_000


@pytest.mark.parametrize("skew", [float("nan"), -1e308])
def test_a_skew_that_cannot_weigh_groups_is_a_problem_not_a_crash(skew):
    assert WorkloadSpec(skew=skew).problem().param == "skew"  # was ValueError / OverflowError


@pytest.mark.parametrize("key", ["id", "namespace", "kind"])
def test_trace_text_that_is_not_unicode_names_its_line(tmp_path, key):
    # valid JSON, but a lone surrogate is no character: it cannot be printed or written as UTF-8
    # (the bench table crashed on such an id)
    row = {"id": "a", "prompt": [1], key: "x\\ud800"}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(row).replace("\\\\ud800", "\\ud800") + "\n")
    with pytest.raises(TraceError, match=rf"t\.jsonl:1: '{key}' must be .*text.*ud800"):
        read_trace(path)


def test_no_candidates_is_no_group_requests_with_skew_too():
    # skew shares groups x candidates among the groups: none to share is none, not one per group
    skewed = WorkloadSpec(groups=4, candidates=0, independent=2, skew=1.0)
    assert skewed.group_sizes() == [0] * 4 and skewed.requests == 2
    assert sorted(r.id for r in build_workload(skewed).requests) == ["i0", "i1"]
    assert WorkloadSpec(groups=4, candidates=0, skew=1.0).problem().message.startswith("empty workload")


@pytest.mark.parametrize("kind, order, arrival", list(itertools.product(KINDS, ORDERS, ARRIVALS)), ids=str)
def test_every_generated_shape_round_trips_through_a_trace(tmp_path, kind, order, arrival):
    spec = WorkloadSpec(
        groups=3, candidates=3, context_len=5, candidate_len=2, order=order, arrival=arrival, rate=7.0,
        burst_size=2, independent=2, namespaces=2, shared_prefix_len=1, kind=kind, skew=1.0, seed=11,
    )  # fmt: skip
    work = build_workload(spec)
    assert len(work.requests) == spec.requests
    assert max(len(r.prompt) for r in work.requests) == spec.prompt_len
    path = tmp_path / "t.jsonl"
    write_trace(path, work)
    back = read_trace(path)
    fields = lambda w: [(r.id, r.prompt, r.namespace, r.arrival_s) for r in w.requests]  # noqa: E731
    assert fields(back) == fields(work) == fields(build_workload(spec))  # and the seed redraws it
    assert back.tags == work.tags


@pytest.mark.parametrize(
    "spec",
    [
        # a chat's turns grow one candidate at a time: 64 x (1 + ... + 1000) tokens, under the limit
        WorkloadSpec(kind="chats", groups=1, candidates=1000, context_len=0, candidate_len=64),
        # independent requests carry no shared prefix: 30001 + 30000 tokens, not 30001 x 30001
        WorkloadSpec(groups=1, candidates=1, context_len=0, candidate_len=1, shared_prefix_len=30000,
                     independent=30000),
    ],
)  # fmt: skip
def test_the_token_limit_counts_the_tokens_the_workload_holds(spec):
    assert spec.total_tokens <= MAX_WORKLOAD_TOKENS < spec.requests * spec.prompt_len
    assert spec.problem() is None  # was refused: every request counted at the longest prompt


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("skew", [0.0, 1.0])
def test_total_tokens_is_what_the_built_workload_holds(kind, skew):
    spec = WorkloadSpec(kind=kind, groups=3, candidates=5, context_len=7, candidate_len=2, skew=skew,
                        shared_prefix_len=3, independent=4)  # fmt: skip
    assert spec.total_tokens == sum(len(r.prompt) for r in build_workload(spec).requests)


@pytest.mark.parametrize(
    "line, needle",
    [
        ("[" * 100_000 + "]" * 100_000, r"not valid JSON \(nested too deeply\)"),  # was a RecursionError
        # was Python's advice to call sys.set_int_max_str_digits(), which a trace's reader cannot
        ('{"id": "a", "prompt": [' + "9" * 5000 + "]}", r"not valid JSON \(a number of over 4300 digits\)"),
    ],
)
def test_a_trace_line_the_json_parser_cannot_read_names_its_line(tmp_path, line, needle):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "ok", "prompt": [1]}\n' + line + "\n")
    with pytest.raises(TraceError, match=rf"t\.jsonl:2: {needle}$"):
        read_trace(path)


@pytest.mark.parametrize("independent", [0, 3])
def test_shuffled_chats_keep_each_conversations_turns_in_order(independent):
    # a turn extends the one before it: it cannot arrive first (turn 3 came before turn 1)
    spec = WorkloadSpec(kind="chats", groups=4, candidates=5, context_len=4, candidate_len=2,
                        order="shuffled", independent=independent, arrival="poisson", seed=1)  # fmt: skip
    work = build_workload(spec)
    turns = [(work.tag(r).group, int(r.id.split("c")[1])) for r in work.requests if r.id.startswith("g")]
    assert all([k for g2, k in turns if g2 == g] == list(range(5)) for g in range(4))
    assert [g for g, _ in turns] != sorted(g for g, _ in turns)  # the conversations still mix
    assert len(work.requests) == spec.requests


@pytest.mark.parametrize("groups, candidates", [(0, 8), (4, 0)])
def test_prompt_len_is_the_longest_prompt_when_no_group_has_a_request(groups, candidates):
    # only independent requests, which carry no shared prefix: the prefix was counted all the same,
    # so an experiment cell was checked against the cache and the model's context (and refused)
    # for a prompt of 1030 tokens that no request has
    spec = WorkloadSpec(groups=groups, candidates=candidates, independent=3, shared_prefix_len=1000,
                        context_len=24, candidate_len=6)  # fmt: skip
    assert spec.prompt_len == max(len(r.prompt) for r in build_workload(spec).requests) == 30


def test_a_too_large_chat_workload_says_how_its_longest_prompt_adds_up():
    spec = WorkloadSpec(kind="chats", groups=1, candidates=10_000, context_len=0, candidate_len=64)
    problem = spec.problem()  # "up to 640000 tokens (shared_prefix_len + context_len + candidate_len)"
    assert problem is not None and "too large" in problem.message
    assert "640000 tokens (shared_prefix_len + context_len + 10000 turns × candidate_len)" in problem.message


@pytest.mark.parametrize("skew", [0.0, 1.0])
def test_a_too_large_workload_adds_up_the_keys_as_the_door_spells_them(skew):
    # a door that cannot set shared_prefix_len (bench's flags) leaves it out; the others by its names
    spec = WorkloadSpec(kind="chats", groups=40_000, candidates=2, context_len=1000, skew=skew)
    spell = dict(groups="-g", candidates="-k", independent="-i", context_len="-c", candidate_len="-n")
    problem = spec.problem(spell.get)
    assert problem is not None and "too large" in problem.message and "_len" not in problem.message
    assert ("(-c + -n)" if skew else "(-c + 2 turns × -n)") in problem.message


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("skew", [0.0, 1.0])
def test_prompt_lengths_are_those_of_the_built_workload(kind, skew):
    spec = WorkloadSpec(kind=kind, groups=3, candidates=5, context_len=7, candidate_len=2, skew=skew,
                        shared_prefix_len=3, independent=4, order="shuffled")  # fmt: skip
    assert sorted(spec.prompt_lengths()) == sorted(len(r.prompt) for r in build_workload(spec).requests)


def test_a_negative_seed_is_refused_not_the_workload_of_its_absolute_value():
    # random.Random(-3) draws what random.Random(3) draws: "distinct" seeds built one workload
    assert WorkloadSpec(seed=-3).problem().param == "seed"
    assert WorkloadSpec(seed=0).problem() is None


ONE_TOKEN = {"context_len": 0, "candidate_len": 1, "candidates": 1}


@pytest.mark.parametrize("skew", [0.0, 1.0])
def test_the_request_count_is_capped_before_anything_is_drawn(monkeypatch, skew):
    # 30M one-token requests passed the token limit and were built: gigabytes of requests
    spec = WorkloadSpec(groups=30_000_000, skew=skew, **ONE_TOKEN)
    assert spec.groups * (spec.context_len + spec.candidate_len) <= MAX_WORKLOAD_TOKENS  # tokens: fine
    monkeypatch.setattr(WorkloadSpec, "group_sizes", lambda self: pytest.fail("groups were sized"))
    problem = spec.problem()
    assert problem is not None and problem.param == "groups"
    assert (
        "30000000 requests" in problem.message and f"the limit is {MAX_WORKLOAD_REQUESTS}" in problem.message
    )
    with pytest.raises(ValueError, match="workload too large"):
        build_workload(spec)


def test_the_request_cap_counts_independent_requests_too():
    problem = WorkloadSpec(groups=1, independent=MAX_WORKLOAD_REQUESTS, **ONE_TOKEN).problem()
    assert problem is not None and problem.param == "independent"
    assert WorkloadSpec(groups=1, independent=MAX_WORKLOAD_REQUESTS - 1, **ONE_TOKEN).problem() is None


def test_bench_names_the_flag_of_too_many_requests_in_one_line(capsys):
    from radixflow.cli import main

    argv = ["bench", "--runner", "sim", "--groups", "30000000", "--context-len", "0"]
    assert main([*argv, "--candidate-len", "1", "--candidates", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert "--groups" in err and "30000000 requests" in err and str(MAX_WORKLOAD_REQUESTS) in err


@pytest.mark.parametrize(
    "flag, what",
    [
        ("--trace-out", "a dependency trace (--trace-out)"),
        ("--round-trace", "a round trace (--round-trace)"),
        ("--json", "a JSON document over several lines, as --json writes"),
    ],
)
def test_bench_s_other_traces_given_as_a_workload_trace_say_what_they_are(tmp_path, flag, what):
    # the dependency trace (bench --trace-out) given to --trace was "not valid JSON (Expecting
    # value)", of a file that is valid JSON; a round trace's first line, "unknown field 'blocked'";
    # bench's --json, "not valid JSON (Expecting property name enclosed in double quotes)"
    from radixflow.cli import main

    path = tmp_path / "other.json"
    argv = ["bench", "--groups", "1", "--candidates", "2", "--context-len", "16", "--candidate-len", "8"]
    assert main([*argv, "--policy", "native", flag, str(path)]) == 0
    message = f"{path}:1: {what}, not a workload trace (one request a line, as --write-trace writes)"
    with pytest.raises(TraceError) as e:
        read_trace(path)
    assert str(e.value) == message


@pytest.mark.parametrize("key", ["id", "prompt", "arrival_s"])
def test_a_field_given_twice_on_a_trace_line_names_its_line(tmp_path, key):
    # JSON takes the last of a key given twice: {"id": "a", ..., "id": "b"} was read as request b,
    # and the next line's own "b" was then the duplicate request id
    values = {"id": ('"a"', '"b"'), "prompt": ("[1]", "[2]"), "arrival_s": ("0", "1")}[key]
    row = {"id": '"a"', "prompt": "[1]"} | {key: values[0]}
    line = "{" + ", ".join(f'"{k}": {v}' for k, v in row.items()) + f', "{key}": {values[1]}}}'
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "b", "prompt": [3]}\n' + line + "\n")
    with pytest.raises(TraceError, match=rf"t\.jsonl:2: field '{key}' given twice"):
        read_trace(path)


def test_a_json_array_of_requests_over_several_lines_says_what_it_is(tmp_path):
    # json.dump(rows, f, indent=2): valid JSON, read line by line was "not valid JSON (Expecting value)"
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"id": "a", "prompt": [1]}, {"id": "b", "prompt": [2]}], indent=2) + "\n")
    with pytest.raises(TraceError) as e:
        read_trace(path)
    assert str(e.value) == (
        f"{path}:1: a JSON array over several lines, not a workload trace (one request a line, as "
        "--write-trace writes)"
    )


def _mixed_by_insertion(queue: list, extra: list) -> list:
    """The independent requests' places as `_mix` defines them: each inserted in turn at its
    share of the queue as it stands by then (the frozen grids' workloads were made so)."""
    out = list(queue)
    for j, req in enumerate(extra):
        out.insert((j + 1) * len(out) // (len(extra) + 1), req)
    return out


@pytest.mark.parametrize(
    "queued, extra", [(0, 1), (1, 0), (1, 5), (5, 1), (7, 7), (3, 40), (40, 3), (64, 17)]
)
def test_independent_requests_go_where_insertion_put_them(queued, extra):
    queue = [Request(f"g{i}", (1,)) for i in range(queued)]
    others = [Request(f"i{j}", (1,)) for j in range(extra)]
    assert build._mix(queue, others, False, None) == _mixed_by_insertion(queue, others)


def test_mixing_independent_requests_in_moves_no_request_more_than_once(monkeypatch):
    # each was inserted into a list holding the rest, shifting those after it: quadratic, so 500,000
    # independent requests beside 500,000 candidates (under the request limit) took hours to build
    shifted = []

    class Counted(list):
        def insert(self, index, item):
            shifted.append(len(self) - min(index, len(self)))
            super().insert(index, item)

    monkeypatch.setattr(build, "list", Counted, raising=False)
    spec = WorkloadSpec(groups=2000, candidates=1, context_len=0, candidate_len=1, independent=2000)
    assert len(build_workload(spec).requests) == 4000
    assert sum(shifted) <= 4000


def test_interleaving_groups_of_very_different_sizes_takes_work_linear_in_the_requests(monkeypatch):
    # interleaved order walked every group at every turn up to the largest group's: with skew, one
    # group of thousands among thousands of groups of one or two was billions of steps (hours)
    calls = []
    monkeypatch.setattr(build, "len", lambda x: calls.append(1) or len(x), raising=False)
    spec = WorkloadSpec(groups=2000, candidates=2, context_len=0, candidate_len=1, skew=1.0)
    groups = [[Request(f"g{g}c{k}", (1,)) for k in range(size)] for g, size in enumerate(spec.group_sizes())]
    order = build._order(groups, "interleaved", random.Random(0))
    assert order == [g[k] for k in range(max(map(len, groups))) for g in groups if k < len(g)]
    assert len(calls) <= 2 * (spec.requests + spec.groups)


@pytest.mark.parametrize(
    "line, says",
    [
        # a field left out was "got null", a value the line never held
        ('{"prompt": [1]}', "'id' is missing (a request needs 'id' and 'prompt')"),
        ('{"id": "a"}', "'prompt' is missing (a request needs 'id' and 'prompt')"),
        ('{"id": null, "prompt": [1]}', "'id' must be a non-empty string, got null"),
        # a bad prompt or group named no value: which of 10,000 tokens, or text where ids go
        ('{"id": "a", "prompt": "hello world"}', "'prompt' must be a non-empty list of integer token ids, "
                                                 'got "hello world"'),
        ('{"id": "a", "prompt": [1, 2, 3.5]}', "'prompt' must be a non-empty list of integer token ids, "
                                               "got 3.5 at index 2"),
        ('{"id": "a", "prompt": []}', "'prompt' must be a non-empty list of integer token ids, got []"),
        ('{"id": "a", "prompt": "' + "x" * 200 + '"}', 'got "' + "x" * 39 + "…"),
        ('{"id": "a", "prompt": [1], "group": "3"}', "'group' must be an integer or null, got \"3\""),
    ],
)  # fmt: skip
def test_a_missing_or_mistyped_trace_field_says_what_the_line_holds(tmp_path, line, says):
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(TraceError) as e:
        read_trace(path)
    assert str(e.value).startswith(f"{path}:1: ") and says in str(e.value)


@pytest.mark.parametrize(
    "given, says",
    [
        ({"groups": 2.5}, "groups: must be an integer, got 2.5"),
        ({"groups": True}, "groups: must be an integer, got True"),
        ({"candidate_len": 2.0}, "candidate_len: must be an integer, got 2.0"),
        ({"seed": 1.5}, "seed: must be an integer, got 1.5"),
        ({"vocab_size": 100.0}, "vocab_size: must be an integer, got 100.0"),
        ({"rate": "x"}, "rate: must be a number, got 'x'"),
        ({"rate": True}, "rate: must be a number, got True"),
        ({"skew": "1"}, "skew: must be a number, got '1'"),
        ({"skew": float("nan")}, "skew: must be a finite number, got nan"),
        ({"rate": 0.0}, "rate: must be at least 1e-06 requests/s, got 0.0"),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused_in_one_line_naming_its_field(given, says):
    # the experiment TOML's keys are typed when read and bench's flags as parsed, but a spec built in
    # Python was not: groups=2.5 failed in build_workload with "can't multiply sequence by non-int
    # of type 'float'", and groups=True or seed=1.5 built a workload
    assert str(WorkloadSpec(**given).problem()) == says
    with pytest.raises(ValueError, match=f"^{re.escape(says)}$"):
        build_workload(WorkloadSpec(**given))
