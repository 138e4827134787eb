"""A checkpoint's tensors against a model's parameters: names and shapes first, then the values.

`Checkpoint` holds the open safetensors files. `Checkpoint.check` matches every tensor to a
parameter (through the family's conversion plan, `radixflow.models.io.convert`) using the files'
headers alone: unused, missing, mis-shaped and integer-typed tensors are refused before any value
is read, so it also works against a model built on the meta device. `Checkpoint.fill` then copies
the values one tensor at a time, refusing NaN and infinity (a min/max pass per tensor, a few
percent of the load).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from radixflow.models.io.convert import Plan, plan_conversion, unused

SHOWN = 5  # tensor names listed in an error; the rest are counted
# dtypes torch.aminmax reduces directly; others (float8) are widened first
_REDUCIBLE = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# safetensors header dtypes that hold floating point: F16, F32, F64, BF16, F8_E4M3, ...; an integer
# or boolean tensor copied into a float parameter would be cast silently, its values meaningless
_FLOAT_PREFIXES = ("F", "BF")


class TensorError(ValueError):
    """A tensor the model cannot take (the loader turns it into a `CheckpointError`)."""


def listing(names: list[str]) -> str:
    return ", ".join(names[:SHOWN]) + (f" ... ({len(names) - SHOWN} more)" if len(names) > SHOWN else "")


@dataclass
class Checkpoint:
    """The open safetensors files of one checkpoint and which file holds each tensor."""

    handles: dict[Path, Any]
    where: dict[str, Path]

    @staticmethod
    def open(stack: ExitStack, files: list[Path]) -> Checkpoint:
        handles = {file: _open(stack, file) for file in files}
        where: dict[str, Path] = {}
        for file, f in handles.items():
            for key in f.keys():  # noqa: SIM118 (not a dict)
                _check_once(key, where.get(key), file)
                where[key] = file
        return Checkpoint(handles, where)

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self.handles[self.where[key]].get_slice(key).get_shape())

    def dtype(self, key: str) -> str:
        """The tensor's dtype as the file's header spells it ("F32", "BF16", "I32", "BOOL")."""
        return str(self.handles[self.where[key]].get_slice(key).get_dtype())

    def read(self, key: str) -> torch.Tensor:
        """The tensor's values; NaN or infinity anywhere is a `TensorError` naming it."""
        tensor = self.handles[self.where[key]].get_tensor(key)
        bad = non_finite(tensor)
        if bad is not None:
            raise TensorError(f"{self.where[key].name}: tensor {key} {bad}")
        return tensor

    def check(
        self, model_type: str, wanted: dict[str, torch.Tensor], tied: dict[str, str], optional: set[str]
    ) -> Plan:
        """The plan that fills ``wanted`` (parameter name -> tensor; only shapes are used), after
        refusing unused tensors (those mapping onto a ``tied`` alias aside: alias -> the parameter
        it shares; a stored alias fills that parameter where nothing else does), mis-shaped ones
        and missing ones (``optional`` names, e.g. buffers, may be missing)."""
        plan = plan_conversion(model_type, self.where, set(wanted))
        _check_one_source(plan, wanted)
        extra = unused(model_type, self.where, plan)
        aliases = plan_conversion(model_type, extra, set(tied)).direct  # e.g. a stored tied lm_head
        plan.tied = {key: tied[name] for key, name in aliases.items()}
        _fill_from_aliases(plan, wanted)
        extra = [k for k in extra if k not in aliases]
        if extra:
            what = f"{len(extra)} tensor(s) the {model_type} model has no parameter for"
            raise TensorError(f"{what}: {listing(extra)}")
        for key, (shape, name) in expected_shapes(plan, wanted).items():
            what = key if key == name else f"{key} (for {name})"
            if self.shape(key) != shape:
                raise TensorError(
                    f"{self.where[key].name}: tensor {what} has shape {self.shape(key)}, expected {shape}"
                )
            # merged and split tensors fill expert weights, always floating point
            if _floating(wanted, name) and not self.dtype(key).startswith(_FLOAT_PREFIXES):
                raise TensorError(
                    f"{self.where[key].name}: tensor {what} has dtype {self.dtype(key)}, "
                    "expected a floating-point dtype"
                )
        missing = sorted(set(wanted) - filled(plan, wanted) - optional)
        if missing:
            raise TensorError(f"checkpoint is missing {len(missing)} tensor(s): {listing(missing)}")
        return plan

    def fill(self, plan: Plan, wanted: dict[str, torch.Tensor]) -> None:
        """Copy every planned tensor into ``wanted`` (a real model's parameters, checked by `check`)."""
        with torch.no_grad():
            for key, name in plan.direct.items():
                self._copy(key, self.read(key), wanted[name])
            for name, (n_parts, pieces) in plan.merged.items():
                dest = wanted[name]
                width = dest.shape[1] // n_parts
                for key, j, p in pieces:
                    self._copy(key, self.read(key), dest[j, p * width : (p + 1) * width])
            for key, (head, part) in plan.split.items():
                for j, expert in enumerate(self.read(key)):
                    self._copy(key, expert, wanted[f"{head}.{j}.{part}.weight"])
            for key, name in plan.tied.items():
                self._check_tied(key, wanted[name], name)

    def _copy(self, key: str, stored: torch.Tensor, dest: torch.Tensor) -> None:
        """``stored`` (tensor ``key``, finite) into ``dest``. A value past a narrower ``dest``'s
        range (1e300 in a float64 file, into float32) turns into infinity on the cast: refused."""
        dest.copy_(stored)
        if not (stored.is_floating_point() and dest.is_floating_point()):
            return
        if torch.finfo(stored.dtype).max > torch.finfo(dest.dtype).max and non_finite(dest) is not None:
            n, largest = int(torch.isinf(dest).sum()), torch.finfo(dest.dtype).max
            dtype = str(dest.dtype).removeprefix("torch.")
            raise TensorError(
                f"{self.where[key].name}: tensor {key} holds {n} value(s) beyond {dtype}'s range "
                f"(largest {largest:g})"
            )

    def _check_tied(self, key: str, shared: torch.Tensor, name: str) -> None:
        """A stored copy of a tied alias must equal the parameter it shares (as loaded). One that
        differs means the config's tying is wrong for this file: transformers then unties them and
        uses the stored values, so dropping it would silently give other logits."""
        stored = self.read(key)
        if stored.shape != shared.shape or not torch.equal(stored.to(shared.dtype), shared):
            raise TensorError(
                f"{self.where[key].name}: tensor {key} differs from {name}, but config.json ties them "
                '(tie_word_embeddings); set "tie_word_embeddings": false to load it as stored'
            )


def _fill_from_aliases(plan: Plan, wanted: dict[str, torch.Tensor]) -> None:
    """A stored tied alias whose parameter no other tensor fills (a tied checkpoint that keeps
    lm_head.weight, not the embeddings) is read into that parameter: transformers ties both ways,
    taking whichever of the two the file holds. Otherwise it stays in ``plan.tied``, checked."""
    have = filled(plan, wanted)
    for key, name in list(plan.tied.items()):
        if name not in have:
            plan.direct[key] = name
            del plan.tied[key]
            have.add(name)


def expected_shapes(plan: Plan, wanted: dict[str, torch.Tensor]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Checkpoint key -> (the shape it must have, what it fills: a parameter or a slice of one)."""
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for key, name in plan.direct.items():
        out[key] = (tuple(wanted[name].shape), name)
    for name, (n_parts, pieces) in plan.merged.items():
        dest = wanted[name]
        _check_cover(name, n_parts, pieces, dest.shape[0])
        width = dest.shape[1] // n_parts
        for key, j, p in pieces:
            out[key] = ((width, *dest.shape[2:]), f"{name}[{j}, {p * width}:{(p + 1) * width}]")
    for key, (head, part) in plan.split.items():
        experts = _experts(wanted, head, part)
        out[key] = ((len(experts), *wanted[experts[0]].shape), f"{head}.*.{part}.weight")
    return out


def filled(plan: Plan, wanted: dict[str, torch.Tensor]) -> set[str]:
    """Parameter names the plan writes."""
    split = {n for head, part in plan.split.values() for n in _experts(wanted, head, part)}
    return set(plan.direct.values()) | set(plan.merged) | split


def _experts(wanted: dict[str, torch.Tensor], head: str, part: str) -> list[str]:
    """The model's per-expert parameters ``{head}.{j}.{part}.weight``, in expert order (j = 0, 1, ...)."""
    names = []
    while (name := f"{head}.{len(names)}.{part}.weight") in wanted:
        names.append(name)
    return names


def _check_cover(name: str, n_parts: int, pieces: list[tuple[str, int, int]], experts: int) -> None:
    """Per-expert pieces must cover each (expert, part) of a merged tensor exactly once: refused
    naming the pairs missing, then the tensors no expert takes (past the model's experts, or a
    pair given twice)."""
    need = {(j, p) for j in range(experts) for p in range(n_parts)}
    seen: set[tuple[int, int]] = set()
    left_over = []  # checkpoint keys of pairs outside `need` or already seen
    for key, j, p in sorted(pieces, key=lambda piece: piece[0]):
        if (j, p) not in need or (j, p) in seen:
            left_over.append(key)
        seen.add((j, p))
    missing = sorted(need - seen)
    if not missing and not left_over:
        return
    said = [f"missing (expert, part) {_first(missing)}"] if missing else []
    said += [f"no expert takes {_first(left_over)}"] if left_over else []
    raise TensorError(
        f"{name}: the checkpoint's per-expert tensors must hold each of {n_parts} part(s) once for "
        f"each of {experts} experts: {'; '.join(said)}"
    )


def _first(items: list[Any], shown: int = 6) -> str:
    """Up to ``shown`` of ``items``, and how many more."""
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return f"{items[:shown]}{more}"


def _floating(wanted: dict[str, torch.Tensor], name: str) -> bool:
    """Whether ``name`` (a parameter, or a slice of an expert weight) is floating point."""
    return wanted[name].is_floating_point() if name in wanted else True


def non_finite(tensor: torch.Tensor) -> str | None:
    """What is wrong with ``tensor``'s values ("holds 3 NaN value(s) of 4096"), None if every
    value is finite (or it is not floating point)."""
    if not tensor.is_floating_point() or _finite(tensor):
        return None
    nan = int(torch.isnan(tensor).sum())
    bad = f"{nan} NaN" if nan else f"{int(torch.isinf(tensor).sum())} infinite"
    return f"holds {bad} value(s) of {tensor.numel()}"


def _finite(tensor: torch.Tensor) -> bool:
    """No NaN or infinity: the minimum and maximum are finite (both propagate NaN). One reduction
    without a temporary, much faster than ``isfinite(t).all()`` on a CPU thread."""
    if tensor.numel() == 0:
        return True
    low, high = torch.aminmax(tensor if tensor.dtype in _REDUCIBLE else tensor.float())
    return bool(torch.isfinite(low)) and bool(torch.isfinite(high))


def _check_one_source(plan: Plan, wanted: dict[str, torch.Tensor]) -> None:
    """Two checkpoint keys that fill one parameter (``model.norm.weight`` beside ``norm.weight``,
    which the base-model prefix rule maps onto it; a fused expert tensor beside its per-expert
    pieces): whichever was copied last would win, and transformers may pick the other."""
    writers = [*((name, key) for key, name in plan.direct.items())]
    writers += [(name, pieces[0][0]) for name, (_, pieces) in plan.merged.items()]
    writers += [(n, key) for key, (head, part) in plan.split.items() for n in _experts(wanted, head, part)]
    source: dict[str, str] = {}
    for name, key in writers:
        first = source.setdefault(name, key)
        if first != key:
            raise TensorError(f"tensors {first} and {key} both fill {name}: remove the one that is not meant")


def _check_once(key: str, first: Path | None, file: Path) -> None:
    """A tensor stored in two of the files (an old copy beside the weights, a shard saved twice):
    which one is meant cannot be told, and taking either silently may load stale weights."""
    if first is not None:
        raise TensorError(
            f"tensor {key} is stored in both {first.name} and {file.name}: "
            "one of them is stale; remove it (or the copy of the tensor)"
        )


def _open(stack: ExitStack, file: Path) -> Any:
    """An open safetensors file; a missing, truncated or garbled one is a `TensorError`."""
    try:
        return stack.enter_context(safe_open(str(file), framework="pt"))
    except (SafetensorError, OSError) as e:
        raise TensorError(f"{file.name}: not a readable safetensors file ({e})") from None
