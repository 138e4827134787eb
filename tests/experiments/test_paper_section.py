"""The report's "Against the paper" table: where each median falls against the paper's range."""

from __future__ import annotations

import pytest

from radixflow.experiments.analysis import Span
from radixflow.experiments.paper_section import _paper_position


@pytest.mark.parametrize(
    ("median", "says"),
    [(-0.5, "beyond"), (-0.1, "in range"), (-0.005, "short"), (0.0, "short"), (0.004, "short")]
    + [(0.05, "opposite")],
)
def test_a_median_within_one_percent_is_short_of_the_paper_not_opposite_to_it(median, says):
    # a +0.4% change is what the report reads as unchanged everywhere else (within ±1%): it was
    # marked "opposite", as if the policy raised mean latency, beside a 0.0% marked "short"
    assert _paper_position(Span(median, median, median, 3), "mean_latency_s") == f" · {says}"
