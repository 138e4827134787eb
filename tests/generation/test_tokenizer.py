"""The generation layer's tokenizer (generation/tokenizer.py): each token's own bytes, and long
texts through the GIL-releasing batch calls giving the same tokens."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("tokenizers")

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers

from radixflow.generation.tokenizer import TextTokenizer, TextTooLong, TokenizerError
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


def test_each_tokens_text_keeps_special_tokens_unless_asked_to_skip_them(tokenizer):
    # the backend's batch decode skips them by default: each special token came back empty, and
    # that empty text was kept as its `token_text` (a logprob's name) from then on
    ids = tokenizer.encode("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False)
    fresh = TextTokenizer(tokenizer._tok, {})  # nothing decoded yet
    alone = fresh.decode_each(ids)
    assert alone == [tokenizer.decode([t]) for t in ids] and "".join(alone) == tokenizer.decode(ids)
    assert fresh.token_text(ids[0]) == "<|im_start|>"
    assert "".join(fresh.decode_each(ids, skip_special_tokens=True)) == tokenizer.decode(ids, True)


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


# --------------------------------------------------------------------------- the length bound
# texts that pack the most text into the fewest tokens the vocabulary allows: the bound is sound
# only if it never exceeds their count (a prompt that fits must never be refused unread)
DENSE = ["", "a", " " * 5000, "0" * 3000, "🙂" * 700, "e\u0301" * 900, "<|im_start|>" * 300, "x" * 4097]


def _longest_token_runs(tok: TextTokenizer) -> list[str]:
    texts = [tok.decode([t]) for t in range(tok.info.vocab_size)]
    return [t * 50 for t in sorted(texts, key=len)[-20:]]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400) | st.lists(st.sampled_from(TEXTS + DENSE[:4]), max_size=6).map("".join))
def test_the_length_bound_never_exceeds_the_token_count(tokenizer, sentencepiece_like, text):
    text = text.encode("utf-8", "replace").decode("utf-8")  # the tokenizer refuses lone surrogates
    for tok in (tokenizer, sentencepiece_like):
        assert tok.min_tokens(text) <= len(tok.encode(text, add_special_tokens=False))


@pytest.mark.parametrize("kind", ["byte-level", "sentencepiece"])
def test_the_bound_holds_for_the_densest_texts_and_refuses_only_what_cannot_fit(
    tokenizer, sentencepiece_like, kind
):
    tok = tokenizer if kind == "byte-level" else sentencepiece_like
    for text in DENSE + _longest_token_runs(tok):
        n = len(tok.encode(text, add_special_tokens=False))
        assert tok.min_tokens(text) <= n, text[:20]
        # a prompt that fits is tokenized, one filling the context too (it runs with max_tokens 0)
        tok.limited(n).encode(text, add_special_tokens=False)
    long = "hello world " * 20_000
    assert tok.min_tokens(long) > 1000
    with pytest.raises(TextTooLong, match=r"prompt: has at least \d+ tokens; the model context is 1000"):
        tok.limited(1000).encode(long)


def test_a_normalizer_that_shortens_text_is_counted_after_it():
    """NFC makes each ``e`` + combining accent one ``é``, four of which are one token: counted
    before normalizing, the text would seem to need more tokens than it has."""
    pieces = ["▁", "é", "éé", "éééé"]
    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": 1 + b for b in range(256)}}
    vocab.update({p: 257 + i for i, p in enumerate(pieces)})
    model = models.BPE(vocab=vocab, merges=[("é", "é"), ("éé", "éé")], unk_token="<unk>", byte_fallback=True)
    backend = Tokenizer(model)
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    tok = TextTokenizer(backend, {})
    text = "e\u0301" * 2000
    n = len(tok.encode(text))
    longest = max(len(p) for p in vocab)
    assert -(-len(text) // longest) > n  # the raw text's length would refuse it
    assert tok.min_tokens(text) <= n
    tok.limited(n + 1).encode(text)


def _rebuilt(tok: TextTokenizer, change) -> TextTokenizer:
    backend = Tokenizer.from_str(tok._tok.to_str())
    change(backend)
    return TextTokenizer(backend, {})


@pytest.mark.parametrize(
    "change",
    [
        lambda b: setattr(b, "pre_tokenizer", pre_tokenizers.Whitespace()),  # drops whitespace
        lambda b: setattr(b, "pre_tokenizer", pre_tokenizers.Split(" ", "removed")),  # drops the spaces
        lambda b: b.add_tokens([AddedToken("<mask>", lstrip=True)]),  # swallows the spaces before it
        lambda b: b.enable_truncation(8),  # any text fits
    ],
    ids=["whitespace", "split-removed", "lstrip-token", "truncation"],
)
def test_pipelines_that_may_drop_text_get_no_bound(tokenizer, change):
    tok = _rebuilt(tokenizer, change)
    assert tok.min_tokens(" " * 10_000 + "<mask>") == 0
    tok.limited(10).encode(" " * 10_000)  # tokenized, not refused unread


@pytest.mark.parametrize(
    "config, jinja, error",
    [
        ({"chat_template": 5}, None, r"tokenizer_config\.json: chat_template must be a string, got int"),
        (
            {"chat_template": [{"name": "default", "template": ["x"]}]},
            None,
            r"tokenizer_config\.json: chat_template must be a string, got list",
        ),
        ({}, b"\xff{{ messages }}", r"cannot read .*chat_template\.jinja: 'utf-8' codec"),
        ({"chat_template": "{% for %}"}, None, r"_config\.json: chat_template does not compile \(line 1: "),
        ({}, b"{{ messages }\n{% if %}", r"chat_template\.jinja: chat_template does not compile \(line 1: "),
    ],
)
def test_a_chat_template_not_text_or_not_compiling_is_refused_on_load(tmp_path, config, jinja, error):
    """Refused with the file named when the tokenizer loads: not text was a TypeError at the first
    chat; a template that does not compile can render no conversation, and every chat request
    failed as 'the chat template failed: Expected an expression', a 400 blaming the request's
    messages and naming no file."""
    import json

    save_tokenizer(train_tokenizer(512), tmp_path, chat_template=None)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    if jinja is not None:
        (tmp_path / "chat_template.jinja").write_bytes(jinja)
    with pytest.raises(TokenizerError, match=error):
        TextTokenizer.load(tmp_path)


@pytest.mark.parametrize("name", ["tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"])
@pytest.mark.parametrize(
    "text, says",
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),  # json.loads raised RecursionError
        ('{"eos_token": ' + "9" * 5000 + "}", "Exceeds the limit"),  # a ValueError, no JSONDecodeError
    ],
    ids=["nested", "long-int"],
)
def test_a_tokenizer_file_json_cannot_read_is_a_tokenizer_error(tmp_path, name, text, says):
    """Each escaped the tokenizer's load as a traceback (the model never served), where a file
    that is not JSON at all is a TokenizerError naming it."""
    save_tokenizer(train_tokenizer(512), tmp_path, chat_template=None)
    (tmp_path / name).write_text(text)
    with pytest.raises(TokenizerError) as info:
        TextTokenizer.load(tmp_path)
    assert name in str(info.value) and "\n" not in str(info.value)
    if name != "tokenizer.json":  # the tokenizers library's own words
        assert says in str(info.value)
