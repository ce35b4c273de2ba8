"""Research instruments: the return-estimator probe (``probe``), the exact tabular variance
calculations (``variance``) and the statistics over seeds (``stats``). Above the mathematics,
below the learners (docs/design.md)."""
