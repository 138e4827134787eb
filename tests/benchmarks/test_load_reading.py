"""The machine's load, read one way by every benchmark script (`spread.loads_now`): a script that
read ``/proc/loadavg`` itself failed on macOS, which has none, before measuring anything."""

from __future__ import annotations

import os
import re
from pathlib import Path

from benchmark_utils import BENCHMARKS, load_benchmark

from radixflow.bench import paired_timing
from radixflow.bench.spread import load_text, loads_now

BENCH = Path(paired_timing.__file__).parent
PROC_LOADAVG = re.compile(r"""["']/proc/loadavg["']""")


def test_no_script_reads_proc_loadavg_itself():
    # per_candidate, score_many, runner_throughput and paired_timing opened /proc/loadavg:
    # FileNotFoundError on macOS
    scripts = [*BENCHMARKS.glob("*.py"), *BENCH.glob("*.py")]
    readers = [p.name for p in scripts if PROC_LOADAVG.search(p.read_text())]
    assert readers == []


def test_the_three_averages_or_none_where_the_platform_has_none(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 2.5, 3.25))
    assert loads_now() == (1.0, 2.5, 3.25)
    monkeypatch.delattr(os, "getloadavg")
    assert loads_now() is None


def test_generation_throughputs_load_is_the_shared_readers(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 2.5, 3.25))
    assert paired_timing.loadavg() == "1.00 2.50 3.25"
    monkeypatch.delattr(os, "getloadavg")
    assert paired_timing.loadavg() == "n/a"


OWN_READERS = {"spread.py"}


def test_no_script_calls_os_getloadavg_itself():
    # os.getloadavg is missing where the platform has no load average (Windows): a script that
    # called it itself raised AttributeError before measuring anything; `spread.load_now` and
    # `loads_now` say None there, and the scripts print "n/a"
    scripts = [*BENCHMARKS.glob("*.py"), *BENCH.glob("*.py")]
    callers = [p.name for p in scripts if "getloadavg" in p.read_text() and p.name not in OWN_READERS]
    assert callers == []


def test_a_missing_load_is_printed_as_such():
    assert load_text(None) == "n/a" and load_text(1.234) == "1.23"


def test_a_platform_with_no_load_average_runs_the_scripts_and_says_none(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    overhead = load_benchmark("scheduler_overhead")
    monkeypatch.delattr(os, "getloadavg")
    assert overhead.machine(None)["load_1min_after"] is None
