"""Recurrences as pure tensor functions on one segment (no modules, no batches, no pools)."""
