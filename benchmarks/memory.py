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

This file drives the stages; beside it, `memory_release.py` writes the release,
`memory_stages.py` holds the stages, `memory_sampling.py` samples a process's memory and
`memory_estimate.py` counts the weights of each preset (`--estimate`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.memory_estimate import estimate_weights_gb  # noqa: E402
from benchmarks.memory_release import FULL, SMALL, Layout  # noqa: E402
from benchmarks.memory_sampling import GB  # noqa: E402
from benchmarks.memory_stages import STAGES, run_stage  # noqa: E402

DEFAULT_PRESETS = ("quality", "consumer", "tiny-vram")


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
