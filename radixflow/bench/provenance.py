"""What produced a benchmark's figures, for its JSON: the command, the code (its digest, and the
git commit where it runs from a checkout, and whether that checkout had changes not committed)
and the machine (CPU model, AVX-512 or not, torch threads). Figures without these cannot be set
beside another run's: a speed-up measured on an AVX-512 machine, or at another commit, says
nothing of this one. `write_figures` is how every script under benchmarks/ writes its
``--json``: with that block, strict, written whole."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from radixflow.files import write_whole
from radixflow.package import PACKAGE
from radixflow.plugin_digest import code_digest
from radixflow.runners.profile_store import processor_name

FORMAT = 1  # the bench JSON's layout: raised when a key changes meaning or moves
CPUINFO = Path("/proc/cpuinfo")
GIT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Machine:
    cpu: str  # the CPU's model name
    cpus: int | None  # logical CPUs the OS reports (None: it cannot say)
    avx512: bool | None  # None where the CPU's flags cannot be read (no /proc/cpuinfo)
    torch_threads: int | None  # None where torch was not loaded (the sim runner computes on none)
    platform: str


@dataclass(frozen=True)
class Provenance:
    command: list[str]
    code: str  # `code_digest`: the package's files and any plugin's, one per version of the code
    commit: str | None  # None: not run from a git checkout of the package
    dirty: bool | None  # tracked files changed on top of ``commit`` (None: no commit to be on)
    machine: Machine

    def to_json(self) -> dict[str, object]:
        return {"format": FORMAT, **asdict(self)}


def provenance(command: list[str], torch_threads: int | None) -> Provenance:
    """This process's: its ``command`` (every word) and torch's thread count where torch computes
    (`loaded_torch_threads`)."""
    machine = Machine(processor_name(), os.cpu_count(), avx512(), torch_threads, platform.platform())
    commit = git_commit()
    return Provenance(command, code_digest(), commit, None if commit is None else _dirty(PACKAGE), machine)


def write_figures(path: str | Path, figures: dict[str, Any]) -> None:
    """A benchmark script's ``--json``: ``figures`` with a ``run`` block (`provenance`: the script's
    command line, this process's torch threads), strict JSON (a NaN or infinity is null, its path
    in ``run.non_finite`` and said on stderr: the run's other figures are not lost to it), written
    whole (`write_whole`: a run cut short leaves the old file or the new one), its folder made."""
    if not isinstance(figures, dict):  # a list has no place for the run block
        raise TypeError(f"a benchmark's figures are a JSON object, not {type(figures).__name__}")
    if "run" in figures:  # a figure of that name would be overwritten without a word
        raise ValueError("a benchmark's figures cannot hold a key named 'run': it is the provenance")
    found: list[str] = []
    plain = _finite(figures, "", found)
    run: dict[str, Any] = provenance(list(sys.argv), loaded_torch_threads()).to_json()
    if found:
        run["non_finite"] = found
        print(f"{path}: figures not finite, written as null: {', '.join(found)}", file=sys.stderr)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, json.dumps({"run": run, **plain}, indent=2, allow_nan=False) + "\n")


def _finite(value: Any, where: str, found: list[str]) -> Any:
    """``value`` as plain JSON: every float that is not finite None (its path added to ``found``),
    a path its text, a tuple a list."""
    if isinstance(value, float) and not math.isfinite(value):
        found.append(where)
        return None
    if isinstance(value, dict):
        return {k: _finite(v, f"{where}/{k}", found) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v, f"{where}/{i}", found) for i, v in enumerate(value)]
    return str(value) if isinstance(value, os.PathLike) else value


def loaded_torch_threads() -> int | None:
    """torch's intra-op threads where this process loaded torch; never loads it (seconds)."""
    torch = sys.modules.get("torch")
    return None if torch is None else int(torch.get_num_threads())


def avx512(cpuinfo: Path = CPUINFO) -> bool | None:
    """Whether the CPU has AVX-512 (its foundation, ``avx512f``); None where unknown."""
    try:
        lines = cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    flags = next((line for line in lines if line.startswith(("flags", "Features"))), None)
    return None if flags is None else "avx512f" in flags.split(":", 1)[-1].split()


def git_commit(package: Path = PACKAGE) -> str | None:
    """The commit checked out where the package is a checkout's own ``radixflow/`` (an installed
    copy inside another repository, a venv in a project, is not that project's commit)."""
    done = _git(package, "rev-parse", "--show-toplevel", "HEAD")
    said = done.stdout.split() if done is not None else []
    if done is None or done.returncode != 0 or len(said) != 2 or Path(said[0]).resolve() != package.parent:
        return None
    return said[1]


def git_dirty(package: Path = PACKAGE) -> bool | None:
    """Whether the checkout `git_commit` names has changes to its tracked files not committed
    (figures measured on an edited tree are not that commit's; an untracked file is no code that
    ran); None where it names no commit."""
    return None if git_commit(package) is None else _dirty(package)


def _dirty(package: Path) -> bool | None:
    done = _git(package, "status", "--porcelain", "--untracked-files=no")
    return None if done is None or done.returncode != 0 else bool(done.stdout.strip())


def _git(package: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    """``git ARGS`` run in ``package``; None where git cannot run (not installed, or it hangs)."""
    try:
        return subprocess.run(
            ["git", *args], cwd=package, capture_output=True, text=True, timeout=GIT_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
