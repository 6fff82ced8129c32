"""What phases a and c train (docs/design.md §11): the transformer with what makes its condition
(`ConditionedDecoder`), which of its parts train in each stage, the LoRA, classifier-free
guidance dropout and CogVideoX's v-prediction loss."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, cast

import torch
import torch.nn.functional as F
from diffusers.schedulers.scheduling_dpm_cogvideox import CogVideoXDPMScheduler
from torch import nn

from animegamer.models.noise_prior import INDEPENDENT_NOISE, FrameCorrelatedNoise
from animegamer.models.shot_encoder import AnimeGamerShotEncoder
from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel
from animegamer.train.recipe import CfgDropout, LoraSettings
from animegamer.train.vae import reconstruction_weights

if TYPE_CHECKING:
    from peft import LoraModel

ADALN_LAYERS = ("norm1.linear", "norm2.linear")
LORA_TARGETS = r"transformer_blocks\.\d+\.attn1\.(to_q|to_k|to_v|to_out\.0)"
"""peft `target_modules` (a full-match regex): the attention projections of the blocks."""

Stage = Literal["warmup", "joint", "adapt"]


class ConditionedDecoder(nn.Module):
    """The transformer with what makes its condition, as the one module `accelerate` wraps:
    the shot encoder's projection of cached features (phase a), or a given representation
    (phase c, `shot_encoder` None)."""

    def __init__(
        self,
        transformer: AnimeGamerTransformer3DModel,
        shot_encoder: AnimeGamerShotEncoder | None = None,
    ) -> None:
        super().__init__()
        self.transformer = transformer
        self.shot_encoder = shot_encoder

    def forward(
        self,
        noisy_latents: torch.Tensor,
        timesteps: torch.Tensor,
        motion_scopes: torch.Tensor,
        text_features: torch.Tensor | None = None,
        image_features: torch.Tensor | None = None,
        representation: torch.Tensor | None = None,
        scene: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The transformer's v-prediction [B, T, C, H, W] for noisy latents [B, T, C, H, W]
        (with `scene`, a Nano transformer's: of the clip's difference from that latent)."""
        if representation is None:
            if self.shot_encoder is None or text_features is None or image_features is None:
                raise ValueError("give a representation, or features and a shot encoder")
            representation = self.shot_encoder.project(text_features, image_features)
        return self.transformer(
            hidden_states=noisy_latents,
            encoder_hidden_states=representation,
            timestep=timesteps,
            ofs=motion_scopes,
            return_dict=False,
            **({} if scene is None else {"scene": scene}),
        )[0]


def is_adaln(name: str) -> bool:
    """Whether a transformer module name is an adaLN modulation layer."""
    return name == "norm_out.linear" or (
        name.startswith("transformer_blocks.") and name.endswith(ADALN_LAYERS)
    )


def set_trainable(model: ConditionedDecoder, stage: Stage, full: bool = False) -> None:
    """Freeze everything, then unfreeze what `stage` trains (see the module doc); `full`: the
    joint and adapt stages train the whole transformer (no LoRA)."""
    model.requires_grad_(False)
    ofs_embedding = model.transformer.ofs_embedding
    assert ofs_embedding is not None  # always built by AnimeGamerTransformer3DModel
    ofs_embedding.requires_grad_(True)
    if stage in ("warmup", "joint") and model.shot_encoder is not None:
        model.shot_encoder.requires_grad_(True)
    if stage in ("joint", "adapt") and full:
        model.transformer.requires_grad_(True)
    elif stage in ("joint", "adapt"):
        for name, module in model.transformer.named_modules():
            if is_adaln(name):
                module.requires_grad_(True)
        for name, parameter in model.transformer.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                parameter.requires_grad_(True)
        reference_proj = getattr(model.transformer, "reference_proj", None)  # a Nano aid
        if reference_proj is not None:
            reference_proj.requires_grad_(True)
        scene = bool(getattr(model.transformer.config, "scene_channels", 0))
        if reference_proj is not None or scene:
            model.transformer.patch_embed.proj.requires_grad_(True)  # reads the extra channels


def trainable_names(module: nn.Module) -> list[str]:
    return sorted(name for name, p in module.named_parameters() if p.requires_grad)


def add_lora(
    transformer: AnimeGamerTransformer3DModel, settings: LoraSettings, seed: int = 0
) -> LoraModel:
    """Inject a LoRA (in place) into the blocks' to_q, to_k, to_v and to_out.0; its random
    `lora_A` init comes from `seed`, so a resumed run builds the same one."""
    from peft import LoraConfig, LoraModel

    config = LoraConfig(
        r=settings.lora_rank, lora_alpha=settings.alpha, target_modules=LORA_TARGETS
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LoraModel(transformer, config, "default")


def cfg_dropout(
    text: torch.Tensor, image: torch.Tensor, dropout: CfgDropout, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero each sample's text features with probability text_zero + text_empty (empty text is
    zero text: no T5 embedding of "" is cached) and, independently, its image features with
    probability image_zero."""
    batch = text.shape[0]
    keep_text = torch.rand(batch, generator=generator) >= dropout.text_zero + dropout.text_empty
    keep_image = torch.rand(batch, generator=generator) >= dropout.image_zero
    return (
        text * keep_text.to(text)[:, None, None],
        image * keep_image.to(image)[:, None, None],
    )


def motion_weights(latents: torch.Tensor, motion_weight: float) -> torch.Tensor:
    """Per-position weights [B, T, 1, H, W] of the diffusion loss for latents [B, T, C, H, W]:
    the VAE's `reconstruction_weights` on the latent (1 + `motion_weight` × how far a position
    is from its mean over the shot, saturating at 0.5). The latent's motion map follows the
    pixels' (its correlation with the 4×-pooled pixel motion is 0.87–0.96 on Nano shots), so
    what moves is what weighs more, as in the VAE's reconstruction loss."""
    return reconstruction_weights(latents.transpose(1, 2), motion_weight).transpose(1, 2)


def v_prediction_loss(
    model: nn.Module,
    scheduler: CogVideoXDPMScheduler,
    latents: torch.Tensor,
    motion_scopes: torch.Tensor,
    generator: torch.Generator,
    motion_weight: float = 0.0,
    noise: FrameCorrelatedNoise = INDEPENDENT_NOISE,
    **condition: torch.Tensor,
) -> torch.Tensor:
    """CogVideoX's loss: t uniform over the training timesteps, x_t = add_noise(x0, ε, t),
    MSE between the network's output and the velocity v(x0, ε, t); ε is drawn from `noise`;
    with `motion_weight` > 0, the mean is weighted by `motion_weights` of the clean latents."""
    batch = latents.shape[0]
    noise_sample = noise.sample(tuple(latents.shape), generator).to(latents)
    steps = scheduler.config["num_train_timesteps"]
    drawn = torch.randint(0, steps, (batch,), generator=generator).to(latents.device)
    timesteps = cast(torch.IntTensor, drawn)  # diffusers' annotation; any integer tensor works
    noisy = scheduler.add_noise(latents, noise_sample, timesteps)
    target = scheduler.get_velocity(latents, noise_sample, timesteps)
    prediction = model(noisy, timesteps, motion_scopes, **condition)
    if motion_weight == 0:
        return F.mse_loss(prediction.float(), target.float())
    weights = motion_weights(latents.float(), motion_weight).expand_as(prediction)
    squared = (prediction.float() - target.float()).square()
    return (weights * squared).sum() / weights.sum()
