"""The Nano world's image tower: the shot encoder's stand-in for CLIP, taught what a frame shows.

A real character's visual reference f_v comes from OpenCLIP ViT-B-16, whose patch tokens say
what is in the frame: who, where and when. The tiny random tower (`tiny_shot_towers`) keeps
where and when (they fill the frame) but hardly who: a Nano character covers 2–3 of the 196
patches, so in one scene the two characters' tokens differ less than one character's in two
poses, and a decoder trained on them paints one palette for both. So `nano world` trains the
random tower first, as CLIP learned from captions: a linear head per label set scores every
token the tower outputs (the penultimate layer's patch tokens, exactly what `image_features`
returns), and the best-scoring token's scores must name the frame's character, place and time.
Taking the maximum over tokens, not their mean, is what teaches the few tokens where the
character stands to say who it is (measured on the 960-shot world, 400 steps: a linear probe
reads the character from the test split's tokens 98 % of the time, against 67 % for the random
tower and 82 % when the heads read the tokens' mean). Its weights are the dataset's
(`DATASET/tower/`); the text tower stays random.

Asking every token, not only the best one, to name the labels was tried and not kept
(docs/nano-experiments.md, v9, v10, v13): the game-state model then keeps who, but the decoder
paints the sprite in several places.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from transformers import CLIPVisionModel

from animegamer.models.shot_encoder import clip_pixel_values


@dataclass(frozen=True)
class TowerTraining:
    """`steps` of AdamW at `lr` on batches of `batch_size` frames, from `seed`."""

    steps: int = 400
    batch_size: int = 32
    lr: float = 1e-3
    seed: int = 0


def patch_tokens(tower: CLIPVisionModel, pixel_values: torch.Tensor) -> torch.Tensor:
    """The tokens `image_features` returns (penultimate layer, CLS dropped): [B, 196, width]."""
    hidden = tower(pixel_values=pixel_values, output_hidden_states=True).hidden_states[-2]
    return hidden[:, 1:]


def train_world_tower(
    tower: CLIPVisionModel,
    frames: np.ndarray,
    labels: Mapping[str, Sequence[str]],
    training: TowerTraining = TowerTraining(),
) -> dict[str, float]:
    """Train `tower` in place on uint8 frames [N, H, W, 3] to tell each label set (e.g.
    character, place, time: one name per frame) from its tokens: one linear head per set, the
    maximum of its scores over the tokens is the frame's. Returns each set's accuracy over the
    frames at the end (the tower is left in eval mode)."""
    count = len(frames)
    if not labels or any(len(names) != count for names in labels.values()):
        raise ValueError(f"need one label per frame ({count}) in every label set")
    generator = torch.Generator().manual_seed(training.seed)
    targets = {}
    for key, names in labels.items():
        classes = sorted(set(names))
        targets[key] = torch.tensor([classes.index(name) for name in names])
    width = tower.config.hidden_size
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(training.seed)
        heads = nn.ModuleDict(
            {key: nn.Linear(width, int(t.max()) + 1) for key, t in targets.items()}
        )
    optimizer = torch.optim.AdamW([*tower.parameters(), *heads.parameters()], lr=training.lr)
    tower.train()
    for _ in range(training.steps):
        picked = torch.randint(count, (min(training.batch_size, count),), generator=generator)
        tokens = patch_tokens(tower, clip_pixel_values(frames[picked.numpy()]))
        loss = torch.zeros(())
        for key, target in targets.items():
            scores = heads[key](tokens)
            loss = loss + nn.functional.cross_entropy(scores.amax(dim=1), target[picked])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    tower.eval()
    with torch.no_grad():
        tokens = torch.cat([patch_tokens(tower, clip_pixel_values(frames[i:i + 64]))
                            for i in range(0, count, 64)])
    return {key: float((heads[key](tokens).amax(dim=1).argmax(1) == t).float().mean())
            for key, t in targets.items()}
