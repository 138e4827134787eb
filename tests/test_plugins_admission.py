"""A plugin admission's positions are integers, as a placement's are (a float equal to one is no
position); the other protocols' answers are in tests/test_plugin_answers.py."""

from __future__ import annotations

import pytest

from radixflow.problems import ProblemError
from radixflow.scheduler.admission import AdmissionContext, CheckedAdmission


class Floats:
    """A plugin admission answering ``answer``."""

    name = "floats"

    def __init__(self, answer: list[object]) -> None:
        self.answer = answer

    def may_evict(self, ctx: AdmissionContext) -> list[object]:
        return self.answer


def _ctx(wanted: list[int]) -> AdmissionContext:
    return AdmissionContext(wanted, branch_points=list, predicted_fork=lambda: None, tail=64, resumed=0)


@pytest.mark.parametrize(
    ("answer", "said"), [([32.0], "32.0 is not an integer"), ([True], "True is not an integer")]
)
def test_an_admission_answering_a_position_as_a_float_or_a_bool_is_told_in_one_line(answer, said):
    # 32.0 == 32 and True == 1 passed the check, and went on into the cache as floats and bools,
    # which a placement answering them is refused for
    with pytest.raises(ProblemError) as caught:
        CheckedAdmission("floats", Floats(answer)).may_evict(_ctx([1, 32, 64]))
    assert str(caught.value).count("\n") == 0
    assert f"'floats' (Floats) may_evict returned {answer!r}: {said}" in str(caught.value)


def test_an_admission_answering_integers_gets_plain_ints_sorted_once():
    numpy = pytest.importorskip("numpy")
    got = CheckedAdmission("floats", Floats([numpy.int64(64), 32, 64])).may_evict(_ctx([32, 64]))
    assert got == [32, 64]
    assert [type(p) for p in got] == [int, int]
