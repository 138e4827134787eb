"""The Python names the docs give are the code's: a dotted `radixflow.module.name` is defined in that
module, and a `Class.member` of one of the package's classes is declared in that class or a base
of it in the package. A renamed method or attribute otherwise leaves a page pointing at nothing,
which the path and test-name checks of test_docs.py do not see. Read from the source text, so
nothing is imported."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = (
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "experiments" / "profiles" / "README.md",
)

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_SPAN = re.compile(r"`([^`]+)`")
_CLASS = re.compile(r"^class (\w+)(?:\(([^)]*)\))?:\n((?:[ \t]+.*\n|\n)*)", re.M)
_MEMBER = re.compile(r"^    (?:async def |def |class )?(\w+)\b", re.M)  # a def, an assignment, a field
_TOP = re.compile(
    r"^(?:async def |def |class )?(\w+)\b|^from \S+ import \(?([\w, \n]+)\)?|^import ([\w.]+)", re.M
)
# RadixCache.match, ScanAction.FOLLOW
_MEMBER_NAMED = re.compile(r"(?<![\w.])([A-Z]\w*[a-z]\w*)\.([A-Za-z_]\w*)")
_MODULE_NAMED = re.compile(r"`(radixflow(?:\.\w+)+)")

Classes = dict[str, list[tuple[set[str], list[str]]]]


def _package() -> tuple[Classes, dict[str, set[str]]]:
    """Each class's members and base names (a name two modules define: each of them), and each
    module's top-level names (defined, imported, or in a literal `__all__`)."""
    classes: Classes = {}
    modules: dict[str, set[str]] = {}
    for path in (ROOT / "radixflow").rglob("*.py"):
        text = path.read_text()
        for m in _CLASS.finditer(text):
            bases = [b.strip().split("[")[0].split(".")[-1] for b in (m.group(2) or "").split(",")]
            classes.setdefault(m.group(1), []).append((set(_MEMBER.findall(m.group(3))), bases))
        names = set()
        for defined, imported, module in _TOP.findall(text):
            aliases = (w.split(" as ")[-1].strip() for w in imported.split(","))
            names |= {defined, module.split(".")[0], *aliases}
        if listed := re.search(r"^__all__ = \[([^\]]*)\]", text, re.M):
            names |= set(re.findall(r'"(\w+)"', listed.group(1)))
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[dotted] = names - {""}
    return classes, modules


def _declares(classes: Classes, cls: str, member: str, seen: tuple[str, ...] = ()) -> bool:
    """Whether ``cls`` or a base of it in the package declares ``member`` (a base outside the
    package, `Protocol`, `Enum`, `dict`, adds nothing)."""
    return any(
        member in members
        or any(b in classes and b not in seen and _declares(classes, b, member, (*seen, cls)) for b in bases)
        for members, bases in classes.get(cls, [])
    )


def _missing(text: str, classes: Classes, modules: dict[str, set[str]]) -> tuple[list[str], int]:
    """The names a page gives that the code lacks, and how many it gives."""
    missing, given = [], 0
    for span in _SPAN.findall(_FENCE.sub("", text)):
        for m in _MEMBER_NAMED.finditer(span):
            if m.group(1) in classes:
                given += 1
                missing += [] if _declares(classes, *m.groups()) else [m.group(0)]
    for m in _MODULE_NAMED.finditer(text):
        parts = m.group(1).split(".")
        at = max(i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in modules)
        rest, given = parts[at:], given + 1
        undefined = bool(rest) and rest[0] not in modules[".".join(parts[:at])]
        if undefined or (len(rest) > 1 and not _declares(classes, *rest[:2])):
            missing.append(m.group(1))
    return missing, given


def test_every_class_member_and_module_name_the_docs_give_exists():
    classes, modules = _package()
    found = {doc.name: _missing(doc.read_text(), classes, modules) for doc in DOCS}
    assert sum(given for _, given in found.values()) > 50
    assert {doc: missing for doc, (missing, _) in found.items() if missing} == {}


def test_a_renamed_member_or_module_name_is_caught():
    classes, modules = _package()
    text = (
        "`RadixCache.match`, `RadixCache.matchs`, "
        "`radixflow.scheduler.scan.RoundPredictor`, `radixflow.cache.x`"
    )
    assert _missing(text, classes, modules) == (["RadixCache.matchs", "radixflow.cache.x"], 4)
