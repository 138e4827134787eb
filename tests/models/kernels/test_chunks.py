"""ChunkPlan: segments of several sequences as equal chunks, step-major, padding inert."""

from __future__ import annotations

import pytest
import torch

from radixflow.models.kernels.chunks import ChunkPlan, ChunkSave

CPU = torch.device("cpu")


def test_sequences_run_longest_first_and_a_step_is_one_slice():
    # seq 0: one 3-token segment; seq 1: 5 tokens then 4 (saved after each); chunk size 4
    plan = ChunkPlan.build([[(0, 3, None)], [(3, 8, 7), (8, 12, 9)]], 12, 4, CPU)
    assert plan.size == 4 and plan.order == (1, 0)  # seq 1 has 3 chunks (4 + 1 padded, 4)
    assert plan.steps == (2, 1, 1) and plan.chunks == 4
    assert [(s.start, s.stop) for s in plan.step_slices()] == [(0, 2), (2, 3), (3, 4)]
    pad = plan.pad_row
    assert plan.rows.view(4, 4).tolist() == [[3, 4, 5, 6], [0, 1, 2, pad], [7, pad, pad, pad], [8, 9, 10, 11]]
    assert plan.saves == (ChunkSave(1, 0, 7), ChunkSave(2, 0, 9))  # after the segment's last chunk


def test_gather_pads_with_zeros_and_scatter_is_its_inverse():
    plan = ChunkPlan.build([[(0, 3, None)], [(3, 8, 1), (8, 12, None)]], 12, 4, CPU)
    x = torch.arange(1, 13, dtype=torch.float32)[:, None].repeat(1, 2)  # row r holds r + 1
    chunks = plan.gather(x)
    assert chunks.shape == (4, 4, 2)
    assert chunks[1, 3].tolist() == [0.0, 0.0] and chunks[2, 1:].abs().sum() == 0  # padding
    assert torch.equal(plan.scatter(chunks, 12), x)


def test_segments_that_leave_a_row_out_are_refused():
    with pytest.raises(ValueError, match="cover 5 token rows, not the 6 given"):
        ChunkPlan.build([[(0, 3, None)], [(4, 6, None)]], 6, 4, CPU)
