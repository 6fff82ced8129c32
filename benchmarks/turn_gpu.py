"""Time whole turns, stage by stage, for each speed preset, with random weights (no download).

    python benchmarks/turn_gpu.py --size full --turns 3 --out turn_gpu.json   # one GPU
    python benchmarks/turn_gpu.py --size tiny --turns 2 --out turn_tiny.json  # CPU, tests

`--size full` builds the real sizes: the Mistral-7B game-state model with its resamplers (bf16),
the CogVideoX-2B-sized `AnimeGamerTransformer3DModel` and the CogVideoX VAE (fp16), on the GPU;
`--size tiny` builds the tiny test models (fp32, CPU). Each preset of `animegamer.serving.presets`
plays `--turns` turns after `--warmup` untimed ones, as `TurnEngine.play` does (game-state
prediction,
rendering, mp4), and the JSON gets, per turn, the seconds of each stage: `prompt` (prompt and
embeddings), `prefill` (the shared history prefix; 0 without shared prefill),
`representation` (the pass that yields the representation), `state_generation` (greedy state
tokens), `denoising_steps` (each step), `vae_decode`, `mp4_write`, `total`; per preset the peak
GPU memory (`peak_gpu_gib`) or, on CPU, the process's peak RSS so far (`peak_rss_mib`), and how
far its first clip is from the `quality` preset's (same seed). The models are built in memory,
not loaded, so the quantized presets (`consumer`, `tiny-vram`), which quantize as they load, are
not among them: `benchmarks/quantized.py` and `benchmarks/memory.py` measure those. The tiny
tokenizer stands in for Mistral's, so prompts are a few dozen tokens longer than the real ones.
Random weights give meaningless clips; the times and memory are those of the real networks.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import diffusers
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import (
    AutoencoderKLCogVideoX,
)
from diffusers.schedulers.scheduling_dpm_cogvideox import CogVideoXDPMScheduler
from transformers import AutoModelForCausalLM, MistralConfig

from animegamer.game.rules import GameStates, effective_motion_level, make_instruction
from animegamer.models.decoder_defaults import DEFAULT_STEPS
from animegamer.models.game_state import GameStateConfig, GameStateModel
from animegamer.models.game_state_defaults import FULL_REPRESENTATION_DIM, MISTRAL_7B_ARCHITECTURE
from animegamer.models.tiny_game_state import (
    build_tiny_tokenizer,
    tiny_game_state_model,
)
from animegamer.models.tokens import VOCAB_SIZE
from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.sampling import scheduler_config
from animegamer.pipelines.animegamer.tiny import tiny_pipeline
from animegamer.serving.clips import ClipStore
from animegamer.serving.presets import PRESET_NAMES, apply_preset, attention_backends, get_preset

GIB = 1 << 30
TINY_REPRESENTATION_DIM = 64
MOTIONS = ("fly on broomstick", "sit on railing", "walk through the town", "lie down on grass")


@dataclass
class Models:
    game_state: GameStateModel
    decoder: AnimeGamerPipeline


@dataclass
class PlayedTurn:
    """A past turn as `GameStateModel.predict` reads it."""

    instruction: str
    states: GameStates


@dataclass
class TurnTimes:
    """Seconds of each stage of one turn."""

    prompt: float = 0.0
    prefill: float = 0.0
    representation: float = 0.0
    state_generation: float = 0.0
    language_model_calls: int = 0
    denoising_steps: list[float] = field(default_factory=list)
    vae_decode: float = 0.0
    mp4_write: float = 0.0
    total: float = 0.0


def build_full(device: str | torch.device) -> Models:
    """Real-size random models on `device` (`meta` builds only the shapes)."""
    config = MistralConfig(vocab_size=VOCAB_SIZE, **MISTRAL_7B_ARCHITECTURE)
    with torch.device(device):
        llm = AutoModelForCausalLM.from_config(
            config, dtype=torch.bfloat16, attn_implementation="sdpa"
        )
        game_state = GameStateModel(
            GameStateConfig(text_config=llm.config, representation_dim=FULL_REPRESENTATION_DIM),
            language_model=llm,
        )
        transformer = AnimeGamerTransformer3DModel().to(torch.float16)
        vae = AutoencoderKLCogVideoX().to(torch.float16)
    game_state.tokenizer = build_tiny_tokenizer()
    if torch.device(device).type != "meta":
        transformer.uncond_representation.normal_()
    decoder = AnimeGamerPipeline(transformer, vae, CogVideoXDPMScheduler(**scheduler_config()))
    return Models(game_state.eval(), decoder)


def build_tiny() -> Models:
    return Models(
        tiny_game_state_model(TINY_REPRESENTATION_DIM), tiny_pipeline(TINY_REPRESENTATION_DIM)
    )


class Clock:
    """`time.perf_counter`, after waiting for the GPU's queued work when there is a GPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __call__(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()


def record_calls(module: torch.nn.Module, clock: Clock) -> tuple[list[list[float]], Callable]:
    """[start, end] of every forward of `module`, and a function that removes the hooks."""
    calls: list[list[float]] = []
    pre = module.register_forward_pre_hook(lambda *_: calls.append([clock(), 0.0]))
    post = module.register_forward_hook(lambda *_: calls[-1].__setitem__(1, clock()))

    def remove() -> None:
        pre.remove()
        post.remove()

    return calls, remove


def play_turn(
    models: Models,
    history: list[tuple[PlayedTurn, torch.Tensor]],
    index: int,
    steps: int,
    guidance_scale: float,
    seed: int,
    clips: ClipStore,
    clock: Clock,
    shared_prefill: bool,
) -> tuple[TurnTimes, torch.Tensor, GameStates, np.ndarray]:
    """One turn as `TurnEngine.play` plays it, timed stage by stage."""
    instruction = make_instruction({
        "character": "Qiqi", "adverb": "gently", "motion": MOTIONS[index % len(MOTIONS)],
        "time": "day", "place": "town",
    })
    times = TurnTimes()
    calls, remove = record_calls(models.game_state.language_model.model, clock)
    started = clock()
    try:
        representation, states = models.game_state.predict(
            history, instruction, shared_prefill=shared_prefill
        )
    finally:
        remove()
    predicted = clock()
    # the pass that yields the representation: the second with a shared prefill, else the first
    representation_call = 1 if shared_prefill and _release_path(models) else 0
    times.prompt = calls[0][0] - started
    if representation_call:
        times.prefill = calls[0][1] - calls[0][0]
    times.representation = calls[representation_call][1] - calls[representation_call][0]
    times.state_generation = predicted - calls[representation_call][1]
    times.language_model_calls = len(calls)

    last = [predicted]

    def on_step_end(pipeline: AnimeGamerPipeline, step: int, timestep: torch.Tensor,
                    tensors: dict) -> dict:
        now = clock()
        times.denoising_steps.append(now - last[0])
        last[0] = now
        return tensors

    output = models.decoder(
        representation,
        motion_level=effective_motion_level(states.ml),
        num_inference_steps=steps,
        guidance_scale=guidance_scale,
        generator=torch.Generator("cpu").manual_seed(seed),
        callback_on_step_end=on_step_end,
    )
    decoded = clock()
    times.vae_decode = decoded - last[0]
    (frames,) = output.frames
    clips.write_clip(frames, "benchmark", index + 1, seed)
    finished = clock()
    times.mp4_write = finished - decoded
    times.total = finished - started
    return times, representation, states, frames


def _release_path(models: Models) -> bool:
    return models.game_state.config.representation_source == "last_226"


def peak_memory(device: torch.device) -> dict[str, float]:
    if device.type == "cuda":
        return {"peak_gpu_gib": round(torch.cuda.max_memory_allocated() / GIB, 3)}
    return {"peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def run_preset(
    models: Models, name: str, args: argparse.Namespace, device: torch.device, clips: ClipStore
) -> tuple[dict, np.ndarray]:
    """Play the warm-up and the timed turns under preset `name`; its report and first clip."""
    preset = get_preset(name)
    if preset.offload and device.type == "cuda":
        models.game_state.to("cpu")  # type: ignore[arg-type]
        models.decoder.to("cpu")
        models.game_state.enable_model_cpu_offload(device)
        models.decoder.enable_model_cpu_offload(device=device)
        torch.cuda.empty_cache()
    apply_preset(preset, models.decoder, compile_blocks=args.compile)
    steps = preset.steps(args.steps)
    clock = Clock(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    history: list[tuple[PlayedTurn, torch.Tensor]] = []
    turns: list[TurnTimes] = []
    first_clip = np.zeros(0)
    for index in range(args.warmup + args.turns):
        times, representation, states, frames = play_turn(
            models, history, index, steps, args.guidance, args.seed + index, clips, clock,
            preset.shared_prefill,
        )
        if index >= args.warmup:
            turns.append(times)
            first_clip = first_clip if first_clip.size else frames
        if args.window > 1:
            text = f"Qiqi gently {MOTIONS[index % len(MOTIONS)]}"
            history = [*history, (PlayedTurn(text, states), representation[0])]
            history = history[-(args.window - 1):]
    report = {
        **{k: v for k, v in asdict(preset).items() if k != "name"},
        "steps": steps,
        "offloaded": preset.offload and device.type == "cuda",
        "turns": [asdict(t) for t in turns],
        "median_total_s": statistics.median(t.total for t in turns),
        **peak_memory(device),
    }
    return report, first_clip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="untimed turns per preset first")
    unquantized = [name for name in PRESET_NAMES if not get_preset(name).quantization.enabled]
    parser.add_argument("--presets", nargs="+", choices=unquantized, default=unquantized)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                        help="configured steps (quality; fast caps them)")
    parser.add_argument("--guidance", type=float, default=6.0)
    parser.add_argument("--window", type=int, default=1, help="turns the game-state model sees")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile", action="store_true", help="regional torch.compile")
    parser.add_argument("--out", type=Path, default=Path("turn_gpu.json"))
    args = parser.parse_args(argv)
    if args.turns < 1:
        parser.error("--turns must be at least 1")

    if args.size == "full" and not torch.cuda.is_available():
        print("turn_gpu: --size full needs a CUDA GPU (nothing was run); try --size tiny.")
        return 0
    device = torch.device("cuda" if args.size == "full" else "cpu")
    torch.manual_seed(args.seed)
    started = time.perf_counter()
    models = build_full(device) if args.size == "full" else build_tiny()
    models.decoder.set_progress_bar_config(disable=True)
    built = time.perf_counter() - started
    # offload moves the weights for good: the low-VRAM preset goes last
    order = sorted(args.presets, key=lambda name: get_preset(name).offload)
    result: dict = {
        "size": args.size,
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "diffusers": diffusers.__version__,
        "dtypes": {"game_state": str(models.game_state.dtype),
                   "decoder": str(models.decoder.transformer.dtype)},
        "window": args.window,
        "warmup_turns": args.warmup,
        "compile": args.compile,
        "build_s": built,
        "attention": attention_backends(models.game_state, models.decoder),
        "presets": {},
    }
    clips_of: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory(prefix="turn-gpu-") as folder:
        clips = ClipStore(Path(folder))
        for name in order:
            result["presets"][name], clips_of[name] = run_preset(
                models, name, args, device, clips
            )
            print(f"{name}: median turn {result['presets'][name]['median_total_s']:.3f} s")
    if "quality" in clips_of:
        baseline = clips_of["quality"].astype(np.float64)
        for name, clip in clips_of.items():
            result["presets"][name]["clip_mean_abs_diff_vs_quality"] = float(
                np.abs(clip.astype(np.float64) - baseline).mean() / 255.0
            )
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
