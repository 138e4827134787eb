"""Cost model of a worker call, pure Python (no torch), bottom up: `shape` (what a model and a
round's chunks are), `kernel_times` (one kernel call on one GPU: measured tables, roofline),
`hardware` (profiles), `round_cost` (a round's time, kernel by kernel or by fitted rates)."""
