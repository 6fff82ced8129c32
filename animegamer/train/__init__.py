"""Training a character (docs/design.md §11): `train(recipe, dataset, out, phases=...)`, whose
command line is `python -m animegamer.train {vae,decoder,game-state,adapt,all}`.

Phase a (`decoder_phase.train_decoder`): the shot encoder and the decoder; phase b
(`game_state_phase`): the game-state model; phase c (`decoder_phase.adapt`): the decoder adapted
to the game-state model's predictions. One YAML recipe (`recipe.load_recipe`) holds the settings;
`run` runs the phases in order.
"""

from animegamer.train.run import TrainOptions, TrainResult, train

__all__ = ["TrainOptions", "TrainResult", "train"]
