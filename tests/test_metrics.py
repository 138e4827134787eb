"""Summary figures."""

from __future__ import annotations

import math

from radixflow.bench.metrics import agreement, median_margin, outputs_digest, percentile
from radixflow.scheduler import Request


def test_percentile_interpolates():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert percentile([1.0, 2.0, 3.0], 100) == 3.0
    assert math.isnan(percentile([], 50))


def test_agreement_counts_misses_and_failures():
    reqs = [Request(str(i), (1,)) for i in range(4)]
    for r, tok in zip(reqs, [7, 8, 9, None], strict=True):
        r.output_token = tok
    assert agreement(reqs, {"0": 7, "1": 8, "2": 0, "3": 5}) == 0.5


def test_margin_and_digest():
    r = Request("a", (1,))
    r.top_logprobs = [(3, -0.1), (4, -0.6)]
    assert median_margin([r]) == 0.5
    assert outputs_digest([1, 2]) != outputs_digest([2, 1])
