"""World probes on clips the Nano world renders (ground truth): each probe agrees with the
instruction on ≥ 90 % of random shots (also after the mp4 round trip the evaluation reads clips
through, and blurred and noisy as a decoder's clips are), noise gets low confidence, and the
agreement goes through the world's phrase lookup."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest
from PIL import Image, ImageFilter

from animegamer.data.decode import read_clip
from animegamer.game.rules import make_instruction
from animegamer.nano.probes import (
    MOTION_CLASS_OF,
    MOTION_CLASSES,
    PROBES,
    NanoProbes,
    expected_labels,
    probe_agreement,
    probe_clip,
)
from animegamer.nano.renderer import NanoRenderer, RenderedShot, WorldState
from animegamer.nano.vocabulary import MOTIONS
from animegamer.nano.world import first_state, random_instructions, render_episode
from animegamer.video.writer import write_mp4

ACCURACY = 0.9


@pytest.fixture(scope="module")
def probes() -> NanoProbes:
    return NanoProbes()


@pytest.fixture(scope="module")
def shots() -> list[RenderedShot]:
    """36 shots: six random episodes of six turns, alternating Qiqi and Sosuke."""
    rng = np.random.default_rng(7)
    renderer = NanoRenderer()
    found = []
    for episode in range(6):
        instructions = random_instructions(rng, ("Qiqi", "Sosuke")[episode % 2], 6)
        found += render_episode(renderer, instructions, first_state(rng, instructions[0]))
    return found


def _accuracies(probes: NanoProbes, clips: list[tuple[np.ndarray, RenderedShot]]) -> dict:
    hits: Counter[str] = Counter()
    for frames, shot in clips:
        agreement = probe_agreement(probes.probe(frames), shot.instruction)
        hits.update(name for name, agreed in agreement.items() if agreed)
    return {name: hits[name] / len(clips) for name in PROBES}


def test_every_world_motion_has_one_motion_class():
    assert sorted(MOTION_CLASS_OF) == sorted(m.name for m in MOTIONS)
    assert sum(len(motions) for motions in MOTION_CLASSES.values()) == len(MOTIONS)


def test_probes_agree_with_rendered_shots(probes, shots):
    accuracies = _accuracies(probes, [(shot.frames, shot) for shot in shots])
    print(f"probe accuracy on {len(shots)} rendered shots: {accuracies}")
    assert all(value >= ACCURACY for value in accuracies.values()), accuracies
    assert {MOTION_CLASS_OF[shot.motion.name] for shot in shots} >= {"travel", "still", "sit"}


def test_probes_agree_after_the_mp4_round_trip(probes, shots, tmp_path):
    clips = []
    for index, shot in enumerate(shots[::3]):
        path = write_mp4(shot.frames, tmp_path / f"{index}.mp4", fps=8)
        clips.append((read_clip(path), shot))
    accuracies = _accuracies(probes, clips)
    print(f"probe accuracy on {len(clips)} shots through mp4: {accuracies}")
    assert all(value >= ACCURACY for value in accuracies.values()), accuracies


def _softened(frames: np.ndarray, rng: np.random.Generator, radius: float = 1.0,
              sigma: float = 4.0) -> np.ndarray:
    """A decoder's kind of clip: blurred (Gaussian `radius`) and noisy (`sigma`, per pixel and
    frame)."""
    blurred = np.stack([np.asarray(Image.fromarray(f).filter(ImageFilter.GaussianBlur(radius)))
                        for f in frames]).astype(np.float64)
    return np.clip(blurred + rng.normal(0, sigma, blurred.shape), 0, 255).astype(np.uint8)


def test_probes_agree_on_blurred_noisy_clips(probes, shots):
    rng = np.random.default_rng(0)
    clips = [(_softened(shot.frames, rng), shot) for shot in shots[1::3]]
    accuracies = _accuracies(probes, clips)
    print(f"probe accuracy on {len(clips)} blurred, noisy shots: {accuracies}")
    assert all(value >= ACCURACY for value in accuracies.values()), accuracies


def test_the_character_probe_is_fair_to_both_under_generation_noise(probes, shots):
    """Noise of a generated clip's size (σ 20 per pixel after a 1.5 px blur) must not vote for
    one character: each is named right on its own shots (before the mask's threshold followed
    the clip's own noise, Qiqi's noisy shots read as Sosuke three times in four)."""
    rng = np.random.default_rng(0)
    named: dict[str, list[bool]] = {}
    for shot in shots:
        noisy = _softened(shot.frames, rng, radius=1.5, sigma=20.0)
        label = probes.probe(noisy).character.label
        named.setdefault(shot.instruction.character, []).append(
            label == shot.instruction.character)
    shares = {name: sum(hits) / len(hits) for name, hits in named.items()}
    assert set(shares) == {"Qiqi", "Sosuke"}
    assert all(share >= 0.8 for share in shares.values()), shares


def test_each_motion_class_is_told_apart(probes):
    """One shot per class from a plain start: the class and a confident score."""
    renderer = NanoRenderer()
    cases = {"fly": ("Qiqi", "fly on broomstick", 30.0), "jump": ("Sosuke", "jump", 0.0),
             "lie": ("Qiqi", "lie down", 0.0), "ride": ("Sosuke", "ride in the car", 0.0),
             "travel": ("Qiqi", "run", 0.0), "sit": ("Sosuke", "sit", 0.0),
             "still": ("Qiqi", "wave hand", 0.0)}
    for expected, (character, motion, altitude) in cases.items():
        instruction = make_instruction({"character": character, "adverb": "happily",
                                        "motion": motion, "time": "day", "place": "grass"})
        shot = renderer.render(instruction, WorldState(40.0, altitude, 1, "day", "grass"))
        result = probes.probe(shot.frames)
        assert result.motion.label == expected, (expected, result.motion.scores)
        assert result.motion.confidence > 0.5
        assert sum(result.motion.scores.values()) <= 1 + 1e-9


def test_noise_gets_no_confidence(probes):
    noise = np.random.default_rng(0).integers(0, 256, (17, 64, 96, 3), dtype=np.uint8)
    result = probes.probe(noise)
    confidences = {name: getattr(result, name).confidence for name in PROBES}
    assert all(value < 0.2 for value in confidences.values()), confidences


def test_a_clip_of_another_size_is_resized(probes, shots):
    shot = shots[0]
    large = np.stack([np.asarray(Image.fromarray(f).resize((192, 128))) for f in shot.frames])
    result = probe_clip(large, probes)
    assert result.time.label == shot.start.time and result.place.label == shot.start.place
    with pytest.raises(ValueError, match="uint8"):
        probes.probe(large.astype(np.float32))


def test_agreement_reads_phrases_and_skips_unknown_words(probes, shots):
    shot = next(s for s in shots if s.start.place != "grass")
    result = probes.probe(shot.frames)
    labels = result.labels()
    fields = shot.instruction.fields()
    aliased = make_instruction({**fields, "place": "grassy hill", "motion": "look around"})
    assert expected_labels(aliased)["place"] == "grass"
    assert expected_labels(aliased)["motion"] == "still"
    assert probe_agreement(result, aliased)["place"] is False
    unknown = make_instruction({**fields, "character": "Nano", "time": "dusk"})
    agreement = probe_agreement(result, unknown)
    assert agreement["character"] is None and agreement["time"] is None
    assert agreement["place"] is True and labels["place"] == shot.start.place
    swapped = dataclasses.replace(shot.instruction, character="Sosuke" if labels[
        "character"] == "Qiqi" else "Qiqi")
    assert probe_agreement(result, swapped)["character"] is False
