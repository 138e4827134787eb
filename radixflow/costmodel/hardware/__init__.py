"""Hardware profiles: the coefficients of a worker call's cost, built in (with sources) or read."""
