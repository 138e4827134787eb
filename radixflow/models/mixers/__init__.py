"""Sequence mixers shared by several families: gated attention, Gated DeltaNet, Mamba2. They run
packed batches and own the per-sequence state restore and snapshots."""
