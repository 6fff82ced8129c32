"""Peak memory of one character at full size, from the release's files to a turn, with random
weights (no download, nothing committed).

    nice -n 10 python benchmarks/memory.py --full-size     # 7B + 2B at their real sizes
    python benchmarks/memory.py --small                    # the same stages, small, a minute

It writes random weights in the release's own layouts into a temporary folder (`--workdir`):
the base `Mistral-7B-Instruct-v0.1` folder (config, safetensors shards with their index, the
tokenizer files of the project's tokenizer builder), the release's MLLM checkpoint
(`pytorch_model.bin` of the wrapper: LoRA, trained norms and embeddings, resamplers; the frozen base
weights are left to the base folder, which docs/design.md §2 allows), the decoder's SAT/DeepSpeed
folder (`latest` → `10000/mp_rank_00_model_states.pt`, the network under `module` with prefix
`model.diffusion_model.`) and the CogVideoX-2b VAE in diffusers' format; each file or shard is
generated and written on its own, so writing needs about one shard of memory. Then every stage
runs in its own process and prints one JSON line, `stage`, `seconds`, `peak_rss_gb` (the
process's peak resident set in 10⁹ bytes, file pages it mapped included), `peak_anon_gb` (the
peak of its anonymous memory, sampled: what must fit in RAM, the mapped weight files' pages left
out, since the kernel can drop and read them again) and `peak_vram_gb` on CUDA:

* `convert`: release → project layout (`convert_release`, as the app's first start does);
  the release's files are deleted afterwards (the converted folder is all the rest needs);
* `load` (per preset): the character as the app loads it (`load_character_models` with the
  preset's quantization, then `apply_preset`). On CUDA with the preset's placement; on a CPU
  with the GPU's dtypes (bf16 language model, fp16 decoder), kept in CPU memory, which is what
  the offloading presets hold in RAM;
* `predict`: one game-state prediction (bf16 on a CPU) on a window with one past turn: the
  representation [1, 226, 1920] and the state ids. Random weights give random ids on the
  release's path, which do not parse into states (`states_parse` says so); the one-pass path of
  models trained here decodes within the state grammar, so its ids parse
  (`grammar_states_parse`);
* `decoder-step`: one transformer forward at full size; on a CPU on a small latent (the CFG
  batch of 2, 2 latent frames of 8 × 8), on CUDA on the release's latent (5 × 60 × 90);
* `turn` (CUDA only): a whole turn per preset (prediction, `--steps` denoising steps, decode).

A watchdog stops a stage (and says so) when the machine's available memory falls below
`--min-available-gb`. The temporary folder is deleted at the end unless `--keep`.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from animegamer.models.decoder_defaults import RELEASE_CHECKPOINT_NAME  # noqa: E402
from animegamer.models.game_state_defaults import (  # noqa: E402
    FULL_REPRESENTATION_DIM,
    MISTRAL_7B_ARCHITECTURE,
)
from animegamer.models.tiny_decoder import (  # noqa: E402
    SatDecoderSizes,
    release_position_table,
    sat_decoder_state_dict,
)

if TYPE_CHECKING:
    from animegamer.serving.devices import Placement

GB = 1e9
SHARD_BYTES = 2 * 2**30
"""Shard size of the written base model: writing needs about one shard of memory."""
POOL_VALUES = 1 << 24
RELEASE_LORA_RANK = 32
RELEASE_STEP = "10000"
CHARACTER = "Qiqi"
DEFAULT_PRESETS = ("quality", "consumer", "tiny-vram")


@dataclass(frozen=True)
class Scale:
    """Sizes of the written release: `--full-size` or `--small`."""

    mistral: dict
    decoder: SatDecoderSizes
    vae: dict = field(default_factory=dict)

    @property
    def representation_dim(self) -> int:
        return self.decoder.hidden


FULL = Scale(MISTRAL_7B_ARCHITECTURE, SatDecoderSizes())
SMALL = Scale(
    dict(MISTRAL_7B_ARCHITECTURE, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
         num_attention_heads=4, num_key_value_heads=2, head_dim=64),
    SatDecoderSizes(num_layers=2, hidden=128, heads=2, time_embed_dim=64,
                    latent_size=(8, 12), text_hidden=256, image_hidden=64),
    {"block_out_channels": (4, 4, 8, 8), "layers_per_block": 1, "norm_num_groups": 2,
     "sample_height": 64, "sample_width": 96},
)
assert FULL.representation_dim == FULL_REPRESENTATION_DIM


@dataclass(frozen=True)
class Layout:
    """Where everything lies under the work folder."""

    root: Path

    @property
    def base_llm(self) -> Path:
        return self.root / "Mistral-7B-Instruct-v0.1"

    @property
    def mllm_bin(self) -> Path:
        return self.root / f"MLLM-{CHARACTER}" / "pytorch_model.bin"

    @property
    def decoder_dir(self) -> Path:
        return self.root / f"VDM_Decoder-{CHARACTER}"

    @property
    def vae_dir(self) -> Path:
        return self.root / "CogVideoX-2b" / "vae"

    @property
    def character(self) -> Path:
        return self.root / "character"

    @property
    def release_dirs(self) -> tuple[Path, ...]:
        return (self.base_llm, self.mllm_bin.parent, self.decoder_dir, self.vae_dir.parent)


# ---- writing the release, one file or shard at a time ----


class RandomPool:
    """Random bf16 values at the cost of a copy: a tensor is a seeded window of one pool of
    standard normal values, repeated (drawing 9 billion normal values would take the 2 cores
    of a small machine most of an hour; the memory measured is the same)."""

    def __init__(self, seed: int, size: int = POOL_VALUES):
        generator = torch.Generator().manual_seed(seed)
        self.pool = torch.randn(2 * size, generator=generator).to(torch.bfloat16)
        self.size = size
        self.offsets = torch.Generator().manual_seed(seed + 1)

    def __call__(self, shape: tuple[int, ...], scale: float) -> torch.Tensor:
        count = int(torch.Size(shape).numel())
        start = int(torch.randint(self.size, (), generator=self.offsets))
        window = self.pool[start:start + self.size]
        values = window.repeat(-(-count // self.size))[:count] if count > self.size else (
            window[:count].clone())
        return values.mul_(scale).view(shape)


def _mistral_shapes(mistral: dict, vocab_size: int) -> dict[str, tuple[int, ...]]:
    from transformers import MistralConfig, MistralForCausalLM

    with torch.device("meta"):
        model = MistralForCausalLM(MistralConfig(vocab_size=vocab_size, **mistral))
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def write_base_llm(scale: Scale, out: Path, seed: int = 0) -> None:
    """The base model's folder as the Hub has it: config, sharded safetensors with their
    index, tokenizer files (`build_tiny_base_tokenizer`: 32000 ids, Llama-style)."""
    from safetensors.torch import save_file
    from transformers import MistralConfig

    from animegamer.models.tiny_game_state import build_tiny_base_tokenizer
    from animegamer.models.tokens import BASE_VOCAB_SIZE

    out.mkdir(parents=True)
    config = MistralConfig(vocab_size=BASE_VOCAB_SIZE, dtype="bfloat16", **scale.mistral)
    config.save_pretrained(out)
    build_tiny_base_tokenizer().save_pretrained(out)
    shapes = _mistral_shapes(scale.mistral, BASE_VOCAB_SIZE)
    shards: list[list[str]] = [[]]
    size = 0
    for key, shape in shapes.items():
        nbytes = 2 * int(torch.Size(shape).numel())
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(key)
        size += nbytes
    random = RandomPool(seed)
    weight_map, total = {}, 0
    for number, keys in enumerate(shards, start=1):
        name = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        tensors = {k: torch.ones(shapes[k], dtype=torch.bfloat16) if k.endswith("norm.weight")
                   else random(shapes[k], 0.02) for k in keys}
        total += sum(t.nbytes for t in tensors.values())
        save_file(tensors, out / name, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(keys, name))
        del tensors
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def write_mllm_release(scale: Scale, out: Path, seed: int = 1) -> None:
    """The release's `pytorch_model.bin` (PEFT names), without the frozen base weights."""
    from animegamer.characters.conversion.mllm import (
        ATTENTION_PROJECTIONS,
        LAYER_NORMS,
        MLP_PROJECTIONS,
        RELEASE_LLM_PREFIX,
    )
    from animegamer.models.tokens import BASE_VOCAB_SIZE, VOCAB_SIZE

    random = RandomPool(seed)
    shapes = _mistral_shapes(scale.mistral, BASE_VOCAB_SIZE)
    hidden, width, rank = scale.mistral["hidden_size"], scale.representation_dim, RELEASE_LORA_RANK
    state = {}
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        state[RELEASE_LLM_PREFIX + name] = random((VOCAB_SIZE, hidden), 0.02)
    for i in range(scale.mistral["num_hidden_layers"]):
        for group, names in (("self_attn", ATTENTION_PROJECTIONS), ("mlp", MLP_PROJECTIONS)):
            for proj in names:
                prefixed = f"{RELEASE_LLM_PREFIX}model.layers.{i}.{group}.{proj}"
                rows, columns = shapes[f"model.layers.{i}.{group}.{proj}.weight"]
                state[f"{prefixed}.lora_A.default.weight"] = random((rank, columns), 0.02)
                state[f"{prefixed}.lora_B.default.weight"] = random((rows, rank), 0.02)
    norms = [f"model.layers.{i}.{n}" for i in range(scale.mistral["num_hidden_layers"])
             for n in LAYER_NORMS]
    for name in [*norms, "model.norm"]:
        state[f"{RELEASE_LLM_PREFIX}{name}.modules_to_save.default.weight"] = torch.ones(
            hidden, dtype=torch.bfloat16)
    for key, shape in {
        "input_resampler.proj.0.weight": (hidden, width), "input_resampler.proj.0.bias": (hidden,),
        "input_resampler.proj.2.weight": (hidden, hidden), "input_resampler.proj.2.bias": (hidden,),
        "output_resampler.proj.0.weight": (width, hidden), "output_resampler.proj.0.bias": (width,),
        "output_resampler.proj.2.weight": (width, width), "output_resampler.proj.2.bias": (width,),
    }.items():
        state[key] = random(shape, shape[-1] ** -0.5)
    out.parent.mkdir(parents=True)
    torch.save(state, out)


def write_decoder_release(scale: Scale, out: Path, seed: int = 2) -> None:
    """The SAT/DeepSpeed folder: `latest` and `<step>/mp_rank_00_model_states.pt` (bf16)."""
    random = RandomPool(seed)
    meta = sat_decoder_state_dict(scale.decoder, device="meta")
    state = {}
    for key, tensor in meta.items():
        shape = tuple(tensor.shape)
        if key.endswith("pos_embed.pos_embedding"):
            state[key] = release_position_table(scale.decoder).to(torch.bfloat16)
        elif "norm" in key and key.endswith(".weight"):
            state[key] = random(shape, 0.1).add_(1)
        else:
            state[key] = random(shape, shape[-1] ** -0.5 if len(shape) > 1 else 0.1)
    (out / RELEASE_STEP).mkdir(parents=True)
    (out / "latest").write_text(RELEASE_STEP)
    torch.save({"module": state}, out / RELEASE_STEP / RELEASE_CHECKPOINT_NAME)


def write_vae(scale: Scale, out: Path, seed: int = 3) -> None:
    """CogVideoX's VAE in diffusers' layout (`--full-size`: the CogVideoX-2b architecture)."""
    from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX

    torch.manual_seed(seed)
    AutoencoderKLCogVideoX(**scale.vae).save_pretrained(out)


def write_release(scale: Scale, layout: Layout, preset: str = "") -> dict:
    write_base_llm(scale, layout.base_llm)
    write_mllm_release(scale, layout.mllm_bin)
    write_decoder_release(scale, layout.decoder_dir)
    write_vae(scale, layout.vae_dir)
    return {"release_gb": round(sum(_size(p) for p in layout.release_dirs) / GB, 2)}


# ---- the measured stages (each in its own process) ----


def stage_convert(scale: Scale, layout: Layout, preset: str) -> dict:
    from animegamer.characters.conversion.character import ReleaseFiles, convert_release

    files = ReleaseFiles(
        mllm_bin=layout.mllm_bin, decoder_dir=layout.decoder_dir, base_llm_dir=layout.base_llm,
        vae_dir=layout.vae_dir, sources={"benchmark": {"revision": "random", "commit": None}},
        latent_size=scale.decoder.latent_size,
    )
    convert_release(files, layout.character, name=CHARACTER, check_resources_first=False)
    return {"converted_gb": round(_size(layout.character) / GB, 2)}


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
    baseline = _peak_rss_gb()
    started = time.perf_counter()
    with AnonymousPeak() as anonymous:
        record = {"stage": name, **STAGES[name](scale, layout, preset)}
    record["seconds"] = round(time.perf_counter() - started, 1)
    record["peak_rss_gb"] = _peak_rss_gb()
    if anonymous.peak_gb is not None:
        record["peak_anon_gb"] = anonymous.peak_gb
    record["rss_after_imports_gb"] = baseline
    if torch.cuda.is_available():
        record["peak_vram_gb"] = round(torch.cuda.max_memory_allocated() / GB, 2)
    return record


class AnonymousPeak:
    """The peak of this process's anonymous resident memory (`RssAnon`, Linux), sampled every
    `interval` seconds in a thread. Unlike the peak RSS, it leaves out the pages of memory-mapped
    weight files, which the kernel can drop and read again: it is what must fit in RAM.
    `peak_gb` is None where /proc is not there."""

    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.peak_gb: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> AnonymousPeak:
        if Path("/proc/self/status").is_file():
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _sample(self) -> None:
        peak = 0
        status = Path("/proc/self/status")
        while True:
            for line in status.read_text().splitlines():
                if line.startswith("RssAnon:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
            self.peak_gb = round(peak / GB, 2)
            if self._stop.wait(self.interval):
                return


def _peak_rss_gb() -> float:
    """This process's peak RSS (`VmHWM`): `ru_maxrss` would include the parent's, which Linux
    carries over `exec`."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) * 1024 / GB, 2)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB, 2)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ---- weights per preset, from parameter bytes ----

BYTES_PER_VALUE = {None: 2.0, "int8": 1.0, "nf4": 0.5 + 4 / 64}
"""Bytes per weight value: bf16/fp16; int8 (its per-row scale counted apart); NF4 with one
fp32 absmax per block of 64."""


def _linear_and_other(model: torch.nn.Module, skip: tuple[str, ...] = ()) -> tuple[int, int, int]:
    """(values in quantizable Linear weights, their rows, every other parameter value)."""
    linear = rows = 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and not name.endswith(skip):
            linear += module.weight.numel()
            rows += module.weight.shape[0]
    return linear, rows, sum(p.numel() for p in model.parameters()) - linear


def estimate_weights_gb(scale: Scale) -> dict[str, dict[str, float]]:
    """Weights of each network under each preset, in GB: what the GPU holds at once is their
    sum for resident presets and the largest for offloading ones (activations not counted);
    what CPU memory holds between turns is their sum for offloading presets, none otherwise."""
    from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX
    from transformers import MistralConfig, MistralForCausalLM

    from animegamer.models.tokens import VOCAB_SIZE
    from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel
    from animegamer.serving.presets import PRESETS

    hidden, width = scale.mistral["hidden_size"], scale.representation_dim
    resamplers = 2 * hidden * width + hidden * hidden + width * width
    with torch.device("meta"):
        llm = _linear_and_other(MistralForCausalLM(MistralConfig(vocab_size=VOCAB_SIZE,
                                                                 **scale.mistral)), ("lm_head",))
        sizes = scale.decoder
        dit = _linear_and_other(AnimeGamerTransformer3DModel(
            num_attention_heads=sizes.heads, attention_head_dim=sizes.hidden // sizes.heads,
            time_embed_dim=sizes.time_embed_dim, num_layers=sizes.num_layers))
        vae_values = sum(p.numel() for p in AutoencoderKLCogVideoX(**scale.vae).parameters())

    def size(counts: tuple[int, int, int], scheme: str | None) -> float:
        linear, rows, other = counts
        scales = 2 * rows if scheme == "int8" else 0
        return (linear * BYTES_PER_VALUE[scheme] + scales + 2 * other) / GB

    estimates = {}
    for name, preset in PRESETS.items():
        parts = {"language_model": size(llm, preset.quantization.language_model)
                 + 2 * resamplers / GB,
                 "transformer": size(dit, preset.quantization.transformer),
                 "vae": 2 * vae_values / GB}
        on_gpu = max(parts.values()) if preset.offload else sum(parts.values())
        estimates[name] = {**{k: round(v, 2) for k, v in parts.items()},
                           "gpu_weights_gb": round(on_gpu, 2),
                           "ram_weights_gb": round(sum(parts.values()), 2) if preset.offload
                           else 0.0}
    return estimates


# ---- the driver ----


def _child(args: argparse.Namespace, stage: str, preset: str = "quality") -> list[str]:
    return [sys.executable, __file__, "--stage", stage, "--preset", preset,
            "--workdir", str(args.workdir), "--small" if args.small else "--full-size"]


def _watch(command: list[str], min_available_gb: float) -> Iterator[str]:
    """Run `command`, yield its JSON lines; stop it when available memory runs low."""
    import psutil

    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    while process.poll() is None:
        if psutil.virtual_memory().available < min_available_gb * GB:
            process.kill()
            process.wait()
            yield json.dumps({"stopped": f"available memory fell below {min_available_gb} GB"})
            return
        time.sleep(0.5)
    assert process.stdout is not None
    lines = [line for line in process.stdout.read().splitlines() if line.startswith("{")]
    if process.returncode:
        lines.append(json.dumps({"failed": f"exit status {process.returncode}"}))
    yield from lines


def drive(args: argparse.Namespace) -> int:
    created = args.workdir is None
    args.workdir = Path(args.workdir or tempfile.mkdtemp(prefix="animegamer-memory-"))
    layout = Layout(args.workdir)
    plan = [("convert", "quality"), *(("load", p) for p in args.presets),
            ("decoder-step", "quality"), ("predict", "quality"),
            *(("turn", p) for p in args.presets)]
    if layout.character.exists():  # converted by an earlier run with --workdir
        plan = plan[1:]
    elif not layout.mllm_bin.exists():
        plan.insert(0, ("write", "quality"))
    try:
        for stage, preset in plan:
            for line in _watch(_child(args, stage, preset), args.min_available_gb):
                record = json.loads(line)
                record.setdefault("stage", stage)
                print(json.dumps(record), flush=True)
            if stage == "convert":
                for directory in layout.release_dirs:
                    shutil.rmtree(directory, ignore_errors=True)
    finally:
        if created and not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--full-size", action="store_true", help="the release's real sizes")
    size.add_argument("--small", action="store_true", help="a small scale check of the stages")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="work folder (default: a new temporary one, deleted at the end)")
    parser.add_argument("--presets", nargs="+", default=list(DEFAULT_PRESETS))
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--min-available-gb", type=float, default=1.5)
    parser.add_argument("--estimate", action="store_true",
                        help="print the weights of each preset from parameter bytes, and stop")
    parser.add_argument("--stage", choices=sorted(STAGES), help=argparse.SUPPRESS)
    parser.add_argument("--preset", default="quality", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.estimate:
        for name, estimate in estimate_weights_gb(SMALL if args.small else FULL).items():
            print(json.dumps({"preset": name, "estimate": "parameter bytes", **estimate}))
        return 0
    if args.stage:
        scale = SMALL if args.small else FULL
        print(json.dumps(run_stage(args.stage, scale, Layout(args.workdir), args.preset)))
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
