"""`bench --json` says what produced its figures: the command, the code, the machine."""

from __future__ import annotations

import json
import os

from radixflow.bench.provenance import FORMAT, Machine, avx512, provenance
from radixflow.cli import main

SMALL = ["bench", "--groups", "2", "--candidates", "2", "--context-len", "32", "--candidate-len", "16"]


def test_the_bench_json_names_its_format_command_code_and_machine(tmp_path):
    # figures without what produced them cannot be compared with another run's: which commit,
    # which command, on which CPU (AVX-512 or not) with how many threads
    out = tmp_path / "out.json"
    argv = [*SMALL, "--policy", "native", "--repeat", "2", "--json", str(out)]
    assert main(argv) == 0
    run = json.loads(out.read_text())["run"]
    assert run["format"] == FORMAT == 1
    assert run["command"] == ["radixflow", *argv]
    assert isinstance(run["code"], str) and len(run["code"]) == 16
    assert run["commit"] is None or len(run["commit"]) == 40
    machine = run["machine"]
    assert set(machine) == {"cpu", "cpus", "avx512", "torch_threads", "platform"}
    assert machine["cpus"] == os.cpu_count() and machine["avx512"] in (True, False, None)


def test_avx512_is_read_from_the_cpus_flags_and_unknown_without_them(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512bw\n")
    assert avx512(info) is True
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2\n")
    assert avx512(info) is False
    info.write_text("processor\t: 0\nFeatures\t: fp asimd\n")  # an ARM CPU lists Features
    assert avx512(info) is False
    assert avx512(tmp_path / "absent") is None  # no /proc (macOS): unknown, not False


def test_torch_threads_are_recorded_only_where_torch_is_loaded():
    # the sim runner never imports torch (its threads compute nothing of it); loading it here
    # only to read a count would cost a bench on the sim seconds
    machine = provenance(["bench"], torch_threads=None).machine
    assert isinstance(machine, Machine) and machine.torch_threads is None
    assert provenance(["bench"], torch_threads=4).machine.torch_threads == 4
