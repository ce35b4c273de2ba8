"""Configuration: the typed, frozen config of a run (``schema``), the paper's presets and variants
(``presets``) and the checks of a config before any work (``validation``). Above ``bpo.core``,
below the run infrastructure (docs/design.md)."""
