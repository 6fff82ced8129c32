"""Time one full-size animation shot on a CUDA GPU with random weights (nothing is downloaded).

    python benchmarks/decoder_gpu.py [--steps 50] [--dtype fp16] [--warmup-steps 2] [--offload]

Builds `AnimeGamerPipeline` with the CogVideoX-2B-sized `AnimeGamerTransformer3DModel` and the
CogVideoX VAE on the GPU, samples a 5×16×60×90 latent with CFG (batch 2) and decodes it to 17
frames of 480×720. Prints the seconds of each stage (DiT steps, VAE) and the peak GPU memory;
`--offload` runs it with `enable_model_cpu_offload()` (the low-VRAM mode). Random weights give a
meaningless clip; the timings and memory are those of the real model. On a machine without CUDA
it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diffusers import AutoencoderKLCogVideoX, CogVideoXDPMScheduler

from animegamer.models.decoder_defaults import DEFAULT_STEPS
from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.sampling import scheduler_config

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
GIB = 1 << 30


def build_pipeline(dtype: torch.dtype, offload: bool) -> AnimeGamerPipeline:
    """Full-size transformer and VAE, initialised directly on the GPU."""
    with torch.device("cuda"):
        transformer = AnimeGamerTransformer3DModel()
        vae = AutoencoderKLCogVideoX()
    transformer.uncond_representation.normal_()
    pipeline = AnimeGamerPipeline(
        transformer.to(dtype), vae.to(dtype), CogVideoXDPMScheduler(**scheduler_config())
    )
    pipeline.set_progress_bar_config(disable=True)
    if offload:
        pipeline.enable_model_cpu_offload()
    return pipeline


def synchronized_time() -> float:
    torch.cuda.synchronize()
    return time.perf_counter()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp16")
    parser.add_argument("--warmup-steps", type=int, default=2, help="untimed run first (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--offload", action="store_true", help="model CPU offload (low VRAM)")
    args = parser.parse_args()

    if not torch.cuda.is_available():
        print("decoder_gpu: no CUDA device here; this benchmark needs a GPU (nothing was run).")
        return 0

    dtype = DTYPES[args.dtype]
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, {args.dtype}")
    start = synchronized_time()
    pipeline = build_pipeline(dtype, args.offload)
    n_params = sum(p.numel() for p in pipeline.transformer.parameters())
    print(f"build: {synchronized_time() - start:.1f} s, transformer {n_params / 1e9:.3f} B params")
    representation = torch.randn(1, 226, pipeline.representation_dim, device="cuda")

    if args.warmup_steps:
        pipeline(representation, 3, num_inference_steps=args.warmup_steps)

    torch.cuda.reset_peak_memory_stats()
    step_times: list[float] = []
    last = [synchronized_time()]

    def on_step_end(pipeline, step, timestep, tensors):
        now = synchronized_time()
        step_times.append(now - last[0])
        last[0] = now
        return tensors

    start = last[0]
    latents = pipeline(
        representation,
        3,
        num_inference_steps=args.steps,
        generator=torch.Generator("cpu").manual_seed(args.seed),
        output_type="latent",
        callback_on_step_end=on_step_end,
    ).frames
    dit_end = synchronized_time()
    dit_peak = torch.cuda.max_memory_allocated() / GIB
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        frames = pipeline.postprocess_video(pipeline.decode_latents(latents), "np")
    pipeline.maybe_free_model_hooks()
    vae_end = synchronized_time()
    vae_peak = torch.cuda.max_memory_allocated() / GIB

    print(f"latent {tuple(latents.shape)} → frames {frames.shape}")
    print(
        f"DiT: {dit_end - start:.2f} s for {args.steps} steps "
        f"({sum(step_times) / len(step_times):.3f} s/step, first {step_times[0]:.3f} s), "
        f"peak {dit_peak:.2f} GiB"
    )
    print(f"VAE: {vae_end - dit_end:.2f} s, peak {vae_peak:.2f} GiB")
    print(f"total: {vae_end - start:.2f} s, peak {max(dit_peak, vae_peak):.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
