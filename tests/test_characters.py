"""The character registry: the shipped file, and clear errors for malformed entries."""

from __future__ import annotations

import copy
import dataclasses
import re
import shutil
from collections.abc import Iterator
from typing import get_args

import pytest
import yaml
from PIL import Image
from pydantic import BaseModel

from animegamer.characters.registry import (
    DEFAULT_LATENT_SIZE,
    RegistryError,
    RegistryFile,
    UnknownCharacterError,
    default_registry_path,
    load_registry,
    parse_registry,
)
from animegamer.characters.registry_bounds import MAX_CHARACTERS, MAX_EXAMPLES
from animegamer.characters.registry_messages import _description
from animegamer.game import rules as game
from animegamer.game.rules import Instruction

COMMIT = re.compile(r"^[0-9a-f]{40}$")
MISTRAL = "mistralai/Mistral-7B-Instruct-v0.1"


def _valid() -> dict:
    return {
        "format": 1,
        "characters": [
            {
                "name": "Qiqi",
                "defaults": {
                    "character": "Qiqi",
                    "adverb": "quickly",
                    "motion": "fly on broomstick",
                    "time": "day",
                    "place": "sky",
                },
                "examples": [
                    {"adverb": "gently", "motion": "lie down", "time": "night", "place": "room"}
                ],
                "weights": {
                    "release": {
                        "repo": "TencentARC/AnimeGamer",
                        "revision": "main",
                        "mllm_folder": "MLLM-Qiqi",
                        "decoder_folder": "VDM_Decoder-Qiqi",
                        "base_llm": {"repo": MISTRAL, "revision": "a" * 40},
                        "vae": {"repo": "THUDM/CogVideoX-2b", "revision": "b" * 40,
                                "subfolder": "vae"},
                    }
                },
            },
            {
                "name": "Sosuke",
                "defaults": {
                    "character": "Sosuke",
                    "adverb": "happily",
                    "motion": "run",
                    "time": "day",
                    "place": "town",
                },
                "weights": {
                    "converted": {"repo": "someone/animegamer-sosuke", "revision": "c" * 40}
                },
            },
        ],
    }


def test_shipped_registry_lists_qiqi_and_sosuke_with_pinned_sources():
    registry = load_registry()
    assert registry.path == default_registry_path()
    assert registry.names == ("Qiqi", "Sosuke")
    for character in registry.characters:
        release = character.release
        assert release is not None
        assert release.repo.repo == "TencentARC/AnimeGamer"
        assert release.mllm_folder == f"MLLM-{character.name}"
        assert release.decoder_folder == f"VDM_Decoder-{character.name}"
        assert release.base_llm.repo == MISTRAL
        assert release.vae.repo == "THUDM/CogVideoX-2b"
        assert release.vae.subfolder == "vae"
        assert COMMIT.match(release.base_llm.revision)
        assert COMMIT.match(release.vae.revision)
        assert release.repo.revision  # required; "main" until the release commit is known
        assert release.latent_size == DEFAULT_LATENT_SIZE
        assert character.defaults.character == character.name


def test_shipped_defaults_and_examples_are_playable_instructions():
    names = tuple(f.name for f in dataclasses.fields(Instruction))
    assert names == game.INSTRUCTION_FIELDS
    for character in load_registry().characters:
        assert character.examples
        for fields in (character.defaults, *character.examples):
            instruction = game.make_instruction(dataclasses.asdict(fields))
            assert instruction.character == character.name


def test_shipped_avatars_are_small_square_pngs():
    for character in load_registry().characters:
        assert character.avatar is not None
        assert character.avatar.stat().st_size < 20_000
        with Image.open(character.avatar) as image:
            assert image.format == "PNG"
            assert image.width == image.height


def test_get_is_case_insensitive_and_unknown_names_list_the_known_ones():
    registry = load_registry()
    assert registry.get(" qiqi ").name == "Qiqi"
    with pytest.raises(UnknownCharacterError, match=r"'Pazu'.*Qiqi, Sosuke"):
        registry.get("Pazu")


def test_examples_inherit_the_character_and_converted_only_entries_load(tmp_path):
    registry = parse_registry(_valid(), tmp_path / "characters.yaml")
    qiqi, sosuke = registry.characters
    assert qiqi.examples[0] == Instruction("Qiqi", "gently", "lie down", "night", "room")
    assert qiqi.display_name == "Qiqi" and qiqi.avatar is None and qiqi.converted is None
    assert sosuke.release is None
    assert sosuke.converted.repo == "someone/animegamer-sosuke"
    assert sosuke.converted.describe() == "someone/animegamer-sosuke@" + "c" * 40


def test_local_paths_are_accepted_relative_to_the_registry(tmp_path):
    (tmp_path / "release").mkdir()
    (tmp_path / "mistral").mkdir()
    data = _valid()
    release = data["characters"][0]["weights"]["release"]
    release["repo"] = "./release"
    del release["revision"]
    release["base_llm"] = {"repo": str(tmp_path / "mistral")}
    character = parse_registry(data, tmp_path / "characters.yaml").get("Qiqi")
    assert character.release.repo.is_local
    assert character.release.repo.repo == str(tmp_path / "release")
    assert character.release.repo.revision is None
    assert character.release.base_llm.repo == str(tmp_path / "mistral")
    assert not character.release.vae.is_local


def test_a_missing_local_folder_is_left_to_the_engine_to_report(tmp_path):
    """The registry still loads: the character is listed, and unavailable where it is played."""
    data = _set(copy.deepcopy(_valid()), "characters/1/weights/converted", {"repo": "./gone"})
    sosuke = parse_registry(data, tmp_path / "characters.yaml").get("Sosuke")
    assert sosuke.converted.repo == str(tmp_path / "gone") and sosuke.converted.is_local


def _set(data: dict, path: str, value) -> dict:
    *parents, last = path.split("/")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    key = int(last) if isinstance(node, list) else last
    if value is _DELETE:
        del node[key]
    else:
        node[key] = value
    return data


_DELETE = object()
_RELEASE = "characters/0/weights/release"


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("format", 2, r"field 'format' must be 1"),
        ("characters", [], r"field 'characters' must be a non-empty list"),
        ("characters/0/name", _DELETE, r"characters\[0\]: field 'name' is required"),
        ("characters/0/name", "Qi qi", r"characters\[0\] \(Qi qi\): field 'name' must be 1 to 64"),
        ("characters/1/name", "qiqi", r"characters\[1\] \(qiqi\): field 'name' duplicate"),
        ("characters/0/colour", "red", r"\(Qiqi\): field 'colour' is not a known field"),
        ("characters/0/defaults/motion", _DELETE, r"\(Qiqi\): field 'defaults.motion' is required"),
        ("characters/0/defaults/time", "  ", r"\(Qiqi\): field 'defaults.time' must be a non-"),
        ("characters/0/examples", "fly", r"\(Qiqi\): field 'examples' must be a list"),
        ("characters/0/examples/0/place", _DELETE, r"field 'examples\[0\].place' is required"),
        ("characters/0/defaults/place", "sky\x07", r"field 'defaults' Place contains a control"),
        ("characters/0/examples/0/motion", "x" * 81, r"field 'examples\[0\]' Motion is too long"),
        ("characters/0/avatar", "nope.png", r"\(Qiqi\): field 'avatar' names .*nope.png"),
        ("characters/0/weights", {}, r"\(Qiqi\): field 'weights' needs a 'release' or"),
        (f"{_RELEASE}/revision", _DELETE, r"\(Qiqi\): field 'weights.release.revision' is req"),
        (f"{_RELEASE}/revison", "main", r"field 'weights.release.revison' is not a known field"),
        (f"{_RELEASE}/repo", "AnimeGamer", r"field 'weights.release.repo' must be a Hub repo id"),
        (f"{_RELEASE}/mllm_folder", "../x", r"field 'weights.release.mllm_folder' must be a fo"),
        (f"{_RELEASE}/vae", "THUDM/CogVideoX-2b", r"field 'weights.release.vae' must be a mapping"),
        (
            f"{_RELEASE}/base_llm/revision",
            _DELETE,
            r"\(Qiqi\): field 'weights.release.base_llm.revision' is required",
        ),
        (f"{_RELEASE}/latent_size", [60], r"field 'weights.release.latent_size' must be \[h"),
        ("characters/1/weights/converted/revision", _DELETE, r"\(Sosuke\): field 'weights.conv"),
    ],
)
def test_malformed_entries_name_the_entry_and_the_field(tmp_path, path, value, expected):
    data = _set(copy.deepcopy(_valid()), path, value)
    with pytest.raises(RegistryError, match=expected) as info:
        parse_registry(data, tmp_path / "characters.yaml")
    assert str(tmp_path / "characters.yaml") in str(info.value)


@pytest.mark.parametrize(
    ("parent", "field", "expected"),
    [
        ("", "colour", "characters, format, shot_towers"),
        ("characters/0", "colour", "avatar, defaults, display_name, examples, name, weights"),
        ("characters/0/defaults", "defaults.colour", "adverb, character, motion, place, time"),
        ("characters/0/examples/0", "examples[0].colour", "adverb, character, motion, place, time"),
        ("characters/0/weights", "weights.colour", "converted, release"),
        (
            _RELEASE,
            "weights.release.colour",
            "base_llm, decoder_folder, latent_size, mllm_folder, repo, revision, vae",
        ),
        (f"{_RELEASE}/base_llm", "weights.release.base_llm.colour", "repo, revision, subfolder"),
        (f"{_RELEASE}/vae", "weights.release.vae.colour", "repo, revision, subfolder"),
        ("characters/1/weights/converted", "weights.converted.colour", "repo, revision, subfolder"),
    ],
)
def test_unknown_fields_are_refused_at_every_level(tmp_path, parent, field, expected):
    data = _set(copy.deepcopy(_valid()), f"{parent}/colour".lstrip("/"), "red")
    with pytest.raises(RegistryError) as info:
        parse_registry(data, tmp_path / "characters.yaml")
    assert str(info.value).endswith(
        f"field {field!r} is not a known field (expected one of: {expected})"
    )


def _instruction(n: int) -> dict:
    return {"adverb": "gently", "motion": f"wave {n}", "time": "day", "place": "town"}


_LONG_TEXT = "x" * 10_000


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("format", True, r"field 'format' must be 1, the only format so far, got True$"),
        ("format", "1", r"field 'format' must be 1, the only format so far, got '1'$"),
        ("characters", [{}] * (MAX_CHARACTERS + 1), r"'characters' must be a non-empty list"),
        ("characters/0", "Qiqi", r"characters\[0\]: must be a mapping, got 'Qiqi'$"),
        ("characters/0/name", None, r"characters\[0\]: field 'name' is required$"),
        ("characters/0/name", "Q" * 65, r"field 'name' must be 1 to 64 letters"),
        ("characters/0/name", 7, r"field 'name' must be 1 to 64 letters.*, got 7$"),
        ("characters/0/display_name", "x" * 101, r"'display_name' must be a non-empty label of"),
        ("characters/0/display_name", 3, r"'display_name' must be a non-empty label .* got 3$"),
        ("characters/0/avatar", "/etc/hosts", r"'avatar' must be a relative path to a \.png"),
        ("characters/0/avatar", "../qiqi.png", r"'avatar' must be a relative path .* inside"),
        ("characters/0/avatar", "characters.yaml", r"'avatar' must be a relative path to a"),
        ("characters/0/defaults/adverb", 5, r"'defaults.adverb' must be a non-empty string"),
        ("characters/0/defaults/adverb", _LONG_TEXT, r"'defaults.adverb' must be a non-empty st"),
        ("characters/0/examples", [_instruction(n) for n in range(MAX_EXAMPLES + 1)],
         r"field 'examples' must be a list of at most 50 instructions"),
        ("characters/0/examples/0", "fly", r"field 'examples\[0\]' must be a mapping"),
        ("characters/0/weights", "someone/repo", r"field 'weights' must be a mapping"),
        (f"{_RELEASE}/revision", 1234, r"'weights.release.revision' must be a commit hash.*1234$"),
        (f"{_RELEASE}/revision", "../main", r"'weights.release.revision' must be a commit hash"),
        (f"{_RELEASE}/revision", "a b", r"'weights.release.revision' must be a commit hash"),
        (f"{_RELEASE}/revision", "a" * 256, r"'weights.release.revision' must be a commit hash"),
        (f"{_RELEASE}/repo", "org/" + "n" * 97, r"'weights.release.repo' must be a Hub repo id"),
        (f"{_RELEASE}/repo", "org/name/x", r"'weights.release.repo' must be a Hub repo id"),
        (f"{_RELEASE}/decoder_folder", "a/b", r"'weights.release.decoder_folder' must be a fo"),
        (f"{_RELEASE}/vae/subfolder", "", r"'weights.release.vae.subfolder' must be a folder"),
        (f"{_RELEASE}/latent_size", [60, 0], r"'weights.release.latent_size' must be \[height"),
        (f"{_RELEASE}/latent_size", [60, 257], r"latent_size' must be .* from 1 to 256, got"),
        (f"{_RELEASE}/latent_size", [60, True], r"latent_size' must be .*, got \[60, True\]$"),
        (f"{_RELEASE}/latent_size", [60, 90, 1], r"'weights.release.latent_size' must be \[h"),
        (f"{_RELEASE}/latent_size", "60x90", r"'weights.release.latent_size' must be \[h"),
        (f"{_RELEASE}/base_llm", None, r"field 'weights.release.base_llm' is required$"),
    ],
)
def test_out_of_range_values_are_refused(tmp_path, path, value, expected):
    (tmp_path.parent / "qiqi.png").write_bytes(b"")
    data = _set(copy.deepcopy(_valid()), path, value)
    with pytest.raises(RegistryError, match=expected) as info:
        parse_registry(data, tmp_path / "characters.yaml")
    assert len(str(info.value)) < 400 + len(str(tmp_path))  # a long value is shown cut short


def test_a_local_folder_takes_no_revision(tmp_path):
    (tmp_path / "release").mkdir()
    data = _set(copy.deepcopy(_valid()), f"{_RELEASE}/repo", "./release")
    with pytest.raises(RegistryError, match=r"'weights.release.revision' is not allowed for a lo"):
        parse_registry(data, tmp_path / "characters.yaml")


def test_duplicate_names_name_the_first_entry(tmp_path):
    data = _set(copy.deepcopy(_valid()), "characters/1/name", "QIQI")
    with pytest.raises(RegistryError) as info:
        parse_registry(data, tmp_path / "characters.yaml")
    assert str(info.value).endswith(
        "characters[1] (QIQI): field 'name' duplicates the name of characters[0] (Qiqi) "
        "(names ignore case)"
    )


def test_text_is_trimmed_and_optional_fields_may_be_null(tmp_path):
    data = copy.deepcopy(_valid())
    qiqi = data["characters"][0]
    qiqi.update(name=" Qiqi ", display_name=" Qiqi \n the  witch ", avatar=None, examples=None)
    qiqi["weights"]["release"].update(latent_size=None, revision=" main ")
    qiqi["weights"]["release"]["vae"]["subfolder"] = None
    character = parse_registry(data, tmp_path / "characters.yaml").get("qiqi")
    assert (character.name, character.display_name) == ("Qiqi", "Qiqi the witch")
    assert character.avatar is None and character.examples == ()
    assert character.release.repo.revision == "main"
    assert character.release.latent_size == DEFAULT_LATENT_SIZE
    assert character.release.vae.subfolder is None


def _types_in(annotation) -> Iterator:
    yield annotation
    for arg in get_args(annotation):
        yield from _types_in(arg)


def _leaf_fields(model: type[BaseModel]) -> Iterator:
    """(model, field name, field info) of every field of the schema that holds no model."""
    for name, info in model.model_fields.items():
        nested = [
            t for t in _types_in(info.annotation)
            if isinstance(t, type) and issubclass(t, BaseModel)
        ]
        if nested:
            yield from _leaf_fields(nested[0])
        else:
            yield model, name, info


def test_every_value_field_says_what_it_must_be():
    """Messages read `must be <description>, got …`: a field without one would read wrong."""
    leaves = list(_leaf_fields(RegistryFile))
    assert len(leaves) > 15
    for model, name, info in leaves:
        assert _description(info), f"{model.__name__}.{name} has no description"


def test_unreadable_or_invalid_yaml_names_the_file(tmp_path):
    with pytest.raises(RegistryError, match="cannot read the character registry"):
        load_registry(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("format: 1\ncharacters: [\n")
    with pytest.raises(RegistryError, match=r"broken.yaml is not valid YAML"):
        load_registry(broken)


def test_adding_a_character_needs_only_the_yaml_file(tmp_path):
    shutil.copytree(default_registry_path().parent / "avatars", tmp_path / "avatars")
    data = yaml.safe_load(default_registry_path().read_text())
    pazu = copy.deepcopy(data["characters"][0])
    pazu.update(name="Pazu", display_name="Pazu (Castle in the Sky)")
    pazu["defaults"]["character"] = "Pazu"
    del pazu["avatar"]
    data["characters"].append(pazu)
    path = tmp_path / "characters.yaml"
    path.write_text(yaml.safe_dump(data))
    registry = load_registry(path)
    assert registry.names == ("Qiqi", "Sosuke", "Pazu")
    assert registry.get("pazu").examples[0].character == "Pazu"


def test_shot_towers_are_pinned_sources_and_optional(tmp_path):
    shipped = load_registry().shot_towers
    assert shipped is not None
    assert shipped.image_encoder.repo == "laion/CLIP-ViT-B-16-laion2B-s34B-b88K"
    assert (shipped.text_encoder.repo, shipped.text_encoder.subfolder) == (
        "THUDM/CogVideoX-2b", "text_encoder"
    )
    assert COMMIT.match(shipped.text_encoder.revision)
    assert parse_registry(_valid(), tmp_path / "characters.yaml").shot_towers is None
    data = copy.deepcopy(_valid())
    data["shot_towers"] = {
        "image_encoder": {"repo": "laion/CLIP-ViT-B-16-laion2B-s34B-b88K"},
        "text_encoder": {"repo": "THUDM/CogVideoX-2b", "revision": "b" * 40},
        "tokenizer": {"repo": "THUDM/CogVideoX-2b", "revision": "b" * 40},
    }
    with pytest.raises(RegistryError, match=r"shot_towers\.image_encoder\.revision"):
        parse_registry(data, tmp_path / "characters.yaml")
