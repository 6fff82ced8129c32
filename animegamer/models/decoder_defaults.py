"""Constants of the animation decoder and of its release checkpoint, each defined once.

This module imports nothing heavy, so the character registry, the settings, the Hub resolver and
the converters share these values without loading torch or diffusers.
"""

from __future__ import annotations

RELEASE_CHECKPOINT_NAME = "mp_rank_00_model_states.pt"
"""The DeepSpeed file of a SAT release decoder, in the folder that the release's `latest` names."""

SAT_PREFIX = "model.diffusion_model."
"""The prefix of the network's keys in that file's `module` state dict."""

DEFAULT_LATENT_SIZE = (60, 90)
"""The decoder's latent height and width (480×720 video). The checkpoint does not tell."""

DEFAULT_SAMPLE_FRAMES = 17
"""Video frames of a shot: 5 latent frames after the VAE's 4× temporal compression."""

DEFAULT_STEPS = 50
"""Denoising steps of a turn (the release's sampler)."""

DEFAULT_GUIDANCE = 6.0
"""Classifier-free guidance weight `g` of the dynamic schedule `1 + g·(1 − cos(π·p⁵))/2`."""

GUIDANCE_RANGE = (1.0, 20.0)
"""The `g` a setting, a recipe or a character folder may ask for (inclusive)."""
