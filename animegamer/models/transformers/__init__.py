"""The denoising transformers, one per module, named as in diffusers' `models/transformers/`."""
