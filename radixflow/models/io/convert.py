"""On-disk -> in-model checkpoint conversions, per family, as transformers 5.24 applies them at load.

Hub checkpoints are not always stored under the names the model uses. transformers 5.24 converts
them while loading (``transformers/conversion_mapping.py``); for our families that is:

* ``qwen3_next`` (mapped to the ``qwen2_moe`` rules): per-expert
  ``mlp.experts.{j}.gate_proj/up_proj.weight [I, H]`` are stacked over ``j`` and concatenated
  gate-then-up along dim 1 into ``mlp.experts.gate_up_proj [E, 2I, H]``; ``down_proj`` is stacked
  into ``mlp.experts.down_proj [E, H, I]``. No transposes.
* ``qwen3_5_text`` (also what a ``qwen3_5`` multimodal config loads as a causal LM):
  ``model.language_model.*`` -> ``model.*``; ``model.visual.*`` and ``mtp.*`` are ignored.
* ``nemotron_h``: ``backbone.*`` -> ``model.*`` and per-expert ``mixer.experts.{j}.up_proj/down_proj``
  stacked into fused tensors. Our module keeps the on-disk names (see `radixflow.models.families.nemotron_h`),
  so here the rule runs the other way: a checkpoint in transformers' in-memory layout
  (``model.*``, fused experts) is renamed to ``backbone.*`` and split per expert.
* ``llama``, ``qwen3``, ``lfm2``, ``falcon_h1``: no family rules.

Tensors a checkpoint may carry that no model of ours reads are ignored as transformers 5.24
ignores them (``_keys_to_ignore_on_load_unexpected``): multi-token-prediction heads (``mtp.*``) of
Qwen3.5, Qwen3-Next and Nemotron-H, Qwen3.5's vision tower, and the per-layer
``rotary_emb.inv_freq`` buffers old checkpoints saved. Any other unused tensor is an error.

Every family also gets transformers' base-model-prefix rule (a key missing the ``model.`` prefix,
as saved from a bare base model, gains it, and vice versa). The ``legacy`` rules (``LayerNorm.gamma``,
``weight_g``) name modules none of our families has and are not reproduced.

A `Plan` maps each checkpoint key to where its tensor goes, so the loader can copy one tensor at
a time straight into the model's parameters (merged experts are written slice by slice, never
materialised whole).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class MergeExperts:
    """Per-expert tensors ``{head}.{j}.{part}.weight`` -> ``{head}.{target}``: stacked over ``j``
    (dim 0), then the parts concatenated in the listed order along dim 1 (transformers'
    ``MergeModulelist(dim=0)`` + ``Concatenate(dim=1)``)."""

    head: str  # regex for the module path ending in ``experts`` (matched at the end of the prefix)
    parts: tuple[str, ...]
    target: str

    def match(self, key: str) -> tuple[str, int, int] | None:
        """(target key, expert index, part index) or None."""
        m = re.fullmatch(rf"(.*{self.head})\.(\d+)\.({'|'.join(map(re.escape, self.parts))})\.weight", key)
        if m is None:
            return None
        return f"{m[1]}.{self.target}", int(m[2]), self.parts.index(m[3])


@dataclass(frozen=True)
class SplitExperts:
    """A fused ``{head}.{part}`` tensor ``[E, ...]`` -> per-expert ``{head}.{j}.{part}.weight``."""

    head: str
    parts: tuple[str, ...]

    def match(self, key: str) -> tuple[str, str] | None:
        """(head, part) or None."""
        m = re.fullmatch(rf"(.*{self.head})\.({'|'.join(map(re.escape, self.parts))})", key)
        return None if m is None else (m[1], m[2])


@dataclass(frozen=True)
class Conversion:
    """A family's rules: regex renames applied in order to every key, then at most one merge/split."""

    renames: tuple[tuple[str, str], ...] = ()
    merges: tuple[MergeExperts, ...] = ()
    splits: tuple[SplitExperts, ...] = ()
    base_prefix: str = "model"  # added to / stripped from keys when that is what the model has
    ignored: tuple[str, ...] = ()  # regexes (searched) of tensors no model of the family reads

    def ignores(self, key: str) -> bool:
        return any(re.search(p, key) for p in (*self.ignored, *_IGNORED_EVERYWHERE))


# transformers drops these stale rotary buffers for every model with a rotary embedding
_IGNORED_EVERYWHERE = (r"rotary_emb\.inv_freq$",)


_QWEN2_MOE = (
    MergeExperts(r"mlp\.experts", ("gate_proj", "up_proj"), "gate_up_proj"),
    MergeExperts(r"mlp\.experts", ("down_proj",), "down_proj"),
)

CHECKPOINT_CONVERSIONS: dict[str, Conversion] = {
    "llama": Conversion(),
    "qwen3": Conversion(),
    "qwen3_5_text": Conversion(
        renames=((r"^model\.language_model\.", "model."),), ignored=(r"^mtp\.", r"^model\.visual\.")
    ),
    "qwen3_next": Conversion(merges=_QWEN2_MOE, ignored=(r"^mtp\.",)),
    "lfm2": Conversion(),
    "falcon_h1": Conversion(),
    "nemotron_h": Conversion(
        renames=((r"^model\.", "backbone."),),
        splits=(SplitExperts(r"mixer\.experts", ("up_proj", "down_proj")),),
        base_prefix="backbone",
        ignored=(r"(^|\.)mtp\.",),
    ),
}


@dataclass
class Plan:
    """Where each checkpoint key goes.

    ``direct``: checkpoint key -> parameter name. ``merged``: parameter name -> (number of parts,
    list of (checkpoint key, expert, part)). ``split``: checkpoint key -> (head, part), to be copied into
    ``{head}.{j}.{part}.weight`` for every expert ``j``. Keys in none of these (``tied`` aside) are `unused`.
    """

    direct: dict[str, str] = field(default_factory=dict)
    merged: dict[str, tuple[int, list[tuple[str, int, int]]]] = field(default_factory=dict)
    split: dict[str, tuple[str, str]] = field(default_factory=dict)
    # checkpoint key -> the parameter a tied alias shares (a stored tied lm_head): checked, not copied
    tied: dict[str, str] = field(default_factory=dict)

    def keys(self) -> set[str]:
        """Every checkpoint key the plan reads."""
        merged = {key for _, pieces in self.merged.values() for key, _, _ in pieces}
        return set(self.direct) | merged | set(self.split)


def plan_conversion(model_type: str, keys: Iterable[str], wanted: set[str]) -> Plan:
    """Map checkpoint ``keys`` onto the model's parameter names ``wanted`` for ``model_type``.

    A key already in ``wanted`` is taken as is, so checkpoints in our own layout load unchanged.
    """
    conv = CHECKPOINT_CONVERSIONS.get(model_type, Conversion())
    plan = Plan()
    prefix = conv.base_prefix + "."
    for key in keys:
        if key in wanted:
            plan.direct[key] = key
            continue
        name = key
        for pattern, repl in conv.renames:
            name = re.sub(pattern, repl, name)
        if (target := _with_prefix(name, prefix, wanted)) is not None:
            plan.direct[key] = target
        elif not _plan_merge(plan, conv.merges, key, name, prefix, wanted):
            _plan_split(plan, conv.splits, key, name, prefix, wanted)
    return plan


def _plan_merge(
    plan: Plan, merges: Iterable[MergeExperts], key: str, name: str, prefix: str, wanted: set[str]
) -> bool:
    """``key`` (renamed ``name``) planned as a piece of a merged parameter by the first merge that
    matches it; False when none does. A match whose parameter the model lacks plans nothing."""
    for merge in merges:
        if (hit := merge.match(name)) is not None:
            if (target := _with_prefix(hit[0], prefix, wanted)) is not None:
                plan.merged.setdefault(target, (len(merge.parts), []))[1].append((key, hit[1], hit[2]))
            return True
    return False


def _plan_split(
    plan: Plan, splits: Iterable[SplitExperts], key: str, name: str, prefix: str, wanted: set[str]
) -> None:
    """``key`` (renamed ``name``) planned as split across parameters by the first split that
    matches it, where the model has them."""
    for split in splits:
        if (cut := split.match(name)) is not None:
            head = _with_prefix(f"{cut[0]}.0.{cut[1]}.weight", prefix, wanted)
            if head is not None:
                plan.split[key] = (head[: -len(f".0.{cut[1]}.weight")], cut[1])
            return


def _with_prefix(name: str, prefix: str, wanted: set[str]) -> str | None:
    """``name``, or ``name`` with the base-model prefix stripped or added, if the model has it."""
    if name in wanted:
        return name
    if name.startswith(prefix) and name[len(prefix) :] in wanted:
        return name[len(prefix) :]
    if prefix + name in wanted:
        return prefix + name
    return None


def unused(model_type: str, keys: Iterable[str], plan: Plan) -> list[str]:
    """Checkpoint ``keys`` the plan does not read and the family does not ignore, sorted."""
    conv = CHECKPOINT_CONVERSIONS.get(model_type, Conversion())
    read = plan.keys()
    return sorted(k for k in keys if k not in read and not conv.ignores(k))
