"""Workload generator and JSONL traces."""

from __future__ import annotations

import pytest

from radixflow.workloads.candidates import MAX_WORKLOAD_TOKENS, WorkloadSpec, build_workload
from radixflow.workloads.trace import TraceError, read_trace, write_trace


def test_grouped_shares_context_within_group_only():
    reqs = build_workload(WorkloadSpec(groups=2, candidates=3, context_len=20, candidate_len=5))
    assert [r.id for r in reqs] == ["g0c0", "g0c1", "g0c2", "g1c0", "g1c1", "g1c2"]
    assert reqs[0].prompt[:20] == reqs[2].prompt[:20] != reqs[3].prompt[:20]
    assert all(len(r.prompt) == 25 for r in reqs)


def test_orders_and_seed_determinism():
    inter = build_workload(WorkloadSpec(groups=2, candidates=2, order="interleaved"))
    assert [r.id for r in inter] == ["g0c0", "g1c0", "g0c1", "g1c1"]
    a = build_workload(WorkloadSpec(order="shuffled", seed=3))
    b = build_workload(WorkloadSpec(order="shuffled", seed=3))
    assert [(r.id, r.prompt) for r in a] == [(r.id, r.prompt) for r in b]
    assert [r.id for r in a] != sorted(r.id for r in a)


def test_arrivals():
    pois = build_workload(WorkloadSpec(groups=4, candidates=4, arrival="poisson", rate=10.0))
    times = [r.arrival_s for r in pois]
    assert times == sorted(times) and times[-1] > 0
    burst = build_workload(WorkloadSpec(groups=2, candidates=8, arrival="bursty", rate=16, burst_size=8))
    assert sorted({r.arrival_s for r in burst}) == [0.0, 0.5]


def test_independent_requests_and_namespaces():
    reqs = build_workload(WorkloadSpec(groups=2, candidates=2, independent=3, namespaces=2))
    assert sum(r.kind == "independent" for r in reqs) == 3
    assert {r.namespace for r in reqs if r.group is not None} == {"ns0", "ns1"}


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
    reqs = build_workload(WorkloadSpec(groups=2, candidates=2, independent=1, arrival="poisson"))
    path = tmp_path / "t.jsonl"
    write_trace(path, reqs)
    back = read_trace(path)
    assert [(r.id, r.prompt, r.namespace, r.arrival_s, r.group, r.kind) for r in back] == [
        (r.id, r.prompt, r.namespace, r.arrival_s, r.group, r.kind) for r in reqs
    ]


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
    assert len(read_trace(path, max_tokens=6)) == 2
    with pytest.raises(TraceError, match=r"t\.jsonl:2: the trace exceeds the limit of 5 prompt tokens"):
        read_trace(path, max_tokens=5)


def test_trace_with_a_utf8_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "prompt": [1, 2]}\n', encoding="utf-8-sig")
    assert [r.id for r in read_trace(path)] == ["a"]


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
    )
    system = reqs[0].prompt[:5]
    assert all(r.prompt[:5] == system and len(r.prompt) == 17 for r in reqs)
    contexts = {r.prompt[5:13] for r in reqs}
    assert len(contexts) == 3  # the contexts still differ per group


def test_without_a_shared_prefix_the_workload_is_unchanged():
    spec = WorkloadSpec(groups=2, candidates=2, context_len=8, candidate_len=4)
    assert [r.prompt for r in build_workload(spec)] == [
        r.prompt for r in build_workload(WorkloadSpec(**{**spec.to_dict(), "shared_prefix_len": 0}))
    ]
    assert build_workload(spec)[0].prompt[:8] != build_workload(spec)[2].prompt[:8]


def test_negative_shared_prefix_is_refused():
    with pytest.raises(ValueError, match="shared prefix"):
        WorkloadSpec(shared_prefix_len=-1).validate()
