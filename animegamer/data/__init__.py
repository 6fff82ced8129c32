"""The data side of training: anime videos → an annotated, episode-ordered `datasets` dataset.

`python -m animegamer.data build|show` (see `__main__`). Modules, one job each: `decode` (ffmpeg
reading), `shots` (cuts and clips), `flow` (motion scope and levels; torch-free, the game and
training import it), `extract` (the per-video CPU stage), `annotate` (answers and their strict
parser), `features` (cached shot features), `episodes`, `dataset` (rows and Parquet), `report`,
`store` (work records, atomic writes), `layout` (file names), `build` (the stages), `show`.
Nothing here is imported by the game at start-up.
"""
