"""Quantized loading of a character's networks, through the libraries' own configs.

A preset may load the game-state model's language model and the decoder's transformer quantized:

* `int8`: torchao's int8 weight-only quantization (`Int8WeightOnlyConfig`), given to
  `from_pretrained` as transformers' or diffusers' `TorchAoConfig`. Every `nn.Linear` weight is
  stored as int8 with one scale per output channel and dequantized in the matmul; it runs on a
  CPU as on a GPU. transformers leaves the output embedding (`lm_head`) unquantized.
* `nf4`: bitsandbytes' 4-bit NormalFloat (`BitsAndBytesConfig(load_in_4bit=True)`) for the
  language model only, computing in the placement's dtype.

The decoder's transformer goes through diffusers' `PipelineQuantizationConfig` (its
`quant_mapping` names the `transformer` component), so the VAE and scheduler load as before.
The resamplers, the embeddings and the VAE stay in the placement's dtype: they are small.

This module imports no quantization package at import time: `missing_packages` tells which a
scheme needs and lacks (`Settings.validate` refuses such a preset in one line), and the config
builders import them only when called. The packages are the optional extra
`requirements-quant.txt` (importing diffusers imports whichever is installed, so a start-up
that does not use them should not pay for them).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

QUANT_REQUIREMENTS = "requirements-quant.txt"
"""The optional extra that installs the quantization packages."""
LanguageModelScheme = Literal["int8", "nf4"]
TransformerScheme = Literal["int8"]
SCHEME_PACKAGES: Mapping[str, str] = MappingProxyType({"int8": "torchao", "nf4": "bitsandbytes"})
"""The package each scheme needs (its import name, also its PyPI name)."""


@dataclass(frozen=True)
class Quantization:
    """How a preset quantizes the two large networks (None: not quantized)."""

    language_model: LanguageModelScheme | None = None
    transformer: TransformerScheme | None = None

    @property
    def enabled(self) -> bool:
        return self.language_model is not None or self.transformer is not None

    def packages(self) -> tuple[str, ...]:
        """The packages this scheme imports, in a stable order, without repeats."""
        schemes = (self.language_model, self.transformer)
        return tuple(dict.fromkeys(SCHEME_PACKAGES[s] for s in schemes if s is not None))

    def language_model_config(self, compute_dtype: torch.dtype) -> Any:
        """The `quantization_config` for the language model's `from_pretrained`, or None."""
        if self.language_model is None:
            return None
        if self.language_model == "nf4":
            from transformers import BitsAndBytesConfig

            return BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute_dtype
            )
        from torchao.quantization import Int8WeightOnlyConfig
        from transformers import TorchAoConfig

        return TorchAoConfig(Int8WeightOnlyConfig())

    def decoder_config(self) -> Any:
        """The `quantization_config` for `AnimeGamerPipeline.from_pretrained`, or None."""
        if self.transformer is None:
            return None
        from diffusers import PipelineQuantizationConfig
        from diffusers import TorchAoConfig as DiffusersTorchAoConfig
        from torchao.quantization import Int8WeightOnlyConfig

        transformer: Any = DiffusersTorchAoConfig(Int8WeightOnlyConfig())
        return PipelineQuantizationConfig(quant_mapping={"transformer": transformer})


NO_QUANTIZATION = Quantization()
PRESET_QUANTIZATION: Mapping[str, Quantization] = MappingProxyType({
    "consumer": Quantization(language_model="int8", transformer="int8"),
    "tiny-vram": Quantization(language_model="nf4", transformer="int8"),
})
"""The presets that quantize (`animegamer.serving.presets.PRESETS` holds the rest of each
preset)."""


def missing_packages(quantization: Quantization) -> tuple[str, ...]:
    """The packages `quantization` needs that are not installed."""
    return tuple(p for p in quantization.packages() if importlib.util.find_spec(p) is None)


def missing_packages_message(preset: str) -> str | None:
    """One line saying which packages preset `preset` lacks, or None when it lacks none."""
    missing = missing_packages(PRESET_QUANTIZATION.get(preset, NO_QUANTIZATION))
    if not missing:
        return None
    return (
        f"preset {preset!r} needs the package {' and '.join(missing)}, which is not installed: "
        f"pip install -r {QUANT_REQUIREMENTS}"
    )
