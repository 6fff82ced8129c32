"""Quiet by default: a command prints its own lines, and the libraries' chatter only with
`--verbose`.

Importing diffusers (or transformers' quantizers) imports torchao whenever it is installed,
even when no preset quantizes, and torchao then reports at import time what it could not load
(kernels built for another Python or GPU, deprecated registrations through torch's pytree
logger, tensor types diffusers could not import). None of it concerns a run that does not
quantize, and a preset that does fails with its own message. `NOISY_LOGGERS` names exactly
those loggers; every other logger keeps its warnings. The libraries' progress bars (weights
loading, pipeline components, diffusion steps) are off too, unless `--verbose`.
"""

from __future__ import annotations

import argparse
import logging
import warnings

NOISY_LOGGERS = (
    "torchao",
    "torch.utils._pytree",
    "diffusers.quantizers.torchao.torchao_quantizer",
)
"""The loggers that speak on import of the optional quantization stack (see the module doc)."""
NOISY_WARNINGS = (
    # peft asks transformers' deprecated alias while wrapping the game-state model for training
    (FutureWarning, r"`is_gradient_checkpointing` is deprecated"),
)
"""Warnings one library raises about another's API, which the user can do nothing about."""
FORMAT = "%(levelname)s %(name)s: %(message)s"
PACKAGE = "animegamer"


def add_verbose_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--verbose", action="store_true",
        help="also print the libraries' messages and progress bars (default: only this "
        "command's own lines and warnings)",
    )


def configure_output(
    verbose: bool, *, own_level: int = logging.WARNING, timestamps: bool = False
) -> None:
    """Set up logging for a command: warnings and errors of every logger (INFO with
    `verbose`), this package's own from `own_level` (INFO where its lines are the command's
    progress: the app, convert), without `NOISY_LOGGERS` below ERROR unless `verbose`. Call it
    before the command imports diffusers or transformers (their import is what speaks)."""
    fmt = f"%(asctime)s {FORMAT}" if timestamps else FORMAT
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format=fmt)
    logging.getLogger(PACKAGE).setLevel(logging.INFO if verbose else own_level)
    level = logging.NOTSET if verbose else logging.ERROR
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(level)
    if not verbose:
        for category, message in NOISY_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category)


def hide_progress_bars(datasets: bool = False) -> None:
    """Turn off the progress bars diffusers and transformers draw while loading weights (a
    pipeline's own step bar is `set_progress_bar_config(disable=True)` on it), and with
    `datasets` the ones `datasets` draws while writing Parquet (the commands that build one)."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    diffusers_logging.disable_progress_bar()
    transformers_logging.disable_progress_bar()
    if datasets:
        from datasets.utils.tqdm import disable_progress_bars

        disable_progress_bars()
