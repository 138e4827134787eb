"""Incremental detokenization and stop strings (generation/detokenize.py)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("tokenizers")

from radixflow.generation import detokenize
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


def watched(tokenizer, widest: list[int]) -> type:
    """A decoder class over ``tokenizer`` that records in ``widest`` how many ids each decode took."""

    class Watched:
        def decode(self, ids, skip_special_tokens=False):
            widest.append(len(ids))
            return tokenizer.decode(ids, skip_special_tokens)

        def decode_each(self, ids, skip_special_tokens=False):
            return tokenizer.decode_each(ids, skip_special_tokens)

    return Watched


def test_skipped_special_tokens_do_not_widen_the_window_each_token_is_decoded_in(tokenizer):
    """A skipped special token adds no text, so the window stayed where it was and grew by one
    with each: a run of them (an EOS repeated under ignore_eos) decoded the whole run again on
    every token, time quadratic in its length on the engine thread (0.4 s for 4,000)."""
    widest: list[int] = []
    Watched = watched(tokenizer, widest)
    end = tokenizer.encode("<|im_end|>")
    (special,) = end
    run = [*tokenizer.encode("hi"), *[special] * 500, *tokenizer.encode(" there 🙂")]
    detok = IncrementalDetokenizer(Watched(), skip_special_tokens=True, context=tokenizer.encode("oh"))
    text = "".join(detok.push(t) for t in run) + detok.flush()
    assert text == tokenizer.decode(run, skip_special_tokens=True) == "hi there 🙂"
    assert max(widest) <= 16
    kept = IncrementalDetokenizer(tokenizer, skip_special_tokens=False)
    assert "".join(kept.push(t) for t in run) == tokenizer.decode(run)  # kept: each is its text


def test_a_run_that_never_completes_a_character_is_streamed_in_a_bounded_window(tokenizer):
    """A run of tokens that never forms valid UTF-8 (lone continuation bytes) kept every token
    pending, the window growing by one each: each token decoded the whole run again (time
    quadratic in its length: 1 s for 4,000 on the engine thread) and none of its text streamed."""
    widest: list[int] = []
    Watched = watched(tokenizer, widest)
    smile = tokenizer.encode("🙂", add_special_tokens=False)  # four byte tokens
    run = [*tokenizer.encode("a", add_special_tokens=False), *[smile[2]] * 500, *smile, smile[0]]
    run += tokenizer.encode("x", add_special_tokens=False)
    detok = IncrementalDetokenizer(Watched(), skip_special_tokens=False)
    pieces = [detok.push(t) for t in run]
    assert "".join(pieces) + detok.flush() == tokenizer.decode(run)
    assert max(widest) <= 32
    assert "".join(pieces[:400]).count("\ufffd") > 300  # streamed as it came, not held to the end
    # a character after the run still comes whole, with its last token (and the run's last bytes)
    assert pieces[504].endswith("🙂")


class _Bytes:
    """A byte-level decoder over a few pieces: lead bytes, continuation bytes, pieces that end one
    character and start the next (every cut between them splits one), bytes that are never UTF-8."""

    PIECES = (
        b"\xe4",
        b"\xb8",
        b"\xad",
        b"\xad\xe4",
        b"\xb8\xad\xe4",
        b"\xf0\x9f",
        b"\x99\x82",
        b"\xff",
        b"x",
        b" ",
    )

    def decode(self, ids, skip_special_tokens=False):
        return b"".join(self.PIECES[i] for i in ids).decode("utf-8", errors="replace")

    def decode_each(self, ids, skip_special_tokens=False):
        return [self.decode([i]) for i in ids]


@given(ids=st.lists(st.integers(0, len(_Bytes.PIECES) - 1), max_size=80), long=st.integers(0, 40))
@settings(max_examples=200, deadline=None)
def test_any_run_of_byte_pieces_streams_the_text_it_decodes_to(ids, long):
    # a long run (pending for good, or characters split by every cut) somewhere in it
    ids = ids[:5] + [0] + [4] * long + ids[5:] if long % 2 else ids[:5] + [7] * long + ids[5:]
    detok = IncrementalDetokenizer(_Bytes(), skip_special_tokens=False)
    pieces = [detok.push(t) for t in ids]
    assert "".join(pieces) + detok.flush() == _Bytes().decode(ids)


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


def _first_by_definition(stops: list[str], text: str, new_from: int) -> tuple[int, str] | None:
    """Every occurrence of every stop string that ends past ``new_from``: the earliest start,
    the first listed of those starting there."""
    hits = [
        (at, i)
        for i, s in enumerate(stops)
        for at in range(len(text) - len(s) + 1)
        if text.startswith(s, at) and at + len(s) > new_from
    ]
    if not hits:
        return None
    at, i = min(hits)
    return at, stops[i]


@settings(max_examples=300, deadline=None)
@given(
    stops=st.lists(st.text("ab!", min_size=1, max_size=6), min_size=1, max_size=4),
    text=st.text("ab!c", max_size=14),
    new_from=st.integers(0, 15),
)
def test_first_is_what_its_definition_says(stops, text, new_from):
    new_from = min(new_from, len(text))
    hit = StopStrings(stops).first(text, new_from)
    assert (None if hit is None else (hit.at, hit.stop)) == _first_by_definition(stops, text, new_from)


def test_first_costs_no_object_per_stop_string_that_is_not_there():
    """A hit was built for every stop string on every token (whether found or not): with
    20,000 stop strings, 16-85 ms a token on the engine thread."""
    stops = StopStrings([f"stop{i}!" for i in range(20_000)] + ["o w"])
    text = "hello world " * 40
    built = []
    original = detokenize.StopHit

    class Counted(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: object) -> None:
            built.append(args)
            super().__init__(*args)

    detokenize.StopHit = Counted
    try:
        hit = stops.first(text, len(text) - 12)
    finally:
        detokenize.StopHit = original
    assert hit is not None and (hit.at, hit.stop) == (len(text) - 8, "o w")
    assert len(built) <= 1


def test_held_back_is_the_longest_tail_that_may_start_a_stop_string():
    stops = StopStrings(["STOP", "ST!"])
    assert stops.held_back("abcS") == 1
    assert stops.held_back("abcST") == 2
    assert stops.held_back("abcSTO") == 3
    assert stops.held_back("abcSX") == 0
    assert StopStrings([]).held_back("abc") == 0


def _held_back_by_definition(stops: list[str], text: str) -> int:
    longest = max((len(s) for s in stops), default=0)
    tails = range(min(longest - 1, len(text)), 0, -1)
    return next((n for n in tails if any(s.startswith(text[-n:]) for s in stops)), 0)


@settings(max_examples=300, deadline=None)
@given(
    stops=st.lists(st.text("ab!", min_size=1, max_size=6), min_size=1, max_size=4),
    text=st.text("ab!c", max_size=14),
)
def test_held_back_is_what_its_definition_says(stops, text):
    assert StopStrings(stops).held_back(text) == _held_back_by_definition(stops, text)


def test_held_back_does_not_grow_with_the_square_of_the_text():
    """Each tail was sliced and compared in turn: with a long stop string, every token of a long
    output cost time quadratic in the text (34 ms at 16k characters, on the engine thread)."""
    stops = StopStrings(["q" * 100_000, "w" * 200])
    text = "ab " * 40_000  # no q or w: nothing to hold back
    start = time.thread_time()  # this thread's CPU time: a busy machine's stalls do not count
    for _ in range(10):
        assert stops.held_back(text) == 0
    assert time.thread_time() - start < 0.5  # was ~4 s
    assert stops.held_back(text + "qq") == 2 and stops.held_back(text + "w" * 150) == 150
