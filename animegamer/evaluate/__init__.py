"""Evaluation: play benchmark games and measure the paper's metrics (DESIGN §12).

`python -m animegamer.evaluate --help`; `benchmark` (games, playing them resumably), `metrics`
(definitions and scoring), `backbones` (CLIP, DreamSim, the judge), `report` (files and compare).
"""
