"""The held-out evaluation: the greedy policy's ledger and the trivial baselines on the same
windows, the probe set's TD loss and the tear sheet."""
