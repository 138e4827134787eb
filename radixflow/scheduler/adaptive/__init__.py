"""The `adaptive` scheduling policy and the parts only it uses: ranking, deferral, recompute, FCFS bound."""
