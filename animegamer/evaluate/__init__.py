"""Evaluation: play benchmark games and measure the paper's metrics (docs/design.md §12).

`python -m animegamer.evaluate --help`; `benchmark` (games, playing them resumably), `metrics`
(definitions and scoring), `backbones` (CLIP, DreamSim, the judge), `reporting` (files and
compare).
"""
