"""Fused decode steps in plain C (`steps.c`), compiled at first use and called through ctypes."""
