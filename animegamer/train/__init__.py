"""Training a character (docs/design.md §11):
`python -m animegamer.train {decoder,game-state,adapt,all}`.

Phase a (`decoder_phase.train_decoder`): the shot encoder and the decoder; phase b
(`game_state_phase`): the game-state model; phase c (`decoder_phase.adapt`): the decoder adapted
to the game-state model's predictions. One YAML recipe (`recipe.load_recipe`) holds the settings.
"""
