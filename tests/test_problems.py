"""`radixflow.problems`: the one-line wording every door shares."""

from __future__ import annotations

import sys
import threading

import pytest

from radixflow.problems import Problem, counted, flag, warn


@pytest.mark.parametrize(
    ("n", "noun", "plural", "expected"),
    [
        (1, "context", None, "1 context"),
        (0, "context", None, "0 contexts"),
        (2, "request", None, "2 requests"),
        (2, "SamplingParams", "SamplingParams", "2 SamplingParams"),
    ],
)
def test_a_count_of_one_takes_the_singular(n, noun, plural, expected):
    assert counted(n, noun, plural) == expected


def test_another_parameter_a_message_names_is_spelled_as_the_door_spells_its_own():
    # `generate --min-tokens 5 --max-tokens 2` said "--min-tokens: ... between 0 and max_tokens (2)"
    problem = Problem("min_tokens", "must be at most max_tokens (2), got 5", mentions=("max_tokens",))
    assert problem.render() == "min_tokens: must be at most max_tokens (2), got 5"
    assert problem.render(flag) == "--min-tokens: must be at most --max-tokens (2), got 5"
    item = problem.of_item("prompt 1", flag)
    assert item == "prompt 1: --min-tokens: must be at most --max-tokens (2), got 5"
    assert problem.within("groups").render() == "groups.min_tokens: must be at most max_tokens (2), got 5"


@pytest.mark.parametrize("integer", [True, False])
def test_an_int_too_large_for_a_float_is_a_problem_not_an_overflow(integer):
    # math.isfinite(10**400) raised OverflowError: `LLM(kv_blocks=10**400)`, a TOML `kv_blocks`
    # of 400 digits, `bench --kv-blocks 999...9` and a request's `"seed": 1e400` as digits were
    # tracebacks, not one line
    from radixflow.problems import number_problem

    huge = 10**400
    problem = number_problem("x", huge, integer)
    if integer:  # an integer is finite however long: its range check says what is wrong with it
        assert problem is None
    else:  # a float field cannot hold it, as the command line's float("1e400") cannot
        assert problem is not None and problem.message.startswith("must be a finite number, got 1000")


def test_a_huge_value_is_shown_cut_not_digit_by_digit():
    # `--kv-blocks 999...9` (200 digits) printed every digit back; LLM(kv_blocks=10**300) all 301
    from radixflow.options import EngineOptions
    from radixflow.problems import number_problem, shown

    assert shown(12345) == "12345" and shown("abc") == "'abc'" and shown(1.5) == "1.5"
    assert shown(10**300) == "100000000000...0000 (301 digits)"
    assert shown(-(10**300)) == "-100000000000...0000 (301 digits)"
    assert shown("x" * 100) == "'" + "x" * 36 + "..."
    # past Python's 4300 digits an int has no str at all: the check itself raised ValueError
    assert shown(10**5000) == "an integer of 5001 digits"
    problem = EngineOptions(model="qwen3_5-2b", kv_blocks=10**5000).validate()
    assert problem is not None and problem.message.endswith("got an integer of 5001 digits"), problem
    problem = EngineOptions(model="qwen3_5-2b", kv_blocks=10**300).validate()
    assert problem is not None and problem.message.endswith("got 100000000000...0000 (301 digits)"), problem
    problem = EngineOptions(model="qwen3_5-2b", cache_memory=10**5000).validate()  # bytes, or a size's text
    said = "must be from 1B to 1024TiB, got an integer of 5001 digits"
    assert problem is not None and problem.message == said
    problem = number_problem("rate", "y" * 100)
    assert problem is not None and len(problem.message) < 80, problem


class HeldStream:
    """A stream keeping what is written; the first write of the thread named ``held`` says so
    (``kept``) and waits until ``go`` is set (another thread's whole warning in between)."""

    def __init__(self, held: str, go: threading.Event) -> None:
        self.text, self.held, self.go, self.kept = "", held, go, threading.Event()

    def write(self, text: str) -> int:
        self.text += text
        if threading.current_thread().name == self.held and not self.go.is_set():
            self.kept.set()
            self.go.wait(timeout=30)  # a safety net for a broken test, never the synchronisation
        return len(text)

    def flush(self) -> None:
        pass


def test_warnings_of_two_threads_at_once_keep_to_their_own_lines(monkeypatch):
    # print wrote the text and its newline apart: a warning of another thread between the two
    # ran on the same line ("...firstradixflow: warning: second\n\n")
    go = threading.Event()
    monkeypatch.setattr(sys, "stderr", HeldStream("first", go))
    first = threading.Thread(target=warn, args=("first",), name="first", daemon=True)
    first.start()
    assert sys.stderr.kept.wait(timeout=30)  # its first write is in: it waits in it
    warn("second")
    go.set()
    first.join(timeout=30)
    assert sys.stderr.text == "radixflow: warning: first\nradixflow: warning: second\n"
