"""The syntax of a CPU GEMM plan (option ``matmul``), without torch: the shape classes a plan
routes and the backend names it may give them (`runners.matmul` runs them), so the options refuse a
plan that does not parse whatever the runner, and before any model is built."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from radixflow.problems import Problem

BACKEND_NAMES = ("mkl", "onednn", "native")  # `runners.linear_backends.BACKENDS`, in its order


@dataclass(frozen=True)
class ShapeClass:
    """Linear calls of a decode-only round (or of any other round) with at most ``max_rows``
    rows, and more than the previous class of the same kind."""

    name: str
    decode_only: bool
    max_rows: int
    probe_rows: int  # rows the startup measurement uses for this class
    # its calls read every weight from memory (a round of a few rows is over before the next
    # layer's weights could be in any cache): the measurement empties the caches before each call
    cold: bool = False


SHAPE_CLASSES = (
    ShapeClass("single", True, 4, 1, cold=True),  # decode rounds of one to four rows
    ShapeClass("decode", True, 64, 16),  # decode rounds of a batch of rows
    ShapeClass("prefill", False, sys.maxsize, 128),  # everything else (never measured by "auto")
)


def parse_choices(spec: str) -> tuple[str, ...] | Problem | None:
    """``"auto"`` (None: measure), one backend name for every class, or ``class=backend`` pairs
    separated by commas (classes not named keep MKL): the backend per class in `SHAPE_CLASSES`
    order. A bad spec is a `Problem` on ``matmul``."""
    spec = spec.strip()
    if spec == "auto":
        return None
    if spec in BACKEND_NAMES:
        return tuple(spec for _ in SHAPE_CLASSES)
    names = [c.name for c in SHAPE_CLASSES]
    if "=" not in spec and "," not in spec:  # one word, neither a name nor a pair
        return Problem(
            "matmul",
            f"{spec!r} is not 'auto', one of {sorted(BACKEND_NAMES)}, or class=backend pairs "
            f"(classes {names})",
        )
    chosen = dict.fromkeys(names, "mkl")
    given: set[str] = set()
    for part in spec.split(","):
        cls, sep, backend = (s.strip() for s in part.partition("="))
        why = _pair_problem(cls, sep, backend)
        if why is None and cls in given:  # the later pair would silently win
            why = f"the class {cls} is given twice"
        if why is not None:
            return Problem("matmul", f"{spec!r}: {why}")
        given.add(cls)
        chosen[cls] = backend
    return tuple(chosen[n] for n in names)


def _pair_problem(cls: str, sep: str, backend: str) -> str | None:
    """What is wrong with one ``class=backend`` pair of a plan (None: nothing): the part a long
    plan's typo is in, and what it may be."""
    if not sep:
        return f"{cls!r} is not a class=backend pair"
    if cls not in {c.name for c in SHAPE_CLASSES}:
        return f"{cls!r} is not a class ({', '.join(c.name for c in SHAPE_CLASSES)})"
    if backend not in BACKEND_NAMES:
        return f"{backend!r} is not a backend ({', '.join(BACKEND_NAMES)})"
    return None


def plan_problem(spec: str) -> Problem | None:
    """Why ``spec`` is not a matmul plan (None: it is one)."""
    parsed = parse_choices(spec)
    return parsed if isinstance(parsed, Problem) else None
