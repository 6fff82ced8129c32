"""AnimeGamer-Nano: a small procedural anime world that the project renders, trains on and plays
on a CPU (issue 14).

`vocabulary` (the words the world knows: `NANO_VOCABULARY`), `sprites` (Qiqi, Sosuke and a
friend), `scene` (places × times of day), `world` (shots, episodes, state rules, the dataset),
and the command line `python -m animegamer.nano world|train`.
"""

from animegamer.nano.vocabulary import NANO_VOCABULARY, NanoVocabulary

NANO_NAME = "Nano"
"""The name of the Nano world's character folder (its manifest): one model set plays every
character of the world."""

__all__ = ["NANO_NAME", "NANO_VOCABULARY", "NanoVocabulary"]
