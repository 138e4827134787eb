"""Incremental detokenization and stop strings (generation/detokenize.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("tokenizers")

from radixflow.generation.detokenize import IncrementalDetokenizer, StopStrings, token_texts
from radixflow.generation.tokenizer import TextTokenizer
from radixflow.models.io.tokenizer import save_tokenizer, train_tokenizer

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "naïve café, 日本語のテキスト and an emoji 🙂 in the middle",
    "  leading spaces\nand\ttabs, digits 12345 and $9.99",
    "<|im_start|>user\nhello<|im_end|>",
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> TextTokenizer:
    path = tmp_path_factory.mktemp("tok")
    save_tokenizer(train_tokenizer(512), path)
    return TextTokenizer.load(path)


@pytest.mark.parametrize("text", TEXTS)
def test_token_texts_join_to_the_decoded_text(tokenizer, text):
    ids = tokenizer.encode(text)
    texts = token_texts(tokenizer, ids)
    assert "".join(texts) == tokenizer.decode(ids) == text
    assert all("\ufffd" not in t for t in texts)  # no token hands out half a character
    assert len(texts) == len(ids)


def test_a_split_character_appears_with_the_token_that_completes_it(tokenizer):
    ids = tokenizer.encode("🙂")  # four UTF-8 bytes; the tiny vocabulary has no merge for them
    assert len(ids) > 1
    detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=False)
    pieces = [detok.push(t) for t in ids]
    assert pieces[:-1] == [""] * (len(ids) - 1) and pieces[-1] == "🙂"


def test_context_keeps_the_leading_space_and_special_tokens_can_be_skipped(tokenizer):
    prompt, rest = tokenizer.encode("hello"), tokenizer.encode(" world<|im_end|>")
    detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=True, context=prompt)
    assert "".join(detok.push(t) for t in rest) + detok.flush() == " world"
    keep = IncrementalDetokenizer(tokenizer, skip_special_tokens=False, context=prompt)
    assert "".join(keep.push(t) for t in rest) == " world<|im_end|>"


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_a_prompt_ending_inside_a_character_leaves_the_output_its_own_text(tokenizer, cut):
    # a prompt of token ids may end inside a character: the output's text is that of its own
    # tokens (the completed character's start is the prompt's), never the bytes dropped
    ids = tokenizer.encode("🙂x", add_special_tokens=False)
    assert len(ids) == 5  # four byte tokens, then "x"
    detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=False, context=ids[:cut])
    text = "".join(detok.push(t) for t in ids[cut:]) + detok.flush()
    assert text == tokenizer.decode(ids[cut:]) == "\ufffd" * (4 - cut) + "x"


def test_flush_hands_out_an_unfinished_character(tokenizer):
    ids = tokenizer.encode("🙂")
    detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=False)
    assert [detok.push(t) for t in ids[:2]] == ["", ""]
    assert detok.flush().startswith("\ufffd")


def test_stop_strings_earliest_match_and_search_window():
    stops = StopStrings(["END", "\n\n", "x"])
    assert stops.find("abc\n\nEND", new_from=0) == 3
    assert stops.find("abcx", new_from=3) == 3
    # a match that ended before new_from was found by an earlier call; the window still sees one
    # that straddles new_from
    assert stops.find("aaaEN", new_from=3) is None and stops.find("aaaEND", new_from=5) == 3
    assert StopStrings([]).find("anything", 0) is None


def test_only_a_stop_string_ending_past_new_from_is_found():
    # min_tokens: the text before new_from may hold a stop string that must not count (a
    # shorter one than the longest, within the longest's window)
    stops = StopStrings(["x", "a long stop"])
    assert stops.find("axbc", new_from=3) is None
    assert stops.find("axbcx", new_from=3) == 4
    assert stops.find("axbx", new_from=3) == 3


def test_held_back_is_the_longest_tail_that_may_start_a_stop_string():
    stops = StopStrings(["STOP", "ST!"])
    assert stops.held_back("abcS") == 1
    assert stops.held_back("abcST") == 2
    assert stops.held_back("abcSTO") == 3
    assert stops.held_back("abcSX") == 0
    assert StopStrings([]).held_back("abc") == 0
