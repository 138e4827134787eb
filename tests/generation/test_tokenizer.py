"""The generation layer's tokenizer (generation/tokenizer.py): each token's own bytes, and long
texts through the GIL-releasing batch calls giving the same tokens."""

from __future__ import annotations

import pytest

pytest.importorskip("tokenizers")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from radixflow.generation.tokenizer import TextTokenizer
from radixflow.models.io.tokenizer import save_tokenizer, train_tokenizer

TEXTS = ["naïve café, 日本語 and 🙂 in the middle", "<|im_start|>user\nhé<|im_end|>"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> TextTokenizer:
    path = tmp_path_factory.mktemp("tok")
    save_tokenizer(train_tokenizer(512), path)  # byte-level BPE, as the zoo's and GPT-2's
    return TextTokenizer.load(path)


@pytest.fixture(scope="module")
def sentencepiece_like() -> TextTokenizer:
    """A sentencepiece-style BPE: ``▁`` marks a word start, unknown bytes fall back to <0xNN>."""
    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": 1 + b for b in range(256)}, "▁": 257, "a": 258, "▁a": 259}
    model = models.BPE(vocab=vocab, merges=[("▁", "a")], unk_token="<unk>", byte_fallback=True)
    backend = Tokenizer(model)
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return TextTokenizer(backend, {})


@pytest.mark.parametrize("text", TEXTS)
def test_token_bytes_join_to_the_text_even_where_a_token_splits_a_character(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert any("\ufffd" in tokenizer.token_text(t) for t in ids)  # some token holds a partial character
    assert b"".join(tokenizer.token_bytes(t) for t in ids) == text.encode("utf-8")


def test_a_whole_token_has_the_bytes_of_its_text(tokenizer):
    for token in range(tokenizer.info.vocab_size):
        text = tokenizer.token_text(token)
        if "\ufffd" not in text:
            assert tokenizer.token_bytes(token) == text.encode("utf-8"), token


def test_sentencepiece_pieces_and_byte_fallback_give_their_bytes(sentencepiece_like):
    ids = sentencepiece_like.encode("a é a", add_special_tokens=False)
    raw = [sentencepiece_like.token_bytes(t) for t in ids]
    assert b"".join(raw) == " a é a".encode()  # the word-start mark is the space it stands for
    assert [r for r in raw if r[0] >= 0x80] == [b"\xc3", b"\xa9"]  # é as two fallback bytes


def test_long_texts_tokenize_and_decode_as_short_ones_do(tokenizer):
    sentence = "The river winds through the valley, naïve café."
    pieces = [sentence] + [" " + sentence] * 199  # a word starts with its space: pieces split cleanly
    text = "".join(pieces)  # ~10k characters: past the threshold for the batch calls
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert ids == [t for piece in pieces for t in tokenizer.encode(piece, add_special_tokens=False)]
    assert tokenizer.decode(ids) == text
