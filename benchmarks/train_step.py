"""Training throughput of each phase: samples per second of whole optimizer steps.

    python benchmarks/train_step.py [--size tiny|full] [--steps 4] [--estimate]

`tiny` (the default on a CPU): the models of `recipes/tiny-cpu.yaml` (64×96 clips) and the Nano
VAE. `full` (CUDA only): random weights at the real sizes, nothing downloaded: the
CogVideoX-2B-sized transformer (LoRA r 64) with the full-size shot encoder on 480×720×17-frame
latents, and a Mistral-7B-sized game-state model with LoRA r 32, bf16 autocast over fp32 weights
and gradient checkpointing, as `recipes/paper-*.yaml` train them; peak GPU memory included. A
step is what the training loop does (`decoder_model.v_prediction_loss`, the game-state
model's CE + MSE over a `training_sample`, the VAE's L1 + KL), on random inputs of the right
shapes: phase b and c windows have 3 turns (the mean of the 1–5 mix). The VAE phase is tiny only
(real characters use CogVideoX's VAE frozen).

`--estimate` builds the full-size models on the `meta` device (no memory, any machine) and prints
their parameter counts and the memory and time of a step they imply (see `estimate`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diffusers.schedulers.scheduling_dpm_cogvideox import CogVideoXDPMScheduler
from transformers import MistralConfig

from animegamer.models.game_state import GameStateConfig, GameStateModel
from animegamer.models.shot_encoder import AnimeGamerShotEncoder
from animegamer.models.tiny_decoder import tiny_transformer_config
from animegamer.models.tiny_game_state import build_tiny_tokenizer, tiny_game_state_model
from animegamer.models.tokens import VOCAB_SIZE
from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel
from animegamer.pipelines.animegamer.sampling import scheduler_config
from animegamer.train.decoder_model import (
    ConditionedDecoder,
    add_lora,
    set_trainable,
    v_prediction_loss,
)
from animegamer.train.game_state_phase import (
    target_representations,
    training_sample,
    with_lora,
)
from animegamer.train.recipe import GameStateRecipe, LoraSettings, VaeRecipe
from animegamer.train.vae import build_vae
from animegamer.train.windows import EpisodeWindow

GIB = 1 << 30
MISTRAL_7B: dict[str, Any] = {
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 32768, "sliding_window": 4096, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "tie_word_embeddings": False,
}
"""Mistral-7B-Instruct-v0.1's architecture (its config.json)."""
TURNS = 3


@dataclass(frozen=True)
class Size:
    """The shapes of one benchmark size."""

    name: str
    latent: tuple[int, int, int, int]  # [T, C, H, W] of a clip's latents
    text_width: int
    image_width: int
    batch: int


TINY = Size("tiny", (5, 16, 8, 12), 32, 32, 2)
FULL = Size("full", (5, 16, 60, 90), 4096, 768, 1)


def decoder_model(size: Size, adapt: bool) -> ConditionedDecoder:
    """Phase a's trainable set after warm-up (joint), or phase c's."""
    if size is TINY:
        config = tiny_transformer_config(64)
        transformer = AnimeGamerTransformer3DModel(**config)
        encoder = AnimeGamerShotEncoder(size.text_width, size.image_width, width=64)
    else:
        transformer = AnimeGamerTransformer3DModel()
        encoder = AnimeGamerShotEncoder(size.text_width, size.image_width, width=1920)
    add_lora(transformer, LoraSettings(lora_rank=64 if size is FULL else 4))
    model = ConditionedDecoder(transformer, None if adapt else encoder)
    set_trainable(model, "adapt" if adapt else "joint")
    if size is FULL:
        transformer.enable_gradient_checkpointing()
    return model


def game_state_model(size: Size, width: int) -> GameStateModel:
    if size is TINY:
        return tiny_game_state_model(width, representation_source="queries")
    text = MistralConfig(vocab_size=VOCAB_SIZE, **MISTRAL_7B)
    model = GameStateModel(GameStateConfig(text_config=text, representation_dim=width,
                                           representation_source="queries"))
    model.tokenizer = build_tiny_tokenizer()  # the real ids; only the token count differs
    return model


def game_state_recipe(size: Size) -> GameStateRecipe:
    return GameStateRecipe.model_validate({
        "init": {"tiny": {}}, "lora_rank": 32 if size is FULL else 4, "lora_alpha": 32,
        "lora_dropout": 0.05, "gradient_checkpointing": size is FULL})


def window(turns: int) -> EpisodeWindow:
    row = {"instruction": "Character: Qiqi; Motion: quickly run; Background: day town.",
           "motion_level": 3, "sc": 0, "et": 1, "st": -1}
    return EpisodeWindow(tuple(dict(row) for _ in range(turns)))


Step = Callable[[torch.Generator], torch.Tensor]


def decoder_step(size: Size, device: torch.device, adapt: bool) -> tuple[nn.Module, Step]:
    model = decoder_model(size, adapt).to(device)
    scheduler = CogVideoXDPMScheduler(**scheduler_config())
    config = model.transformer.config
    width = config.num_attention_heads * config.attention_head_dim
    gs = None
    if adapt:
        gs = game_state_model(size, width).to(device, torch.bfloat16 if size is FULL else None)
        gs.requires_grad_(False).eval()

    def step(generator: torch.Generator) -> torch.Tensor:
        b = size.batch
        latents = torch.randn(b, *size.latent, generator=generator).to(device)
        scopes = torch.full((b,), 2.0, device=device)
        if gs is not None:
            windows = [window(TURNS)] * b
            history = [[torch.randn(226, width, device=device, dtype=gs.dtype)] * (TURNS - 1)] * b
            condition = {"representation": target_representations(gs, windows, history).float()}
        else:
            condition = {
                "text_features": torch.randn(b, 30, size.text_width, device=device),
                "image_features": torch.randn(b, 196, size.image_width, device=device),
            }
        return v_prediction_loss(model, scheduler, latents, scopes, generator, **condition)

    return model, step


def game_state_step(size: Size, device: torch.device) -> tuple[nn.Module, Step]:
    width = 1920 if size is FULL else 64
    base = game_state_model(size, width)
    tokenizer = base.tokenizer
    assert tokenizer is not None
    model = with_lora(base, game_state_recipe(size)).to(device)
    sample = training_sample(tokenizer, window(TURNS))
    kept = sample.target_length + 1

    def step(generator: torch.Generator) -> torch.Tensor:
        shots = torch.randn(TURNS, 226, width, generator=generator).to(device)
        output = model(input_ids=sample.input_ids.to(device),
                       history_representations=list(shots[:-1]),
                       labels=sample.labels[:, -kept:].to(device), logits_to_keep=kept)
        return output.loss + torch.nn.functional.mse_loss(output.representation.float(),
                                                          shots[-1:].float())

    return model, step


def vae_step(device: torch.device) -> tuple[nn.Module, Step]:
    recipe = VaeRecipe.model_validate({"block_out_channels": (8, 16, 16, 32), "train_frames": 9})
    vae = build_vae(recipe, 64, 96).to(device).train()

    def step(generator: torch.Generator) -> torch.Tensor:
        clips = torch.rand(2, 3, recipe.train_frames, 64, 96, generator=generator) * 2 - 1
        clips = clips.to(device)
        posterior = vae.encode(clips).latent_dist
        reconstruction = vae.decode(posterior.sample()).sample
        return (reconstruction - clips).abs().mean() + recipe.kl_weight * posterior.kl().mean()

    return vae, step


def measure(model: nn.Module, step: Step, samples: int, steps: int,
            device: torch.device) -> tuple[float, float | None]:
    """(samples/s over `steps` timed steps after one warm-up step, peak GPU GiB)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-5)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                else nullcontext())
    generator = torch.Generator().manual_seed(0)

    def one() -> None:
        with autocast:
            loss = step(generator)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    one()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        one()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / GIB if device.type == "cuda" else None
    return samples * steps / seconds, peak


def run(size: Size, steps: int, device: torch.device) -> None:
    phases: dict[str, Callable[[], tuple[nn.Module, Step]]] = {
        "decoder": lambda: decoder_step(size, device, adapt=False),
        "game-state": lambda: game_state_step(size, device),
        "adapt": lambda: decoder_step(size, device, adapt=True),
    }
    if size is TINY:
        phases = {"vae": lambda: vae_step(device), **phases}
    print(f"size {size.name} on {device}, {steps} timed steps each, "
          f"{torch.get_num_threads()} threads")
    for name, build in phases.items():
        with torch.device(device):  # a 7B model is initialised where it runs, not on the CPU
            model, step = build()
        samples = 1 if name == "game-state" else size.batch if name != "vae" else 2
        rate, peak = measure(model, step, samples, steps, device)
        memory = f", peak {peak:.1f} GiB" if peak is not None else ""
        print(f"  {name:10s} {rate:8.3f} samples/s ({samples} a step){memory}")
        del model, step
        if device.type == "cuda":
            torch.cuda.empty_cache()


# ---- estimates of the full size (meta device) ----

def counts(model: nn.Module) -> tuple[int, int]:
    parameters = list(model.parameters())
    return (sum(p.numel() for p in parameters),
            sum(p.numel() for p in parameters if p.requires_grad))


def estimate() -> None:
    """Parameter counts of the full-size phases (exact, built on `meta`) and what they imply:

    memory = frozen weights × 4 B (fp32, as training loads them; phase c's game-state model
    bf16, 2 B) + trainable × 16 B (fp32 weight, gradient, two Adam moments) + activations with
    checkpointing (each block's fp32 input kept, L·T·d·4 B, plus one block's bf16 working set,
    ≈ 24·T·d·2 B) for 1 sample; time = FLOPs / (utilisation × peak), FLOPs ≈ 8·N·T (forward,
    recomputed forward, backward) + 16·L·T²·d (attention, same passes) per sample, plus phase
    c's game-state forward (2·N·T of the LLM).
    """
    with torch.device("meta"):
        decoder = decoder_model(FULL, adapt=False)
        adapted = decoder_model(FULL, adapt=True)
        base = game_state_model(FULL, 1920)
        game_state = with_lora(base, game_state_recipe(FULL))
    tokens_decoder = FULL.latent[0] * (FULL.latent[2] // 2) * (FULL.latent[3] // 2) + 226
    tokens_llm = TURNS * 300  # ≈ 226 frame tokens + instruction and state tokens a turn
    llm = sum(p.numel() for p in base.parameters())
    # (name, model, tokens, layers, width, frozen game-state model: bytes, forward FLOPs)
    rows = [
        ("decoder (a)", decoder, tokens_decoder, 30, 1920, 0, 0),
        ("game-state (b)", game_state, tokens_llm, 32, 4096, 0, 0),
        ("adapt (c)", adapted, tokens_decoder, 30, 1920, llm * 2, 2 * llm * tokens_llm),
    ]
    peaks = {"A100 (312 TFLOP/s bf16)": 312e12, "H100 SXM (989 TFLOP/s bf16)": 989e12}
    utilisation = 0.4
    print(f"full-size estimates (meta device; {utilisation:.0%} of peak bf16 FLOP/s)")
    for name, model, tokens, layers, width, extra, extra_flops in rows:
        total, trainable = counts(model)
        memory = (total - trainable) * 4 + trainable * 16 + extra
        activations = layers * tokens * width * 4 + 24 * tokens * width * 2
        flops = 8 * total * tokens + 16 * layers * tokens**2 * width + extra_flops
        times = ", ".join(f"{gpu}: {flops / (utilisation * peak):.2f} s"
                          for gpu, peak in peaks.items())
        print(f"  {name}: {total / 1e9:.2f} B parameters, {trainable / 1e6:.0f} M trained; "
              f"weights+grads+Adam {memory / GIB:.1f} GiB, activations ≈ "
              f"{activations / GIB:.1f} GiB/sample ({tokens} tokens); "
              f"{flops / 1e12:.0f} TFLOP/sample → {times} per sample")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("tiny", "full"), default=None,
                        help="default: full on CUDA, tiny otherwise")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--estimate", action="store_true",
                        help="print the full-size estimates (any machine) and exit")
    args = parser.parse_args()
    if args.estimate:
        estimate()
        return 0
    cuda = torch.cuda.is_available()
    size = {"tiny": TINY, "full": FULL}[args.size or ("full" if cuda else "tiny")]
    if size is FULL and not cuda:
        print("--size full needs CUDA; this machine has none (try --estimate)")
        return 0
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    run(size, args.steps, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
