"""Scheduling outcomes pinned to their recorded values: a refactor may not change what runs when.

See `tests/behaviour_pins.py` for the workloads and how to regenerate the record after an
intended behaviour change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from behaviour_pins import cases, outcome

PINS = json.loads((Path(__file__).parent / "data" / "behaviour_pins.json").read_text())


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.name)
def test_scheduling_outcome_is_pinned(case):
    for policy in ("native", "radixflow"):
        assert outcome(case, policy) == PINS[f"{case.name}/{policy}"], policy


def test_pins_cover_both_policies_of_every_case():
    assert set(PINS) == {f"{c.name}/{p}" for c in cases() for p in ("native", "radixflow")}
    readme = PINS["readme-default/native"], PINS["readme-default/radixflow"]
    assert (readme[0]["rounds"], readme[1]["rounds"]) == (9, 7)  # the README's headline figures
    assert (readme[0]["bubble_tokens"], readme[1]["bubble_tokens"]) == (4032, 0)
