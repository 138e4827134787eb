"""The `adaptive` scheduling policy and the parts only it uses: ranking, the round's cut, recompute,
FCFS bound."""
