"""Phases a and c of training (docs/design.md §11): the shot encoder with the decoder, then the
decoder's adaptation to the game-state model's predictions.

Phase a (`train_decoder`) has two stages. Warm-up trains the shot encoder (projections and
norms) and the transformer's motion-scope MLP (`ofs_embedding`); the rest of the transformer is
frozen. Joint adds the adaLN modulation layers (`norm1.linear`, `norm2.linear` of every block,
`norm_out.linear`) and a LoRA on the blocks' attention projections, and, for a transformer with a
spatial reference (`reference_channels`) or a scene (`scene_channels`), that reference's
projection and the patch embedding that reads them. Phase c (`adapt`) freezes the shot encoder
and the game-state model; the game-state model's prediction of each target shot (history
teacher-forced) is the condition, and the motion-scope MLP, the adaLN layers, the spatial
reference's layers and a new LoRA train. Both use CogVideoX's v-prediction loss with the
pipeline's scheduler. The LoRA is merged before the pipeline is saved, with the shot encoder's
unconditional representation and the dataset's motion-level values in the transformer, so play
feeds what training saw. What trains in each stage, and the loss, are
`animegamer.train.decoder_model`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from accelerate import Accelerator
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX
from diffusers.schedulers.scheduling_dpm_cogvideox import CogVideoXDPMScheduler
from torch import nn

from animegamer.characters.conversion.character import shared_components
from animegamer.data.dataset import read_rows
from animegamer.data.flow import MotionLevels
from animegamer.data.scenes import DatasetScenes
from animegamer.models.scene_latent import SceneSource
from animegamer.models.shot_encoder import AnimeGamerShotEncoder
from animegamer.models.tiny_decoder import TINY_LATENT_SIZE, tiny_transformer_config, tiny_vae
from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel
from animegamer.models.transformers.transformer_nano import NanoTransformer3DModel
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.sampling import scheduler_config
from animegamer.train.decoder_model import (
    ConditionedDecoder,
    Stage,
    add_lora,
    cfg_dropout,
    set_trainable,
    v_prediction_loss,
)
from animegamer.train.decoder_samples import (
    LatentCache,
    ShotDataset,
    collate,
    draw_latents,
    encoded_scenes,
    levels_of,
    read_features,
)
from animegamer.train.loop import (
    LoopSettings,
    MicroLoss,
    configure_deepspeed,
    resume_point,
    sample_indices,
    shards_parameters,
    train_steps,
)
from animegamer.train.recipe import AdaptRecipe, DecoderInit, DecoderRecipe, Recipe, TinyInit

if TYPE_CHECKING:
    from peft import LoraModel

    from animegamer.models.game_state import GameStateModel
    from animegamer.train.windows import EpisodeWindow

DECODER = "decoder"
"""Phase a's name: its pipeline folder, checkpoint folder and log folder under OUT."""
ADAPT = "adapt"
ADAPTED = "decoder_adapted"
"""Phase c's pipeline folder under OUT."""
GAME_STATE = "game_state"
"""Where phase c looks for the game-state model by default (OUT/game_state)."""
LATENTS = "latents"


class TrainError(ValueError):
    """A training input that cannot be used; the message names it."""


def train_rows(dataset: Path) -> list[dict[str, Any]]:
    rows = read_rows(dataset).get("train")
    if not rows:
        raise TrainError(f"{dataset}: no train split rows (data/train-00000-of-00001.parquet)")
    return rows


def tiny_training_pipeline(
    sizes: TinyInit, text_width: int, image_width: int, levels: MotionLevels
) -> AnimeGamerPipeline:
    """Fresh random tiny models: a transformer of `sizes` (a `NanoTransformer3DModel` when they
    set its aids), `tiny_vae()` (or the trained VAE at `sizes.vae`, whose latent channels, size
    and frames the transformer takes), a shot encoder from the dataset's feature widths."""
    config = tiny_transformer_config(sizes.representation_dim)
    vae_config = AutoencoderKLCogVideoX.load_config(sizes.vae) if sizes.vae else {}
    height, width = latent_size(vae_config) if sizes.vae else TINY_LATENT_SIZE
    if height % sizes.patch_size or width % sizes.patch_size:
        raise TrainError(f"a {height}x{width} latent is not a whole number of "
                         f"{sizes.patch_size}-patches")
    channels = int(vae_config.get("latent_channels", 16))
    aids = sizes.nano_aids
    config.update(aids, num_layers=sizes.num_layers,
                  motion_scopes=list(levels.values), sample_height=height, sample_width=width,
                  patch_size=sizes.patch_size, patch_size_t=sizes.patch_size_t,
                  in_channels=channels, out_channels=channels,
                  temporal_compression_ratio=int(vae_config.get("temporal_compression_ratio", 4)))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(sizes.seed)
        kind = NanoTransformer3DModel if aids else AnimeGamerTransformer3DModel
        transformer = kind(**config)
        vae = AutoencoderKLCogVideoX.from_pretrained(sizes.vae) if sizes.vae else tiny_vae()
        encoder = AnimeGamerShotEncoder(
            text_width=text_width, image_width=image_width, width=sizes.representation_dim
        )
    scheduler = CogVideoXDPMScheduler(**scheduler_config())
    return AnimeGamerPipeline(transformer, vae, scheduler, shot_encoder=encoder)


def latent_size(vae_config: dict) -> tuple[int, int]:
    """[height, width] of a CogVideoX VAE's latent for clips of its sample size: every level
    but the last halves space."""
    factor = 2 ** (len(vae_config["block_out_channels"]) - 1)
    return vae_config["sample_height"] // factor, vae_config["sample_width"] // factor


def load_pipeline(folder: Path) -> AnimeGamerPipeline:
    """A pipeline folder with its shot encoder (a character folder: with the VAE it shares),
    in fp32 on the CPU."""
    if not (folder / "model_index.json").is_file():
        raise TrainError(f"{folder}: not a pipeline folder (no model_index.json)")
    pipeline = AnimeGamerPipeline.from_pretrained(
        folder, dtype=torch.float32, **shared_components(folder, torch.float32)
    )
    if pipeline.shot_encoder is None:
        raise TrainError(f"{folder}: the pipeline has no shot_encoder/ to train")
    return pipeline


def initial_pipeline(
    init: DecoderInit, dataset: Path, rows: Sequence[dict[str, Any]], levels: MotionLevels
) -> AnimeGamerPipeline:
    if init.pipeline is not None:
        return load_pipeline(init.pipeline)
    assert init.tiny is not None
    text, image = read_features(dataset, rows[0])
    return tiny_training_pipeline(init.tiny, text.shape[-1], image.shape[-1], levels)


def cached_latents(
    accelerator: Accelerator, vae: nn.Module, rows: Sequence[dict[str, Any]], dataset: Path,
    out: Path,
) -> LatentCache:
    """Encode the clips not cached yet (the processes share the work), then put the VAE back
    on the CPU: training does not need it."""
    vae.requires_grad_(False).eval()
    cache = LatentCache.for_vae(out / LATENTS, vae)
    mine = cache.missing(rows)[accelerator.process_index :: accelerator.num_processes]
    accelerator.wait_for_everyone()  # every process has its share before any is written
    if mine:
        vae.to(accelerator.device)
        cache.fill(mine, dataset, vae)
        vae.to("cpu")
    accelerator.wait_for_everyone()
    return cache


def finish(
    pipeline: AnimeGamerPipeline, lora: LoraModel | None, levels: MotionLevels, folder: Path,
    accelerator: Accelerator,
) -> Path:
    """Merge the LoRA, store the unconditional representation and the motion-scope table in
    the transformer, and save the pipeline (main process)."""
    accelerator.wait_for_everyone()
    if lora is not None:
        lora.merge_and_unload()
    transformer = pipeline.transformer
    transformer.requires_grad_(False)
    if transformer.is_gradient_checkpointing:
        transformer.disable_gradient_checkpointing()
    pipeline.to("cpu")
    encoder = pipeline.shot_encoder
    assert encoder is not None
    encoder.requires_grad_(False)
    with torch.no_grad():
        transformer.uncond_representation.copy_(encoder.unconditional())
    transformer.register_to_config(motion_scopes=list(levels.values))
    if accelerator.is_main_process:
        pipeline.save_pretrained(folder)
    accelerator.wait_for_everyone()
    return folder


def run_stage(
    accelerator: Accelerator,
    model: ConditionedDecoder,
    make_loss: Callable[[nn.Module], MicroLoss],
    loop: LoopSettings,
    out: Path,
    span: tuple[int, int, int],
    checkpoint: Path | None,
) -> int:
    """Train `model`'s trainable parameters over steps span = (start, end, phase total),
    first loading `checkpoint` (same structure) if given; returns the step reached."""
    start, end, total = span
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=loop.lr, weight_decay=0.0)
    wrapped, optimizer = accelerator.prepare(model, optimizer)
    if checkpoint is not None:
        accelerator.load_state(str(checkpoint))
    reached = max(start, end)
    train_steps(
        accelerator, wrapped, optimizer, trainable, make_loss(wrapped), loop, out,
        start, end, total,
    )
    accelerator.wait_for_everyone()
    accelerator.unwrap_model(wrapped, keep_fp32_wrapper=False)
    accelerator.free_memory()
    return reached


@dataclass
class PhaseSetup:
    """What phases a and c set up alike: the pipeline they train, the dataset's shots with
    their cached latents, the loop's settings and the step span (`setup_phase`)."""

    phase: str
    settings: DecoderRecipe | AdaptRecipe
    seed: int
    accelerator: Accelerator
    out: Path
    pipeline: AnimeGamerPipeline
    rows: list[dict[str, Any]]
    levels: MotionLevels
    data: ShotDataset
    loop: LoopSettings
    step: int
    checkpoint: Path | None
    stop: int
    total: int

    def indices(self, micro: int, count: int) -> list[int]:
        """This process's sample indices (of `count`) of a micro step."""
        return sample_indices(
            count, self.settings.batch_size, micro, self.seed,
            self.accelerator.process_index, self.accelerator.num_processes,
        )

    def loss(
        self,
        wrapped: nn.Module,
        samples: Sequence[dict[str, torch.Tensor]],
        generator: torch.Generator,
        condition: Callable[[dict[str, torch.Tensor], torch.Generator], dict[str, torch.Tensor]],
    ) -> torch.Tensor:
        """The v-prediction loss of `samples` (`ShotDataset` items): latents drawn from their
        cached distribution, then the condition (`condition(batch, generator)`), then noise and
        timesteps, all from `generator` in that order."""
        device = self.accelerator.device
        batch = {k: v.to(device) for k, v in collate(list(samples)).items()}
        scaling = float(self.pipeline.vae.config.scaling_factor)
        latents = draw_latents(batch["latent_mean"], batch["latent_std"], scaling, generator)
        given = condition(batch, generator)
        if "scene" in batch:  # the clip's difference from its scene (NanoTransformer3DModel)
            latents = latents - batch["scene"][:, None]
            given["scene"] = batch["scene"]
        return v_prediction_loss(
            wrapped, self.pipeline.scheduler, latents, batch["motion_scope"], generator,
            self.settings.motion_weight, self.pipeline.noise_prior, **given,
        )


def setup_phase(
    phase: str,
    settings: DecoderRecipe | AdaptRecipe,
    recipe: Recipe,
    accelerator: Accelerator,
    dataset: Path,
    out: Path,
    make_pipeline: Callable[[list[dict[str, Any]], MotionLevels], AnimeGamerPipeline],
    span: tuple[bool, int | None, int],
    scenes: SceneSource | None = None,
) -> PhaseSetup:
    """Phase a's or c's resume point, pipeline (`make_pipeline(rows, levels)`), latent cache
    (and the scenes' latents, for a transformer that draws on them: `scenes`, or the dataset's
    own, `SceneTable`) and loop settings; span = (resume, max_steps, the phase's total
    steps)."""
    resume, max_steps, total = span
    if shards_parameters(accelerator):
        raise TrainError(
            f"{phase}: phases a and c save the pipeline they trained in place, which FSDP and "
            "ZeRO-3 leave sharded: train them with DDP or ZeRO-2 (configs/accelerate/)"
        )
    configure_deepspeed(accelerator, settings.batch_size, settings.max_grad_norm)
    step, checkpoint = resume_point(out, phase, resume, accelerator)
    rows = train_rows(dataset)
    levels = levels_of(dataset)
    pipeline = make_pipeline(rows, levels)
    cache = cached_latents(accelerator, pipeline.vae, rows, dataset, out)
    table = None
    if getattr(pipeline.transformer.config, "scene_channels", 0):
        table = encoded_scenes(pipeline.vae, rows, scenes or DatasetScenes(dataset))
    if recipe.gradient_checkpointing:
        pipeline.transformer.enable_gradient_checkpointing()
    loop = LoopSettings(
        phase, recipe.seed, recipe.checkpoint_every, recipe.log_every, settings.max_grad_norm,
        settings.lr, settings.lr_schedule, recipe.keep_checkpoints,
    )
    return PhaseSetup(
        phase, settings, recipe.seed, accelerator, out, pipeline, rows, levels,
        ShotDataset(rows, dataset, cache, levels, table), loop, step, checkpoint,
        total if max_steps is None else min(total, max_steps), total,
    )


def train_transformer(
    stage: Stage,
    setup: PhaseSetup,
    model: ConditionedDecoder,
    make_loss: Callable[[nn.Module], MicroLoss],
    start: int,
    checkpoint: Path | None,
    folder: Path,
) -> Path | None:
    """The stage that trains the transformer (phase a's joint stage, phase c) from step
    `start`: a LoRA, or every weight with `transformer: full`; once the phase's last step is
    reached, the merged pipeline is saved to `folder` (returned), else None."""
    pipeline, settings = setup.pipeline, setup.settings
    full = settings.transformer == "full"
    lora = None if full else add_lora(pipeline.transformer, settings, setup.seed)
    set_trainable(model, stage, full)
    span = (start, setup.stop, setup.total)
    run_stage(setup.accelerator, model, make_loss, setup.loop, setup.out, span, checkpoint)
    if setup.stop < setup.total:
        return None
    return finish(pipeline, lora, setup.levels, folder, setup.accelerator)


def train_decoder(
    dataset: Path,
    out: Path,
    recipe: Recipe,
    accelerator: Accelerator,
    resume: bool = False,
    max_steps: int | None = None,
    scenes: SceneSource | None = None,
) -> Path | None:
    """Phase a → the pipeline folder OUT/decoder, or None when `max_steps` stopped the run
    first (its checkpoint is saved; `resume` continues). `scenes`: the world's backgrounds,
    for a decoder that draws on them (default: the dataset's own)."""
    settings = recipe.decoder
    if settings is None:
        raise TrainError("the recipe has no 'decoder' section (phase a)")
    init = settings.init
    setup = setup_phase(
        DECODER, settings, recipe, accelerator, dataset, out,
        lambda rows, levels: initial_pipeline(init, dataset, rows, levels),
        (resume, max_steps, settings.warmup_steps + settings.joint_steps), scenes,
    )
    encoder = setup.pipeline.shot_encoder
    assert encoder is not None
    model = ConditionedDecoder(setup.pipeline.transformer, encoder)

    def dropped_features(
        batch: dict[str, torch.Tensor], generator: torch.Generator
    ) -> dict[str, torch.Tensor]:
        text, image = cfg_dropout(
            batch["text_features"], batch["image_features"], settings.cfg_dropout, generator
        )
        return {"text_features": text, "image_features": image}

    def make_loss(wrapped: nn.Module) -> MicroLoss:
        def micro_loss(micro: int, generator: torch.Generator) -> torch.Tensor:
            samples = [setup.data[i] for i in setup.indices(micro, len(setup.data))]
            return setup.loss(wrapped, samples, generator, dropped_features)

        return micro_loss

    step, checkpoint, warmup = setup.step, setup.checkpoint, settings.warmup_steps
    # a checkpoint at or before the end of warm-up holds the model without its LoRA
    if step < warmup or (checkpoint is not None and step <= warmup):
        set_trainable(model, "warmup")
        step = run_stage(
            accelerator, model, make_loss, setup.loop, out,
            (step, min(warmup, setup.stop), setup.total), checkpoint,
        )
        checkpoint = None
    if step >= setup.stop and setup.stop < setup.total:
        return None
    return train_transformer("joint", setup, model, make_loss, step, checkpoint, out / DECODER)


def load_game_state(folder: Path, accelerator: Accelerator) -> GameStateModel:
    """The frozen game-state model of phase c."""
    from animegamer.models.game_state import GameStateModel

    if not folder.is_dir():
        raise TrainError(f"{folder}: no game-state model (train it with `game-state` first)")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(
        str(accelerator.mixed_precision), torch.float32
    )
    model = GameStateModel.from_pretrained(folder, device=accelerator.device, dtype=dtype)
    return model.requires_grad_(False).eval()


def predicted_representations(
    model: GameStateModel,
    windows: Sequence[EpisodeWindow],
    history: list[list[torch.Tensor]],
) -> torch.Tensor:
    """The game-state model's representation [B, 226, D] of each window's target shot."""
    from animegamer.train.game_state_phase import target_representations

    return target_representations(model, windows, history)


def adapt(
    dataset: Path,
    out: Path,
    recipe: Recipe,
    accelerator: Accelerator,
    resume: bool = False,
    max_steps: int | None = None,
    game_state: Path | None = None,
    decoder: Path | None = None,
    scenes: SceneSource | None = None,
) -> Path | None:
    """Phase c → the pipeline folder OUT/decoder_adapted (None when `max_steps` stopped the
    run first). The decoder comes from OUT/decoder and the game-state model from
    OUT/game_state unless given."""
    from animegamer.train.windows import episode_windows

    settings: AdaptRecipe | None = recipe.adapt
    if settings is None:
        raise TrainError("the recipe has no 'adapt' section (phase c)")
    setup = setup_phase(
        ADAPT, settings, recipe, accelerator, dataset, out,
        lambda rows, levels: load_pipeline(decoder or out / DECODER),
        (resume, max_steps, settings.steps), scenes,
    )
    transformer, encoder = setup.pipeline.transformer, setup.pipeline.shot_encoder
    assert encoder is not None
    windows = episode_windows(setup.rows, settings.max_turns, recipe.seed)
    position = {row["shot_id"]: index for index, row in enumerate(setup.rows)}
    device = accelerator.device
    game_state_model = load_game_state(game_state or out / GAME_STATE, accelerator)
    encoder.requires_grad_(False).eval().to(device)
    model = ConditionedDecoder(transformer)

    @torch.no_grad()
    def condition(chosen: Sequence[EpisodeWindow], generator: torch.Generator) -> torch.Tensor:
        history = [
            [
                encoder.project(*(f[None].to(device) for f in read_features(dataset, row)))[0]
                for row in window.history
            ]
            for window in chosen
        ]
        predicted = predicted_representations(game_state_model, chosen, history)
        predicted = predicted.to(device, torch.float32)
        drop = torch.rand(len(chosen), generator=generator) < settings.uncond_dropout
        uncond = transformer.uncond_representation.to(predicted)
        return torch.where(drop.to(device)[:, None, None], uncond, predicted)

    def make_loss(wrapped: nn.Module) -> MicroLoss:
        def micro_loss(micro: int, generator: torch.Generator) -> torch.Tensor:
            chosen = [windows[i] for i in setup.indices(micro, len(windows))]
            samples = [setup.data[position[window.target["shot_id"]]] for window in chosen]
            return setup.loss(
                wrapped, samples, generator,
                lambda _, drawn: {"representation": condition(chosen, drawn)},
            )

        return micro_loss

    return train_transformer(
        "adapt", setup, model, make_loss, setup.step, setup.checkpoint, out / ADAPTED
    )


def load_shot_encoder(folder: Path) -> AnimeGamerShotEncoder:
    """The shot encoder of a pipeline folder (phase a's output), for phase b."""
    path = folder / "shot_encoder"
    if not path.is_dir():
        raise TrainError(f"{path}: missing (run the decoder phase first)")
    return AnimeGamerShotEncoder.from_pretrained(path)
