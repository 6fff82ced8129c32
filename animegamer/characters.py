"""The character registry: who can be played, and where each character's weights come from.

The registry is one YAML file (`assets/characters.yaml`). Someone duplicating the Space adds a
character by editing that file only; it is validated on load, and every error names the entry and
the field. Its schema is documented at the top of the shipped file.

A weight source is either a *release* (the original checkpoint layouts, converted once by
`animegamer.hub`) or a *converted* repository (the project layout, ready to load). Everywhere a
Hub repo id is accepted, a local path is too: a value starting with `/`, `./`, `../` or `~` is a
path (relative paths are relative to the registry file), anything else is a Hub repo id.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

from animegamer.game import INSTRUCTION_FIELDS, Instruction, InstructionError, make_instruction

REGISTRY_FORMAT = 1
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_FOLDER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_LOCAL_PREFIXES = ("/", "./", "../", "~")
DEFAULT_LATENT_SIZE = (60, 90)
"""The decoder's latent height and width: 480×720 video. Not inferable from the checkpoint."""


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
class Registry:
    path: Path
    characters: tuple[Character, ...]

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
    return Path(__file__).resolve().parents[1] / "assets" / "characters.yaml"


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
    base = _Where(str(path), path.parent)
    top = base.mapping(data, "", required={"format", "characters"})
    if top["format"] != REGISTRY_FORMAT:
        base.fail("format", f"must be {REGISTRY_FORMAT}, got {top['format']!r}")
    entries = top["characters"]
    if not isinstance(entries, list) or not entries:
        base.fail("characters", "must be a non-empty list of character entries")
    characters: list[Character] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        character = _parse_character(entry, base.entry(index, entry))
        if character.name.lower() in seen:
            base.entry(index, entry).fail("name", f"duplicate character name {character.name!r}")
        seen.add(character.name.lower())
        characters.append(character)
    return Registry(path=path, characters=tuple(characters))


class _Where:
    """Error context: the file, the entry (index and name) and the folder for relative paths."""

    def __init__(self, source: str, folder: Path, entry: str = "") -> None:
        self.source = source
        self.folder = folder
        self.entry_label = entry

    def entry(self, index: int, raw: Any) -> _Where:
        name = raw.get("name") if isinstance(raw, Mapping) else None
        label = f"characters[{index}]" + (f" ({name})" if isinstance(name, str) else "")
        return _Where(self.source, self.folder, label)

    def fail(self, field: str, problem: str) -> NoReturn:
        where = f"{self.entry_label}: " if self.entry_label else ""
        raise RegistryError(f"{self.source}: {where}field {field!r} {problem}")

    def mapping(
        self,
        value: Any,
        field: str,
        required: set[str],
        optional: frozenset[str] | set[str] = frozenset(),
    ) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            self.fail(field or "<top level>", f"must be a mapping, got {type(value).__name__}")
        prefix = f"{field}." if field else ""
        for key in value:
            if key not in required | optional:
                allowed = ", ".join(sorted(required | optional))
                self.fail(f"{prefix}{key}", f"is not a known field (expected one of: {allowed})")
        for key in sorted(required):
            if key not in value or value[key] is None:
                self.fail(f"{prefix}{key}", "is required")
        return dict(value)

    def text(self, value: Any, field: str, pattern: re.Pattern[str] | None = None) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(field, f"must be a non-empty string, got {value!r}")
        value = " ".join(value.split())
        if pattern is not None and not pattern.match(value):
            self.fail(field, f"has an invalid value {value!r}")
        return value

    def local_path(self, value: str) -> Path:
        path = Path(value).expanduser()
        return path if path.is_absolute() else (self.folder / path).resolve()


def _parse_character(raw: Any, where: _Where) -> Character:
    entry = where.mapping(
        raw, "", required={"name", "defaults", "weights"},
        optional={"display_name", "avatar", "examples"},
    )
    name = where.text(entry["name"], "name", _NAME)
    defaults = _parse_fields(entry["defaults"], "defaults", where, character=None)
    examples_raw = entry.get("examples") or []
    if not isinstance(examples_raw, list):
        where.fail("examples", "must be a list of instruction field mappings")
    examples = tuple(
        _parse_fields(item, f"examples[{i}]", where, character=defaults.character)
        for i, item in enumerate(examples_raw)
    )
    avatar = None
    if entry.get("avatar") is not None:
        avatar = where.local_path(where.text(entry["avatar"], "avatar"))
        if not avatar.is_file():
            where.fail("avatar", f"names {avatar}, which is not a file")
    release, converted = _parse_weights(entry["weights"], where)
    display = entry.get("display_name")
    return Character(
        name=name,
        display_name=where.text(display, "display_name") if display is not None else name,
        avatar=avatar,
        defaults=defaults,
        examples=examples,
        release=release,
        converted=converted,
    )


def _parse_fields(raw: Any, field: str, where: _Where, character: str | None) -> Instruction:
    """An instruction of the registry, held to the same rules as one a player types."""
    names = set(INSTRUCTION_FIELDS)
    required = names if character is None else names - {"character"}
    values = where.mapping(raw, field, required=required, optional=names - required)
    values.setdefault("character", character)
    texts = {key: where.text(values[key], f"{field}.{key}") for key in sorted(names)}
    try:
        return make_instruction(texts)
    except InstructionError as error:
        where.fail(field, str(error))


def _parse_weights(raw: Any, where: _Where) -> tuple[ReleaseSource | None, RepoRef | None]:
    weights = where.mapping(raw, "weights", required=set(), optional={"release", "converted"})
    if weights.get("release") is None and weights.get("converted") is None:
        where.fail("weights", "needs a 'release' or a 'converted' source (or both)")
    release = None
    if weights.get("release") is not None:
        spec = where.mapping(
            weights["release"], "weights.release",
            required={"repo", "mllm_folder", "decoder_folder", "base_llm", "vae"},
            optional={"revision", "latent_size"},
        )
        release = ReleaseSource(
            repo=_parse_repo(
                {"repo": spec["repo"], "revision": spec.get("revision")},
                "weights.release", where,
            ),
            mllm_folder=where.text(spec["mllm_folder"], "weights.release.mllm_folder", _FOLDER),
            decoder_folder=where.text(
                spec["decoder_folder"], "weights.release.decoder_folder", _FOLDER
            ),
            base_llm=_parse_repo(spec["base_llm"], "weights.release.base_llm", where),
            vae=_parse_repo(spec["vae"], "weights.release.vae", where),
            latent_size=_parse_latent_size(spec.get("latent_size"), where),
        )
    converted = None
    if weights.get("converted") is not None:
        converted = _parse_repo(weights["converted"], "weights.converted", where)
    return release, converted


def _parse_latent_size(raw: Any, where: _Where) -> tuple[int, int]:
    if raw is None:
        return DEFAULT_LATENT_SIZE
    valid = isinstance(raw, list) and len(raw) == 2
    if not valid or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in raw):
        where.fail("weights.release.latent_size", f"must be [height, width], got {raw!r}")
    return (raw[0], raw[1])


def _parse_repo(raw: Any, field: str, where: _Where) -> RepoRef:
    spec = where.mapping(raw, field, required={"repo"}, optional={"revision", "subfolder"})
    repo = where.text(spec["repo"], f"{field}.repo")
    subfolder = None
    if spec.get("subfolder") is not None:
        subfolder = where.text(spec["subfolder"], f"{field}.subfolder", _FOLDER)
    if is_local_path(repo):
        path = where.local_path(repo)
        if not path.is_dir():
            where.fail(f"{field}.repo", f"names the local folder {path}, which does not exist")
        return RepoRef(repo=str(path), revision=None, subfolder=subfolder)
    if not _REPO_ID.match(repo):
        where.fail(
            f"{field}.repo",
            f"must be a Hub repo id 'org/name' or a local path starting with / ./ ../ or ~, "
            f"got {repo!r}",
        )
    if spec.get("revision") is None:
        where.fail(
            f"{field}.revision",
            "is required for a Hub repo (a commit hash; a branch name only if no commit is known)",
        )
    revision = where.text(str(spec["revision"]), f"{field}.revision")
    return RepoRef(repo=repo, revision=revision, subfolder=subfolder)
