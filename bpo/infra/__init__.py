"""Run infrastructure: checkpoints, run directories written atomically, publishing and rescue,
process groups and signals, the stall guard, progress, TensorBoard, provenance, the process-wide
JAX settings and the ``BPO_*`` environment settings. Knows configs, not the mathematics
(docs/design.md)."""
