"""AnimeGamer-Nano: a small procedural anime world that the project renders, trains on and plays
on a CPU (issue 14).

`vocabulary` (the words the world knows: `NANO_VOCABULARY`), `sprites` (Qiqi, Sosuke and a
friend), `scene` (places × times of day), `world` (shots, episodes, state rules, the dataset),
and the command line `python -m animegamer.nano world|train`.
"""

from animegamer.nano.vocabulary import NANO_VOCABULARY, NanoVocabulary

NANO_WORLD = "nano"
"""The `world` an installed Nano character folder's manifest names (`convert.character`): one
model set per character, as the release has one per film."""

__all__ = ["NANO_VOCABULARY", "NANO_WORLD", "NanoVocabulary"]
