"""Fidelity of the quantized presets against the same weights unquantized: one JSON line each.

    python benchmarks/quantized.py                        # the Nano models (assets/nano)
    python benchmarks/quantized.py --character DIR        # a converted character folder

On a CPU it measures int8 (torchao, `consumer`'s scheme) in fp32; on CUDA every quantizing
preset of `animegamer.serving.presets` in the GPU's dtypes (bf16 language model, fp16 decoder).
Each line has the preset, `equal_state_tokens` out of `windows` random game windows (the generated
ids),
the representation's worst and mean cosine similarity, and the relative error of one decoder
transformer step (`animegamer.evaluate.quantized`). A preset whose packages are missing gets a
`skipped` line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from animegamer.evaluate.quantized import (
    decoder_step_relative_error,
    game_state_fidelity,
    random_windows,
)
from animegamer.models.game_state import GameStateModel
from animegamer.paths import DEFAULT_NANO_DIR
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.serving.quantization import (
    PRESET_QUANTIZATION,
    QUANT_REQUIREMENTS,
    Quantization,
    missing_packages,
)


def measure(directory: Path, quantization: Quantization, windows: int, device: str,
            dtypes: tuple[torch.dtype, torch.dtype]) -> dict:
    """Fidelity of `quantization` on `device` against the unquantized models."""
    game_state_dtype, decoder_dtype = dtypes
    record: dict = {}
    if quantization.language_model is not None:
        reference = GameStateModel.from_pretrained(directory, device, game_state_dtype)
        quantized = GameStateModel.from_pretrained(
            directory, device, game_state_dtype,
            quantization_config=quantization.language_model_config(game_state_dtype),
        )
        fidelity = game_state_fidelity(
            reference, quantized, random_windows(windows, reference.representation_dim, seed=41)
        )
        record.update(windows=fidelity.windows, equal_state_tokens=fidelity.equal_state_tokens,
                      min_cosine=round(fidelity.min_cosine, 6),
                      mean_cosine=round(fidelity.mean_cosine, 6))
        del reference, quantized
    if quantization.transformer is not None:
        kwargs = {"dtype": decoder_dtype, "shot_encoder": None}
        reference = AnimeGamerPipeline.from_pretrained(directory, **kwargs).transformer.to(device)
        quantized = AnimeGamerPipeline.from_pretrained(
            directory, quantization_config=quantization.decoder_config(), **kwargs
        ).transformer.to(device)
        record["decoder_step_relative_error"] = round(
            decoder_step_relative_error(reference, quantized), 5)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--character", type=Path, default=DEFAULT_NANO_DIR)
    parser.add_argument("--windows", type=int, default=100)
    args = parser.parse_args(argv)
    if torch.cuda.is_available():
        device, dtypes = "cuda", (torch.bfloat16, torch.float16)
        presets = dict(PRESET_QUANTIZATION)
    else:
        device, dtypes = "cpu", (torch.float32, torch.float32)
        presets = {"int8": Quantization(language_model="int8", transformer="int8")}
    for name, quantization in presets.items():
        missing = missing_packages(quantization)
        if missing:
            skipped = f"needs {', '.join(missing)} ({QUANT_REQUIREMENTS})"
            print(json.dumps({"preset": name, "skipped": skipped}), flush=True)
            continue
        record = {"preset": name, "device": device,
                  **measure(args.character, quantization, args.windows, device, dtypes)}
        print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
