"""The GGUF file reader: its metadata fields, typed, each refusal a `GGUFError` naming the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

from radixflow.models.io.gguf import load_gguf  # noqa: E402
from radixflow.models.io.gguf_reader import GGUFError, field, open_gguf  # noqa: E402


def write_with_string(path: Path, key: str, value: bytes) -> None:
    """A little GGUF whose metadata ``key`` holds the raw bytes ``value`` as a string."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_key_value(key, value, gguf.GGUFValueType.STRING)
    writer.add_tensor("token_embd.weight", np.ones((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_string_field_that_is_not_utf8_is_one_error_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "latin1.gguf"
    write_with_string(path, "tokenizer.chat_template", "caf\xe9".encode("latin-1"))
    with pytest.raises(GGUFError, match=r"^the GGUF metadata's tokenizer\.chat_template is not UTF-8 text"):
        field(open_gguf(path), "tokenizer.chat_template")


def test_a_garbled_architecture_name_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "garbled.gguf"
    write_with_string(path, "general.architecture", b"ll\x96ma")
    refused = rf"^{re.escape(str(path))}: the GGUF metadata's general\.architecture is not UTF-8 text"
    with pytest.raises(GGUFError, match=refused):
        load_gguf(path)
