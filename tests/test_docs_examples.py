"""The docs' Python examples run: every ```python block of the README and docs/ is executed, a
page's blocks in order in one namespace (a later block goes on from an earlier one, as a reader
does), in a temporary directory, with a real zoo model swapped for its tiny sibling (`SWAPS`).
docs/extending.md's blocks are run by tests/test_extending.py, with the files they need. A block
that cannot run here says so just above its fence, `<!-- docs-example: skip (why) -->`, which
this test reads: a block is run, or marked, never passed over."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "experiments/profiles/README.md")
RUN_ELSEWHERE = {"extending.md": "tests/test_extending.py"}
# the real model a block names -> the tiny zoo model of its family it runs on here: the block's
# point is the API's shape, which a 0.1M-parameter llama shares with smollm2-135m (its outputs
# are noise, so a block's comment quoting the real model's output is not checked)
SWAPS = {"smollm2-135m": "llama-tiny"}

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
_MARKER = re.compile(r"<!-- docs-example: (.*?) -->")
_SKIP = re.compile(r"skip \((.+)\)")


@dataclass(frozen=True)
class Block:
    """One ```python block: where it starts, its code, and why it is skipped (None: it runs)."""

    page: str
    line: int
    code: str
    skip: str | None


def _marker_before(text: str, start: int) -> str | None:
    """The docs-example marker on the last non-blank line before ``start``, if there is one."""
    lines = [line for line in text[:start].splitlines() if line.strip()]
    found = _MARKER.fullmatch(lines[-1].strip()) if lines else None
    return found.group(1) if found else None


def _blocks(page: Path) -> list[Block]:
    text = page.read_text()
    blocks = []
    for fence in _FENCE.finditer(text):
        if fence.group(1) != "python":
            continue
        marker = _marker_before(text, fence.start())
        skip = _SKIP.fullmatch(marker) if marker else None
        assert marker is None or skip, f"{page.name}: a marker is `skip (why)`, got {marker!r}"
        line = text.count("\n", 0, fence.start()) + 1
        blocks.append(Block(page.name, line, fence.group(2), skip.group(1) if skip else None))
    return blocks


def _pages_to_run() -> list[Path]:
    return [p for p in PAGES if p.name not in RUN_ELSEWHERE and any(b.skip is None for b in _blocks(p))]


def _zoo_names(code: str) -> set[str]:
    from radixflow.models.zoo_catalogue import model_names

    return {name for name in model_names() if re.search(rf"[\"']{re.escape(name)}[\"']", code)}


def _swapped(block: Block) -> str:
    """The block's code with each real model it names swapped for its tiny sibling; a real model
    with none in `SWAPS` fails here (it would be built, or downloaded, at full size)."""
    code = block.code
    for real, tiny in SWAPS.items():
        code = code.replace(f'"{real}"', f'"{tiny}"').replace(f"'{real}'", f"'{tiny}'")
    full_size = {name for name in _zoo_names(code) if not name.endswith("-tiny")}
    assert not full_size, f"{block.page}:{block.line} names {sorted(full_size)}: add a swap or a skip marker"
    return code


def _close_models(namespace: dict) -> None:
    from radixflow.generation import LLM

    for value in namespace.values():
        if isinstance(value, LLM):
            value.close()


@pytest.mark.parametrize("page", _pages_to_run(), ids=lambda p: p.name)
def test_a_pages_python_blocks_run_in_order(page, tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")  # the offline API's examples
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs_example__"}
    ran = []
    try:
        for block in _blocks(page):
            if block.skip is None:
                code = compile(_swapped(block), f"{block.page}:{block.line}", "exec")
                exec(code, namespace)
                ran.append(block.line)
    finally:
        _close_models(namespace)
    assert ran and len(ran) == sum(b.skip is None for b in _blocks(page))


def test_the_docs_python_blocks_are_found_and_each_is_run_or_marked():
    blocks = {p.name: _blocks(p) for p in PAGES}
    assert len(blocks["extending.md"]) == 4  # tests/test_extending.py reads them by position
    runnable = [b for name, bs in blocks.items() if name not in RUN_ELSEWHERE for b in bs if b.skip is None]
    assert len(runnable) >= 2  # usage.md's generate/chat and score: a broken regex finds none
    assert {b.page for b in runnable} == {p.name for p in _pages_to_run()}
    for name, bs in blocks.items():
        for block in bs:
            assert block.skip is None or block.skip.strip(), f"{name}:{block.line}: a skip says why"


def test_a_skip_marker_is_read_only_right_above_a_python_fence(tmp_path):
    text = "<!-- docs-example: skip (needs a server) -->\n\n```python\nx = 1\n```\n\n```python\ny = 2\n```\n"
    page = tmp_path / "page.md"
    page.write_text(text)
    assert [(b.line, b.skip) for b in _blocks(page)] == [(3, "needs a server"), (7, None)]
    page.write_text("<!-- docs-example: run -->\n```python\nx = 1\n```\n")
    with pytest.raises(AssertionError, match="skip \\(why\\)"):
        _blocks(page)


def test_a_block_naming_a_real_model_without_a_swap_is_refused_not_built():
    block = Block("page.md", 1, 'radixflow.LLM("qwen3_5-small")\n', None)
    with pytest.raises(AssertionError, match="qwen3_5-small"):
        _swapped(block)
    assert '"llama-tiny"' in _swapped(Block("page.md", 1, 'LLM("smollm2-135m")\n', None))
