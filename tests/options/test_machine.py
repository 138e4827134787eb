"""The server's thread plan: a pure function of the CPU count, applied only where none is given."""

from __future__ import annotations

import pytest

from radixflow.cli.app import build_parser
from radixflow.cli.serve_setup import threads
from radixflow.options import EngineOptions
from radixflow.options.machine import ThreadPlan, server_thread_plan


@pytest.mark.parametrize(
    ("cpus", "plan"),
    [
        (1, ThreadPlan(1, 2)),  # nothing to share: one thread, oversubscribed whatever we do
        (2, ThreadPlan(1, 2)),  # measured (docs/serving.md): one torch thread, the other CPU for HTTP
        (4, ThreadPlan(3, 2)),
        (8, ThreadPlan(7, 2)),
        (16, ThreadPlan(14, 2)),
        (64, ThreadPlan(56, 8)),
    ],
)
def test_the_plan_on_machines_of_every_size(cpus, plan):
    assert server_thread_plan(cpus) == plan


def test_forward_passes_get_every_cpu_the_http_side_does_not():
    for cpus in range(1, 257):
        plan = server_thread_plan(cpus)
        assert 1 <= plan.torch_threads <= cpus and plan.tokenizer_threads >= 1
        http = cpus - plan.torch_threads
        assert http >= (1 if cpus > 1 else 0) and http <= max(1, cpus // 4)
        assert plan.torch_threads >= server_thread_plan(cpus - 1).torch_threads if cpus > 1 else True


def test_serve_applies_the_plan_only_where_nothing_was_given():
    plan = server_thread_plan(2)
    options, tokenizer = threads(EngineOptions(), None, 2)
    assert options.torch_threads == plan.torch_threads and tokenizer == plan.tokenizer_threads
    options, tokenizer = threads(EngineOptions(torch_threads=2), 1, 2)
    assert options.torch_threads == 2 and tokenizer == 1
    # the engine option's own default stays None (torch's) everywhere else
    assert EngineOptions().torch_threads is None


def test_every_door_says_the_same_about_the_default():
    parser = build_parser()
    helps = set()
    for command in ("serve", "generate", "bench"):
        sub = parser._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
        (action,) = [a for a in sub._actions if "--torch-threads" in a.option_strings]
        helps.add(action.help)
    assert len(helps) == 1 and "serve and run-batch: the server's thread plan" in helps.pop()


@pytest.mark.parametrize(
    ("kv_blocks", "state_slots", "counted"),
    [
        (4_194_304, None, "4194304 KV blocks need 1.1 GB"),
        (None, 1_048_576, "1048576 state slots need 0.3 GB"),
        (4_194_304, 1_048_576, "4194304 KV blocks and 1048576 state slots need 1.3 GB"),
    ],
)
def test_bookkeeping_past_memory_names_only_the_capacities_given(
    monkeypatch, kv_blocks, state_slots, counted
):
    # "4194304 KV blocks and None state slots need 1.1 GB": a capacity not given was shown as None
    from radixflow.options import machine

    monkeypatch.setattr(machine, "available_memory", lambda: 100_000_000)
    problem = machine.bookkeeping_problem(kv_blocks, state_slots)
    assert problem is not None and problem.message.startswith(counted), problem
    assert problem.message.endswith("of bookkeeping; 0.1 GB of memory is available"), problem


def _cgroups(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    return root


@pytest.mark.parametrize(
    ("files", "membership", "limit"),
    [
        # cgroup v2: the least limit on the process's group and its ancestors ("max": none)
        ({"a/memory.max": str(8 << 30), "a/b/memory.max": "max"}, "0::/a/b", 8 << 30),
        ({"a/memory.max": str(8 << 30), "a/b/memory.max": str(2 << 30)}, "0::/a/b", 2 << 30),
        # v1's memory controller (its "unlimited" is a near-2^63 number, left to MemAvailable)
        ({"memory/x/memory.limit_in_bytes": str(4 << 30)}, "9:pids:/\n4:memory:/x\n0::/", 4 << 30),
        ({"memory/memory.limit_in_bytes": "9223372036854771712"}, "4:memory:/", 9223372036854771712),
        ({}, "0::/", None),  # no limit anywhere
    ],
)
def test_a_containers_memory_limit_is_read_from_its_cgroup(tmp_path, files, membership, limit):
    from radixflow.options.machine import memory_limit

    assert memory_limit(_cgroups(tmp_path, files), membership) == limit


def test_available_memory_is_capped_by_the_containers_limit(tmp_path):
    # MemAvailable is the host's figure: in a container limited to 1 MiB, pools of the host's free
    # memory passed the check and the kernel killed the process when the cache filled them
    from radixflow.options.machine import available_memory

    cgroup = _cgroups(tmp_path, {"memory.max": str(1 << 20)})
    assert available_memory(cgroup, "0::/") == 1 << 20
    unlimited = available_memory(_cgroups(tmp_path / "none", {"memory.max": "max"}), "0::/")
    assert unlimited is None or unlimited > 1 << 20  # /proc/meminfo's, where there is one


@pytest.mark.parametrize(
    ("files", "membership", "cpus"),
    [
        ({"a/cpu.max": "150000 100000"}, "0::/a", 2),  # 1.5 CPUs of time: two threads' worth
        ({"a/cpu.max": "max 100000", "cpu.max": "100000 100000"}, "0::/a", 1),  # an ancestor's
        ({"a/cpu.max": "max 100000"}, "0::/a", None),
        ({"cpu/x/cpu.cfs_quota_us": "200000", "cpu/x/cpu.cfs_period_us": "100000"}, "2:cpu,cpuacct:/x", 2),
        ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, "1:cpu:/", None),
    ],
)
def test_a_containers_cpu_quota_is_read_from_its_cgroup(tmp_path, files, membership, cpus):
    # `docker run --cpus 2` on a 64-core host: the affinity mask says 64, and serve's thread plan
    # ran 56 torch threads on two CPUs' time (docs/serving.md: on two CPUs, one thread)
    from radixflow.options.machine import cpu_count, cpu_quota

    root = _cgroups(tmp_path, files)
    assert cpu_quota(root, membership) == cpus
    if cpus is not None:
        assert cpu_count(root, membership) == min(cpus, cpu_count(tmp_path / "none", "0::/"))
