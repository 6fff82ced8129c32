"""The character registry: who can be played, and where each character's weights come from.

The registry is one YAML file (`assets/characters.yaml`). Someone duplicating the Space adds a
character by editing that file only. Its schema is documented at the top of the shipped file and
checked on load by the strict pydantic model `RegistryFile` (no unknown fields at any level, no
coercion: `revision: 1234` is not a string, every value bounded). Every error is one
`RegistryError` that names the file, the entry and the field.

A weight source is either a *release* (the original checkpoint layouts, converted once by
`animegamer.characters.hub`) or a *converted* repository (the project layout, ready to load).
Everywhere a Hub repo id is accepted, a local path is too: a value starting with `/`, `./`, `../`
or `~` is a
path (relative paths are relative to the registry file), anything else is a Hub repo id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from animegamer.characters.registry_bounds import (
    AVATAR_SUFFIXES,
    MAX_CHARACTERS,
    MAX_DISPLAY_CHARS,
    MAX_EXAMPLES,
    MAX_LATENT_SIDE,
    MAX_NAME_CHARS,
    MAX_PATH_CHARS,
    MAX_REVISION_CHARS,
    REGISTRY_FORMAT,
)
from animegamer.characters.registry_messages import entry_label, located, schema_message
from animegamer.game.rules import MAX_FIELD_CHARS, Instruction, make_instruction
from animegamer.models.decoder_defaults import DEFAULT_LATENT_SIZE
from animegamer.paths import DEFAULT_REGISTRY

_LOCAL_PREFIXES = ("/", "./", "../", "~")
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_REPO_DESCRIPTION = "a Hub repo id 'org/name' or a local path starting with / ./ ../ or ~"


class RegistryError(ValueError):
    """The registry file is malformed; the message names the file, the entry and the field."""


class UnknownCharacterError(RegistryError):
    """A character name that the registry does not list."""


@dataclass(frozen=True)
class RepoRef:
    """A Hub repository at a pinned revision, or a local directory (`revision` is then None)."""

    repo: str
    revision: str | None
    subfolder: str | None = None

    @property
    def is_local(self) -> bool:
        return is_local_path(self.repo)

    def describe(self) -> str:
        """`org/name@revision[/subfolder]` or the local path, for messages."""
        text = self.repo if self.is_local else f"{self.repo}@{self.revision}"
        return f"{text}/{self.subfolder}" if self.subfolder else text


@dataclass(frozen=True)
class ReleaseSource:
    """The original release: one repo with per-character folders, plus the base LLM and the VAE."""

    repo: RepoRef
    mllm_folder: str
    decoder_folder: str
    base_llm: RepoRef
    vae: RepoRef
    latent_size: tuple[int, int] = DEFAULT_LATENT_SIZE


@dataclass(frozen=True)
class Character:
    name: str
    display_name: str
    avatar: Path | None
    defaults: Instruction
    examples: tuple[Instruction, ...]
    release: ReleaseSource | None
    converted: RepoRef | None


@dataclass(frozen=True)
class ShotTowerSources:
    """Where the shot encoder's frozen towers come from (docs/design.md §9): CLIP ViT-B-16 and
    CogVideoX-2B's T5 encoder with its tokenizer."""

    image_encoder: RepoRef
    text_encoder: RepoRef
    tokenizer: RepoRef


@dataclass(frozen=True)
class Registry:
    path: Path
    characters: tuple[Character, ...]
    shot_towers: ShotTowerSources | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.characters)

    def get(self, name: str) -> Character:
        """The character called `name` (case-insensitive), or UnknownCharacterError."""
        for character in self.characters:
            if character.name.lower() == name.strip().lower():
                return character
        raise UnknownCharacterError(
            f"unknown character {name!r}: {self.path} lists {', '.join(self.names)}; "
            "add an entry there to play someone else"
        )


def is_local_path(value: str) -> bool:
    return value.startswith(_LOCAL_PREFIXES)


def default_registry_path() -> Path:
    return DEFAULT_REGISTRY


# ---- the file's schema: each field's description completes "must be …" in error messages ----


class _Schema(BaseModel):
    """Strict (no coercion), closed (no unknown fields) and immutable; surrounding whitespace of
    every string is dropped, as a YAML editor would not see it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, str_strip_whitespace=True)


def _single_spaced(text: str) -> str:
    return " ".join(text.split())


Name = Annotated[
    str,
    Field(
        pattern=rf"^[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_NAME_CHARS - 1}}}$",
        description=f"1 to {MAX_NAME_CHARS} letters, digits, _ or -, starting with a letter "
        "or digit",
    ),
]
DisplayName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_DISPLAY_CHARS,
        description=f"a non-empty label of at most {MAX_DISPLAY_CHARS} characters",
    ),
    AfterValidator(_single_spaced),
]
FieldText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=4 * MAX_FIELD_CHARS,
        description=f"a non-empty string of at most {MAX_FIELD_CHARS} characters",
    ),
]
"""`make_instruction` then holds the text to the rules a typed field has."""
Folder = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
        description="a folder name of 1 to 128 letters, digits, . _ or -, starting with a "
        "letter or digit",
    ),
]
Revision = Annotated[
    str,
    Field(
        max_length=MAX_REVISION_CHARS,
        pattern=r"^[A-Za-z0-9]+([._/-][A-Za-z0-9]+)*$",
        description="a commit hash, or a branch or tag name (letters and digits, single . _ / "
        f"or - between them, at most {MAX_REVISION_CHARS} characters)",
    ),
]
LocalOrHub = Annotated[
    str, Field(min_length=1, max_length=MAX_PATH_CHARS, description=_REPO_DESCRIPTION)
]
AvatarPath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_PATH_CHARS,
        description=f"a relative path to a {'/'.join(AVATAR_SUFFIXES)} image inside the "
        "registry's folder",
    ),
]
LatentSize = Annotated[
    list[Annotated[int, Field(gt=0, le=MAX_LATENT_SIDE)]],
    Field(
        min_length=2,
        max_length=2,
        description=f"[height, width], two integers from 1 to {MAX_LATENT_SIDE}",
    ),
]


def _folder(info: ValidationInfo) -> Path:
    """The registry file's folder, which relative paths start from (the validation context)."""
    return Path((info.context or {})["folder"]).resolve()


class InstructionEntry(_Schema):
    """An instruction of the registry, held to the same rules as one a player types."""

    character: FieldText
    adverb: FieldText
    motion: FieldText
    time: FieldText
    place: FieldText

    @model_validator(mode="after")
    def _playable(self) -> InstructionEntry:
        self.instruction()  # an InstructionError is a ValueError: reported at this entry
        return self

    def instruction(self) -> Instruction:
        return make_instruction(self.model_dump())


class _Source(_Schema):
    """A Hub repo at a pinned revision, or a local folder (which takes no revision)."""

    repo: LocalOrHub
    revision: Annotated[Revision | None, Field(validate_default=True)] = None

    @field_validator("repo")
    @classmethod
    def _local_or_hub(cls, repo: str, info: ValidationInfo) -> str:
        """A local folder is made absolute (a missing one makes its character unavailable,
        not the registry unreadable); anything else must be a Hub repo id."""
        if is_local_path(repo):
            path = Path(repo).expanduser()
            return str(path if path.is_absolute() else (_folder(info) / path).resolve())
        if not _REPO_ID.fullmatch(repo):
            raise PydanticCustomError("repo_id", "not a Hub repo id")
        return repo

    @field_validator("revision")
    @classmethod
    def _pinned(cls, revision: str | None, info: ValidationInfo) -> str | None:
        repo = info.data.get("repo")
        if repo is None:  # the repo is invalid, and reported
            return revision
        if is_local_path(repo) and revision is not None:
            raise ValueError("is not allowed for a local folder")
        if not is_local_path(repo) and revision is None:
            raise ValueError(
                "is required for a Hub repo (a commit hash; a branch name only if no commit "
                "is known)"
            )
        return revision

    def ref(self) -> RepoRef:
        return RepoRef(self.repo, self.revision)


class RepoEntry(_Source):
    subfolder: Folder | None = None

    def ref(self) -> RepoRef:
        return RepoRef(self.repo, self.revision, self.subfolder)


class ReleaseEntry(_Source):
    mllm_folder: Folder
    decoder_folder: Folder
    base_llm: RepoEntry
    vae: RepoEntry
    latent_size: LatentSize | None = None

    def source(self) -> ReleaseSource:
        height, width = self.latent_size or DEFAULT_LATENT_SIZE
        return ReleaseSource(
            repo=self.ref(),
            mllm_folder=self.mllm_folder,
            decoder_folder=self.decoder_folder,
            base_llm=self.base_llm.ref(),
            vae=self.vae.ref(),
            latent_size=(height, width),
        )


class WeightsEntry(_Schema):
    release: ReleaseEntry | None = None
    converted: RepoEntry | None = None

    @model_validator(mode="after")
    def _has_a_source(self) -> WeightsEntry:
        if self.release is None and self.converted is None:
            raise ValueError("needs a 'release' or a 'converted' source (or both)")
        return self


class CharacterEntry(_Schema):
    name: Name
    display_name: DisplayName | None = None
    avatar: AvatarPath | None = None
    defaults: InstructionEntry
    examples: Annotated[
        list[InstructionEntry] | None,
        Field(
            max_length=MAX_EXAMPLES,
            description=f"a list of at most {MAX_EXAMPLES} instructions",
        ),
    ] = None
    weights: WeightsEntry

    @field_validator("avatar")
    @classmethod
    def _image_file(cls, avatar: str | None, info: ValidationInfo) -> str | None:
        """An image inside the registry's folder: the app serves every avatar's folder."""
        if avatar is None:
            return None
        folder = _folder(info)
        path = (folder / avatar).resolve()
        inside = not Path(avatar).is_absolute() and path.is_relative_to(folder)
        if not inside or path.suffix.lower() not in AVATAR_SUFFIXES:
            raise PydanticCustomError("avatar_path", "not an image inside the registry's folder")
        if not path.is_file():
            raise ValueError(f"names {path}, which is not a file")
        return str(path)

    @field_validator("examples", mode="before")
    @classmethod
    def _inherit_character(cls, examples: Any, info: ValidationInfo) -> Any:
        """An example without a character plays the defaults' one."""
        defaults = info.data.get("defaults")
        if defaults is None or not isinstance(examples, list):
            return examples
        return [
            {"character": defaults.character, **item} if isinstance(item, dict) else item
            for item in examples
        ]

    def character(self) -> Character:
        release = self.weights.release
        converted = self.weights.converted
        return Character(
            name=self.name,
            display_name=self.display_name or self.name,
            avatar=Path(self.avatar) if self.avatar else None,
            defaults=self.defaults.instruction(),
            examples=tuple(example.instruction() for example in self.examples or ()),
            release=release.source() if release else None,
            converted=converted.ref() if converted else None,
        )


class ShotTowersEntry(_Schema):
    image_encoder: RepoEntry
    text_encoder: RepoEntry
    tokenizer: RepoEntry

    def sources(self) -> ShotTowerSources:
        return ShotTowerSources(
            image_encoder=self.image_encoder.ref(),
            text_encoder=self.text_encoder.ref(),
            tokenizer=self.tokenizer.ref(),
        )


class RegistryFile(_Schema):
    """The whole file; validate with `context={"folder": the file's folder}`."""

    format: Annotated[
        int,
        Field(
            ge=REGISTRY_FORMAT,
            le=REGISTRY_FORMAT,
            description=f"{REGISTRY_FORMAT}, the only format so far",
        ),
    ]
    characters: Annotated[
        list[CharacterEntry],
        Field(
            min_length=1,
            max_length=MAX_CHARACTERS,
            description=f"a non-empty list of at most {MAX_CHARACTERS} character entries",
        ),
    ]
    shot_towers: ShotTowersEntry | None = None


# ---- loading ----


def load_registry(path: str | Path | None = None) -> Registry:
    """Read and validate the registry (default: the shipped `assets/characters.yaml`)."""
    path = Path(path) if path is not None else default_registry_path()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise RegistryError(f"cannot read the character registry {path}: {error}") from error
    except yaml.YAMLError as error:
        raise RegistryError(f"{path} is not valid YAML: {error}") from error
    return parse_registry(data, path)


def parse_registry(data: Any, path: Path) -> Registry:
    """Validate already-parsed YAML; relative paths inside are resolved against `path`'s folder."""
    try:
        schema = RegistryFile.model_validate(data, context={"folder": path.parent})
    except ValidationError as error:
        raise RegistryError(schema_message(error, RegistryFile, data, path)) from None
    _check_unique_names(schema, data, path)
    return Registry(
        path=path,
        characters=tuple(e.character() for e in schema.characters),
        shot_towers=schema.shot_towers.sources() if schema.shot_towers else None,
    )


def _check_unique_names(schema: RegistryFile, data: Any, path: Path) -> None:
    first: dict[str, int] = {}
    for index, entry in enumerate(schema.characters):
        earlier = first.setdefault(entry.name.lower(), index)
        if earlier != index:
            other = entry_label(data, earlier)
            problem = f"duplicates the name of {other} (names ignore case)"
            raise RegistryError(located(path, data, ("characters", index, "name"), problem))
