"""The character registry: the shipped file, and clear errors for malformed entries."""

from __future__ import annotations

import copy
import dataclasses
import re
import shutil

import pytest
import yaml
from PIL import Image

from animegamer import game
from animegamer.characters import (
    DEFAULT_LATENT_SIZE,
    RegistryError,
    UnknownCharacterError,
    default_registry_path,
    load_registry,
    parse_registry,
)
from animegamer.game import Instruction

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


def _set(data: dict, path: str, value) -> dict:
    *parents, last = path.split("/")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return data


_DELETE = object()
_RELEASE = "characters/0/weights/release"


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("format", 2, r"field 'format' must be 1"),
        ("characters", [], r"field 'characters' must be a non-empty list"),
        ("characters/0/name", _DELETE, r"characters\[0\]: field 'name' is required"),
        ("characters/0/name", "Qi qi", r"characters\[0\] \(Qi qi\): field 'name' has an invalid"),
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
        (f"{_RELEASE}/mllm_folder", "../x", r"field 'weights.release.mllm_folder' has an invalid"),
        (f"{_RELEASE}/vae", "THUDM/CogVideoX-2b", r"field 'weights.release.vae' must be a mapping"),
        (
            f"{_RELEASE}/base_llm/revision",
            _DELETE,
            r"\(Qiqi\): field 'weights.release.base_llm.revision' is required",
        ),
        (f"{_RELEASE}/latent_size", [60], r"field 'weights.release.latent_size' must be \[h"),
        (f"{_RELEASE}/base_llm/repo", "./missing", r"base_llm.repo' names the local folder"),
        ("characters/1/weights/converted/revision", _DELETE, r"\(Sosuke\): field 'weights.conv"),
    ],
)
def test_malformed_entries_name_the_entry_and_the_field(tmp_path, path, value, expected):
    data = _set(copy.deepcopy(_valid()), path, value)
    with pytest.raises(RegistryError, match=expected) as info:
        parse_registry(data, tmp_path / "characters.yaml")
    assert str(tmp_path / "characters.yaml") in str(info.value)


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
