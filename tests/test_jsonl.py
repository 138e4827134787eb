"""jsonl.py: a JSONL input file's text and numbered lines."""

from __future__ import annotations

import bz2
import codecs
import gzip
import lzma
import re

import pytest

from radixflow.jsonl import json_object, json_value, read_text


def test_a_byte_order_mark_is_dropped_and_the_rest_kept_as_written(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(codecs.BOM_UTF8 + '{"a": "é"}\r\n\n'.encode())
    assert read_text(path) == '{"a": "é"}\r\n\n'


@pytest.mark.parametrize("bom", [b"", codecs.BOM_UTF8])
def test_a_byte_that_is_not_utf8_is_named_by_its_line_and_column(tmp_path, bom):
    # the decoder said "can't decode byte 0xe9 in position 19": an offset in the whole file
    # (after a byte-order mark, which it did not count), where a JSONL reader names lines
    path = tmp_path / "in.jsonl"
    path.write_bytes(bom + b'{"a": 1}\n{"b": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=re.escape("line 2: not UTF-8 text (byte 0xe9 at column 11)")):
        read_text(path)


def test_a_utf16_file_is_named_as_one(tmp_path):
    # what Windows PowerShell 5's `>` writes: each line failed as byte 0xff at position 0
    path = tmp_path / "in.jsonl"
    path.write_text('{"a": 1}\n', encoding="utf-16")
    with pytest.raises(ValueError, match=re.escape("line 1: not UTF-8 text (UTF-16: save it as UTF-8)")):
        read_text(path)


def test_a_line_nested_too_deeply_is_a_value_error():
    # Python's parser raised RecursionError: `score --input` and `run-batch` ended in a traceback
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError, match=re.escape("nested too deeply")):
        json_object(deep, "context, candidates")


@pytest.mark.parametrize("deep", ["[" * 100_000 + "]" * 100_000, '{"a": ' * 100_000 + "1" + "}" * 100_000])
def test_a_document_nested_too_deeply_is_a_value_error(deep):
    # json.loads raises RecursionError, which no reader that catches ValueError for "not JSON" caught
    with pytest.raises(ValueError, match=r"^nested too deeply$"):
        json_value(deep)
    with pytest.raises(ValueError, match=r"^nested too deeply$"):
        json_value(deep.encode())


def test_a_document_json_reads_is_read_as_json_reads_it():
    assert json_value('{"a": [1, 2.5, null, NaN]}')["a"][:3] == [1, 2.5, None]


@pytest.mark.parametrize(("opener", "kind"), [(gzip.open, "gzip"), (bz2.open, "bzip2"), (lzma.open, "xz")])
def test_a_compressed_file_is_named_as_one(tmp_path, opener, kind):
    # a gzipped JSONL file failed as "byte 0x8b at column 2", which says nothing of why
    path = tmp_path / "in.jsonl.gz"
    with opener(path, "wt") as f:
        f.write('{"a": 1}\n' * 50)
    said = f"line 1: not UTF-8 text (a {kind}-compressed file: decompress it first)"
    with pytest.raises(ValueError, match=re.escape(said)):
        read_text(path)


def test_a_byte_order_mark_starting_a_later_line_is_named_as_one():
    # two files joined with cat: json's own message advised "decode using utf-8-sig"
    with pytest.raises(ValueError, match="byte order mark starts this line") as caught:
        json_object('\ufeff{"id": "a"}', "a request")
    assert "utf-8-sig" not in str(caught.value)
