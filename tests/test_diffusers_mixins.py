"""diffusers' own pipeline tests (`PipelineTesterMixin` and the cache mixins CogVideoX's tests
use: FirstBlockCache, PyramidAttentionBroadcast, FasterCache) run against `AnimeGamerPipeline`.

diffusers does not ship its tests in its wheel, and this project does not copy them: point
`DIFFUSERS_TESTS` at the `tests/` folder of a diffusers checkout of the installed version
(`git clone https://github.com/huggingface/diffusers` at the tag of `diffusers.__version__`) and
install `parameterized` and `requests_mock`; without them this module is skipped. Tests that need
a GPU skip themselves; the attention-slicing test is off (it compares frames as images).
Measured 2026-12-06 (diffusers 0.42.1, its tests at commit 58eb52c080): 29 passed, 11 skipped.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import unittest
from pathlib import Path
from typing import Any

import pytest
import torch

from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from tests.test_pipeline_conventions import dummy_components, dummy_representation


def _diffusers_tests() -> object:
    """diffusers' `tests/pipelines/test_pipelines_common.py`, imported from `DIFFUSERS_TESTS`
    under the package name `diffusers_tests` (this project's own `tests` package keeps its)."""
    folder = os.environ.get("DIFFUSERS_TESTS")
    if not folder or not (Path(folder) / "pipelines" / "test_pipelines_common.py").is_file():
        pytest.skip("DIFFUSERS_TESTS (a diffusers checkout's tests/ folder) is not set",
                    allow_module_level=True)
    pytest.importorskip("parameterized")
    pytest.importorskip("requests_mock")
    spec = importlib.util.spec_from_file_location(
        "diffusers_tests", Path(folder) / "__init__.py", submodule_search_locations=[folder]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules["diffusers_tests"] = package
    spec.loader.exec_module(package)
    return importlib.import_module("diffusers_tests.pipelines.test_pipelines_common")


common: Any = _diffusers_tests()


class AnimeGamerPipelineFastTests(
    common.PipelineTesterMixin,
    common.PyramidAttentionBroadcastTesterMixin,
    common.FasterCacheTesterMixin,
    common.FirstBlockCacheTesterMixin,
    unittest.TestCase,
):
    pipeline_class = AnimeGamerPipeline
    params = frozenset(["representation", "motion_level", "guidance_scale"])
    batch_params = frozenset(["representation", "motion_level"])
    required_optional_params = frozenset([
        "num_inference_steps", "num_videos_per_prompt", "generator", "latents", "output_type",
        "return_dict", "callback_on_step_end", "callback_on_step_end_tensor_inputs",
    ])
    test_xformers_attention = False
    test_attention_slicing = False  # it compares frames as images
    test_layerwise_casting = True
    test_group_offloading = True
    def get_dummy_components(self, num_layers: int = 1) -> dict:
        return dummy_components(num_layers)

    def get_dummy_inputs(self, device, seed: int = 0) -> dict:
        return {
            "representation": dummy_representation(seed),
            "motion_level": 3,
            "generator": torch.Generator("cpu").manual_seed(seed),
            "num_inference_steps": 2,
            "guidance_scale": 6.0,
            "output_type": "pt",
        }

    def test_num_videos_per_prompt(self) -> None:
        """The mixin's `test_num_images_per_prompt`, for a video pipeline's name."""
        pipe = self.pipeline_class(**self.get_dummy_components())
        pipe.set_progress_bar_config(disable=True)
        for batch_size in (1, 2):
            for per_prompt in (1, 2):
                inputs = self.get_dummy_inputs("cpu")
                for key in self.batch_params:
                    inputs[key] = batch_size * [inputs[key]]
                videos = pipe(**inputs, num_videos_per_prompt=per_prompt)[0]
                assert videos.shape[0] == batch_size * per_prompt
