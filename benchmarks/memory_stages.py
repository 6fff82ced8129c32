"""The measured stages of `benchmarks/memory.py`, each run in its own process: converting the
release, loading a character per preset, one prediction, one decoder step, a whole turn (CUDA)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from benchmarks.memory_release import CHARACTER, Layout, Scale, folder_size, write_release
from benchmarks.memory_sampling import GB, AnonymousPeak, peak_rss_gb

if TYPE_CHECKING:
    from animegamer.serving.devices import Placement


def stage_convert(scale: Scale, layout: Layout, preset: str) -> dict:
    from animegamer.characters.conversion.character import ReleaseFiles, convert_release

    files = ReleaseFiles(
        mllm_bin=layout.mllm_bin, decoder_dir=layout.decoder_dir, base_llm_dir=layout.base_llm,
        vae_dir=layout.vae_dir, sources={"benchmark": {"revision": "random", "commit": None}},
        latent_size=scale.decoder.latent_size,
    )
    convert_release(files, layout.character, name=CHARACTER, check_resources_first=False)
    return {"converted_gb": round(folder_size(layout.character) / GB, 2)}


def _placement(preset_name: str) -> Placement:
    from animegamer.serving.devices import Placement, choose_placement
    from animegamer.serving.presets import get_preset

    if torch.cuda.is_available():
        return choose_placement(get_preset(preset_name).low_vram("auto"))
    return Placement(device="cpu", game_state_dtype=torch.bfloat16, decoder_dtype=torch.float16)


def stage_load(scale: Scale, layout: Layout, preset: str) -> dict:
    from animegamer.serving.loading import load_character_models
    from animegamer.serving.presets import apply_preset, get_preset

    chosen = get_preset(preset)
    models = load_character_models(layout.character, _placement(preset), chosen.quantization)
    apply_preset(chosen, models.decoder)
    return {"preset": preset, "quantization": chosen.quantization.packages()}


def stage_predict(scale: Scale, layout: Layout, preset: str) -> dict:
    from animegamer.evaluate.quantized import random_windows
    from animegamer.models.game_state import GameStateModel
    from animegamer.models.tokens import build_prompt, parse_state_ids

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = GameStateModel.from_pretrained(layout.character, device=device, dtype=torch.bfloat16)
    (window,) = [w for w in random_windows(20, scale.representation_dim, seed=0) if
                 len(w.history) == 1][:1]
    assert model.tokenizer is not None
    prompt = build_prompt(model.tokenizer, [t for t, _ in window.history], window.instruction)
    history = [r.to(device, torch.bfloat16) for _, r in window.history]
    started = time.perf_counter()
    with torch.no_grad():
        representation, ids = model.represent_and_predict_states(prompt.input_ids, history)
    predict_seconds = time.perf_counter() - started
    started = time.perf_counter()
    with torch.no_grad():  # the one-pass path of models trained here, decoding in the grammar
        _, grammar_ids = model.represent_and_generate(prompt.input_ids, history)
    return {
        "prompt_tokens": int(prompt.input_ids.shape[-1]),
        "predict_seconds": round(predict_seconds, 1),
        "representation_shape": list(representation.shape),
        "representation_finite": bool(torch.isfinite(representation).all()),
        "state_ids": ids,
        "states_parse": parse_state_ids(ids) is not None,
        "grammar_seconds": round(time.perf_counter() - started, 1),
        "grammar_state_ids": grammar_ids,
        "grammar_states_parse": parse_state_ids(grammar_ids) is not None,
    }


def stage_decoder_step(scale: Scale, layout: Layout, preset: str) -> dict:
    from animegamer.game.representation import REPRESENTATION_TOKENS
    from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel

    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.float16) if cuda else ("cpu", torch.bfloat16)
    model = AnimeGamerTransformer3DModel.from_pretrained(
        layout.character / "transformer", torch_dtype=dtype).to(device).eval()
    config = model.config
    frames, height, width = (5, config.sample_height, config.sample_width) if cuda else (2, 8, 8)
    latent = torch.randn(2, frames, config.out_channels, height, width, device=device, dtype=dtype)
    context = torch.randn(2, REPRESENTATION_TOKENS, scale.representation_dim, device=device,
                          dtype=dtype)
    started = time.perf_counter()
    with torch.no_grad():
        output = model(hidden_states=latent, encoder_hidden_states=context,
                       timestep=torch.tensor([500, 500], device=device),
                       ofs=torch.tensor([5.0, 5.0], device=device), return_dict=False)[0]
    return {"latent": list(latent.shape), "dtype": str(dtype).removeprefix("torch."),
            "forward_seconds": round(time.perf_counter() - started, 2),
            "output_finite": bool(torch.isfinite(output).all())}


def stage_turn(scale: Scale, layout: Layout, preset: str, steps: int = 50) -> dict:
    from animegamer.game.rules import effective_motion_level
    from animegamer.serving.loading import load_character_models
    from animegamer.serving.presets import apply_preset, get_preset

    chosen = get_preset(preset)
    models = load_character_models(layout.character, _placement(preset), chosen.quantization)
    apply_preset(chosen, models.decoder)
    started = time.perf_counter()
    representation, states = models.game_state.predict(
        [], "Character: Qiqi; Motion: quickly fly on broomstick; Background: day sky.")
    output = models.decoder(representation, motion_level=effective_motion_level(states.ml),
                            num_inference_steps=chosen.steps(steps),
                            generator=torch.Generator("cpu").manual_seed(0))
    return {"preset": preset, "turn_seconds": round(time.perf_counter() - started, 1),
            "frames": list(output.frames[0].shape)}


STAGES: dict[str, Callable[[Scale, Layout, str], dict]] = {
    "write": write_release, "convert": stage_convert, "load": stage_load, "predict": stage_predict,
    "decoder-step": stage_decoder_step, "turn": stage_turn,
}


def run_stage(name: str, scale: Scale, layout: Layout, preset: str) -> dict:
    """Run one stage in this process; its JSON record."""
    from animegamer.serving.presets import get_preset

    packages = get_preset(preset).quantization.packages() if name in ("load", "turn") else ()
    from animegamer.serving.quantization import missing_packages_message

    missing = missing_packages_message(preset) if packages else None
    if missing:
        return {"stage": name, "preset": preset, "skipped": missing}
    if name == "turn" and not torch.cuda.is_available():
        return {"stage": name, "preset": preset, "skipped": "needs CUDA (pending a GPU)"}
    baseline = peak_rss_gb()
    started = time.perf_counter()
    with AnonymousPeak() as anonymous:
        record = {"stage": name, **STAGES[name](scale, layout, preset)}
    record["seconds"] = round(time.perf_counter() - started, 1)
    record["peak_rss_gb"] = peak_rss_gb()
    if anonymous.peak_gb is not None:
        record["peak_anon_gb"] = anonymous.peak_gb
    record["rss_after_imports_gb"] = baseline
    if torch.cuda.is_available():
        record["peak_vram_gb"] = round(torch.cuda.max_memory_allocated() / GB, 2)
    return record
