"""Fitting cost-model coefficients to timed worker calls of the torch runner."""
