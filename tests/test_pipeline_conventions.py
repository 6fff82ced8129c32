"""The conventions diffusers' pipeline tests check (tests/test_diffusers_mixins.py runs those tests
themselves), asserted for `AnimeGamerPipeline`: list inputs batched, `num_videos_per_prompt`,
guidance read every step, `interrupt`, `attention_kwargs`, `current_timestep` for the cache
hooks."""

from __future__ import annotations

import inspect

import pytest
import torch
from diffusers import CogVideoXDPMScheduler, FasterCacheConfig, PyramidAttentionBroadcastConfig

from animegamer.models.tiny_decoder import tiny_transformer_config, tiny_vae
from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.sampling import scheduler_config

DIM = 64
LATENT = (4, 6)  # 32×48 frames
FRAMES = 9  # 3 latent frames


def dummy_components(num_layers: int = 1) -> dict:
    torch.manual_seed(0)
    config = {**tiny_transformer_config(DIM), "num_layers": num_layers,
              "sample_height": LATENT[0], "sample_width": LATENT[1], "sample_frames": FRAMES}
    transformer = AnimeGamerTransformer3DModel(**config)
    transformer.uncond_representation.normal_()
    torch.manual_seed(0)
    return {
        "transformer": transformer,
        "vae": tiny_vae(),
        "scheduler": CogVideoXDPMScheduler(**scheduler_config()),
        "shot_encoder": None,
        "image_encoder": None,
        "text_encoder": None,
        "tokenizer": None,
    }


def dummy_representation(seed: int = 0) -> torch.Tensor:
    return torch.randn(1, 226, DIM, generator=torch.Generator().manual_seed(seed))


# ---- the conventions, asserted for this pipeline ----


@pytest.fixture(scope="module")
def pipe() -> AnimeGamerPipeline:
    pipeline = AnimeGamerPipeline(**dummy_components(num_layers=2))
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


def render(pipe: AnimeGamerPipeline, representation=None, seed=1, **kwargs) -> torch.Tensor:
    arguments = {"motion_level": 3, "num_inference_steps": 4, "output_type": "latent",
                 "generator": torch.Generator().manual_seed(seed), **kwargs}
    if representation is None:
        representation = dummy_representation()
    return pipe(representation, **arguments).frames


def test_a_callback_that_changes_the_guidance_changes_the_next_steps(pipe):
    seen: list[float] = []

    def guidance_zero_after_step_one(pipeline, i, t, tensors):
        seen.append(pipeline.guidance_scale)
        if i == 1:
            pipeline._guidance_scale = 0.0
        return tensors

    changed = render(pipe, callback_on_step_end=guidance_zero_after_step_one)
    assert seen == [6.0, 6.0, 0.0, 0.0]
    # neither all steps at 6 nor all at 0: the change took effect from step 2 on
    assert (changed - render(pipe)).abs().max() > 1e-3
    assert (changed - render(pipe, guidance_scale=0.0)).abs().max() > 1e-3


def test_interrupt_stops_after_the_step_that_sets_it(pipe):
    calls: list[int] = []

    def stop_after_step_one(pipeline, i, t, tensors):
        calls.append(i)
        pipeline._interrupt = i == 1
        return tensors

    forwards: list[int] = []
    hook = pipe.transformer.register_forward_pre_hook(lambda *_: forwards.append(1))
    try:
        interrupted = render(pipe, callback_on_step_end=stop_after_step_one)
    finally:
        hook.remove()
    assert calls == [0, 1] and len(forwards) == 2 and pipe.interrupt
    assert (interrupted - render(pipe)).abs().max() > 1e-3
    render(pipe)  # the next call starts uninterrupted
    assert not pipe.interrupt


def test_a_list_of_representations_renders_each_as_alone(pipe):
    first, second = dummy_representation(5), dummy_representation(6)
    generators = [torch.Generator().manual_seed(10), torch.Generator().manual_seed(11)]
    batch = pipe([first[0], second], motion_level=[2, 4], num_inference_steps=4,
                 generator=generators, output_type="latent").frames
    alone = [render(pipe, first, seed=10, motion_level=2),
             render(pipe, second, seed=11, motion_level=4)]
    assert batch.shape[0] == 2
    torch.testing.assert_close(batch, torch.cat(alone), rtol=1e-4, atol=1e-5)


def test_num_videos_per_prompt_gives_each_video_its_noise(pipe):
    generators = [torch.Generator().manual_seed(seed) for seed in (20, 21, 22, 23)]
    videos = pipe([dummy_representation(1), dummy_representation(2)], motion_level=[1, 5],
                  num_videos_per_prompt=2, num_inference_steps=4, generator=generators,
                  output_type="latent").frames
    assert videos.shape[0] == 4
    torch.testing.assert_close(videos[1:2], render(pipe, dummy_representation(1), seed=21,
                                                   motion_level=1), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(videos[2:3], render(pipe, dummy_representation(2), seed=22,
                                                   motion_level=5), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="num_videos_per_prompt"):
        render(pipe, num_videos_per_prompt=0)
    with pytest.raises(ValueError, match="generators for a batch of 2"):
        render(pipe, num_videos_per_prompt=2, generator=[torch.Generator()])


def test_attention_kwargs_reach_the_transformer(pipe, monkeypatch):
    received: list[object] = []
    forward = pipe.transformer.forward

    def recording(*args, **kwargs):
        received.append(kwargs.get("attention_kwargs"))
        return forward(*args, **kwargs)

    monkeypatch.setattr(pipe.transformer, "forward", recording)
    render(pipe, num_inference_steps=2, attention_kwargs={"scale": 1.0})
    assert received == [{"scale": 1.0}, {"scale": 1.0}]


def test_current_timestep_is_the_step_being_denoised(pipe):
    during: list[int] = []
    hook = pipe.transformer.register_forward_pre_hook(
        lambda *_: during.append(int(pipe.current_timestep))
    )
    try:
        render(pipe)
    finally:
        hook.remove()
    assert during == [999, 749, 499, 249]
    assert pipe.current_timestep is None


def _faster_cache(pipe: AnimeGamerPipeline) -> FasterCacheConfig:
    return FasterCacheConfig(
        spatial_attention_block_skip_range=2,
        spatial_attention_timestep_skip_range=(-1, 901),
        unconditional_batch_skip_range=2,
        attention_weight_callback=lambda _: 0.5,
        current_timestep_callback=lambda: pipe.current_timestep,
    )


def _pyramid_attention_broadcast(pipe: AnimeGamerPipeline) -> PyramidAttentionBroadcastConfig:
    return PyramidAttentionBroadcastConfig(
        spatial_attention_block_skip_range=2, spatial_attention_timestep_skip_range=(0, 800),
        current_timestep_callback=lambda: pipe.current_timestep,
    )


@pytest.mark.parametrize("make_config", [_pyramid_attention_broadcast, _faster_cache])
def test_timestep_driven_cache_hooks_skip_attention(make_config, monkeypatch):
    pipe = AnimeGamerPipeline(**dummy_components(num_layers=2))
    pipe.set_progress_bar_config(disable=True)
    attention = torch.nn.functional.scaled_dot_product_attention
    computed: list[int] = []

    def counted(*args, **kwargs):
        computed.append(1)
        return attention(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counted)
    baseline = render(pipe)
    assert len(computed) == 8  # 2 blocks × 4 steps
    computed.clear()
    pipe.transformer.enable_cache(make_config(pipe))
    try:
        cached = render(pipe)
    finally:
        pipe.transformer.disable_cache()
    assert 0 < len(computed) < 8  # some steps reused the cached attention
    assert cached.shape == baseline.shape and torch.isfinite(cached).all()
    torch.testing.assert_close(render(pipe), baseline, rtol=0, atol=0)


def test_faster_cache_skips_the_unconditional_half_under_guidance():
    """diffusers' FasterCache, as configured for its own pipelines, drops the unconditional half
    of the [uncond, cond] batch on some steps: two shots with their own motion levels then run
    as a batch of 2 instead of 4, and the clip stays close to the uncached one."""
    pipe = AnimeGamerPipeline(**dummy_components(num_layers=2))
    pipe.set_progress_bar_config(disable=True)
    shots = [dummy_representation(0), dummy_representation(1)]
    batches: list[int] = []
    pipe.transformer.transformer_blocks[0].register_forward_pre_hook(
        lambda _module, _args, kwargs: batches.append(kwargs["hidden_states"].shape[0]),
        with_kwargs=True,
    )
    baseline = render(pipe, shots, motion_level=[1, 5], num_inference_steps=8)
    assert batches == [4] * 8
    batches.clear()
    pipe.transformer.enable_cache(FasterCacheConfig(
        spatial_attention_timestep_skip_range=(-1, 901),
        unconditional_batch_skip_range=2,
        current_timestep_callback=lambda: pipe.current_timestep,
    ))
    try:
        cached = render(pipe, shots, motion_level=[1, 5], num_inference_steps=8)
    finally:
        pipe.transformer.disable_cache()
    assert 2 in batches and 4 in batches
    assert cached.shape == baseline.shape
    error = (cached - baseline).abs().max() / baseline.abs().max()
    assert error < 0.05, f"relative error {error:.4f}"


def test_the_call_is_documented_with_every_argument():
    doc = inspect.getdoc(AnimeGamerPipeline.__call__) or ""
    arguments = [name for name in inspect.signature(AnimeGamerPipeline.__call__).parameters
                 if name != "self"]
    assert [name for name in arguments if f"{name}:" not in doc] == []
