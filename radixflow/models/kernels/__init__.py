"""Recurrences as pure tensor functions on one segment, or one token of a batch of sequences
(no modules, no batches, no pools)."""
