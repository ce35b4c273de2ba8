"""The mathematics: one concept per module, pure functions on arrays (return estimators, FQE, the
behaviour target and μ's losses, networks and distributions, the replay, diagnostics, KL forms).
Imports nothing of ``bpo`` outside this folder (docs/design.md)."""
