"""Checkpoints from the Hugging Face Hub: resolve, download, convert once, cache.

`resolve_character` is what the engine calls once per process: it returns a directory in the
project layout, ready to load. A character whose registry entry names a *converted* repo is
downloaded as is. A *release* source is converted once into
`<cache>/characters/<name>-<key>`, where the key digests the resolved commits of every source, so
a new revision reconverts and an old one never does; the conversion is atomic (see
`animegamer.characters.conversion.character`). Only the chosen character's folders are downloaded
(allow patterns), at pinned revisions, with `HF_TOKEN` for the gated Mistral repo;
`HF_HUB_OFFLINE=1`
serves everything from the local cache. Every Hub failure becomes a `HubError` whose message is
one sentence telling the user what to do.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import time
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock
from huggingface_hub import constants, get_cached_repo_tree, get_token, resolve_revision
from huggingface_hub import snapshot_download as _hf_snapshot_download
from huggingface_hub.errors import (
    CachedRepoTreeNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    IncompleteSnapshotError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
    RevisionResolutionError,
)
from huggingface_hub.utils import filter_repo_objects

from animegamer.characters.conversion.character import (
    LAYOUT_PATTERNS,
    ReleaseFiles,
    cache_key,
    check_layout,
    convert_release,
    read_manifest,
)
from animegamer.characters.conversion.errors import ConversionError
from animegamer.characters.registry import Character, ReleaseSource, RepoRef
from animegamer.models.decoder_defaults import RELEASE_CHECKPOINT_NAME as DECODER_FILE

logger = logging.getLogger(__name__)

MLLM_FILE = "pytorch_model.bin"
BASE_LLM_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.model",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
BASE_LLM_WEIGHTS = ("*.safetensors", "model.safetensors.index.json")
_CACHE_KEY = re.compile(r"[0-9a-f]{16}")
_TOKEN_HELP = (
    "create a read token at https://huggingface.co/settings/tokens and set it as HF_TOKEN "
    "(on a Space: Settings → Variables and secrets → New secret)"
)


class HubError(RuntimeError):
    """A download or cache problem, worded for the person running the Space."""


class AccessError(HubError):
    """The Hub refused access: gated repo, missing or refused token, unknown repo or revision."""


class IncompleteFilesError(HubError):
    """Files of a source are missing, truncated or unreadable."""


@contextmanager
def log_stage(stage: str, subject: str, log: logging.Logger | None = None) -> Iterator[None]:
    """Log the start of a start-up stage (download, local folder, convert, load) and its
    duration."""
    log = log or logger
    log.info("%s %s: started", stage, subject)
    start = time.perf_counter()
    try:
        yield
    except BaseException:
        log.warning("%s %s: failed after %.1f s", stage, subject, time.perf_counter() - start)
        raise
    log.info("%s %s: done in %.1f s", stage, subject, time.perf_counter() - start)


def resolve_character(
    character: Character,
    cache_dir: Path,
    *,
    token: str | None = None,
    local_files_only: bool | None = None,
    check_resources: bool = True,
    log: logging.Logger | None = None,
) -> Path:
    """A ready project-layout directory for `character`; downloads and converts when needed.

    `cache_dir` holds the conversions (`Settings.cache_dir`); `token` defaults to the Hub's own
    (`HF_TOKEN`); `local_files_only` to offline mode (`HF_HUB_OFFLINE`); `check_resources` checks
    disk and RAM before converting. A converted repo named by the registry is preferred over the
    release.
    """
    log = log or logger
    offline = _offline(local_files_only)
    if character.converted is not None:
        ref = character.converted
        with log_stage(_fetch_stage(ref), f"{character.name} ({ref.describe()})", log):
            path = fetch(ref, LAYOUT_PATTERNS, token=token, local_files_only=offline)
        _trusted_layout(path, ref.describe())
        return path

    release = character.release
    assert release is not None  # the registry guarantees one of the two sources
    sources = resolve_sources(release, token=token, local_files_only=offline)
    key = cache_key(sources)
    target = Path(cache_dir) / "characters" / f"{character.name}-{key}"
    if is_trusted(target, key):
        log.info("cache %s: converted %s found at %s", character.name, key, target)
        return target
    stage = _fetch_stage(release.repo, release.base_llm, release.vae)
    with log_stage(stage, f"{character.name} release", log):
        files = download_release(release, sources, token=token, local_files_only=offline)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if is_trusted(target, key):  # another process converted it while we waited
            return target
        if target.exists():
            log.warning("cache %s: %s is not a complete conversion; redoing it", key, target)
            shutil.rmtree(target)
        for stale in target.parent.glob(f".{target.name}.tmp-*"):
            log.warning("cache %s: removing an interrupted conversion %s", key, stale)
            shutil.rmtree(stale, ignore_errors=True)
        with log_stage("convert", f"{character.name} into {target}", log):
            convert_release(
                files, target, name=character.name, check_resources_first=check_resources
            )
        for superseded in _other_conversions(target, character.name):
            log.info("cache %s: removing the superseded conversion %s", key, superseded)
            shutil.rmtree(superseded, ignore_errors=True)
    return target


def _fetch_stage(*refs: RepoRef) -> str:
    """The log's name for fetching `refs`: `local folder` when each is one (nothing is
    downloaded), `download` otherwise."""
    return "local folder" if all(ref.is_local for ref in refs) else "download"


def _other_conversions(target: Path, name: str) -> list[Path]:
    """Earlier conversions of the same character (other source revisions): each is 10-30 GB,
    and a revision that comes back is converted again rather than kept forever."""
    return [
        path for path in target.parent.glob(f"{name}-*")
        if path != target and path.is_dir() and _CACHE_KEY.fullmatch(path.name[len(name) + 1 :])
    ]


def is_trusted(target: Path, key: str) -> bool:
    """A cache entry is trusted only if it is complete and was made from the same sources."""
    if not target.is_dir():
        return False
    try:
        check_layout(target)
        return read_manifest(target).get("cache_key") == key
    except ConversionError:
        return False


def resolve_sources(
    release: ReleaseSource, *, token: str | None = None, local_files_only: bool | None = None
) -> dict[str, dict[str, str | None]]:
    """Every source of a release with its requested revision and resolved commit (local folders
    get a fingerprint of their files' names, sizes and times instead); no file is downloaded."""
    offline = _offline(local_files_only)
    parts = {
        "release": (release.repo, _release_patterns(release)),
        "base_llm": (release.base_llm, None),
        "vae": (release.vae, None),
    }
    sources: dict[str, dict[str, str | None]] = {}
    for role, (ref, patterns) in parts.items():
        sources[role] = {
            "repo": ref.repo,
            "revision": ref.revision,
            "subfolder": ref.subfolder,
            "commit": _resolve_commit(ref, patterns, token=token, local_files_only=offline),
        }
    sources["release"]["mllm_folder"] = release.mllm_folder
    sources["release"]["decoder_folder"] = release.decoder_folder
    sources["release"]["latent_size"] = "x".join(map(str, release.latent_size))
    return sources


def download_release(
    release: ReleaseSource,
    sources: dict[str, dict[str, str | None]] | None = None,
    *,
    token: str | None = None,
    local_files_only: bool | None = None,
) -> ReleaseFiles:
    """Fetch the release folders of one character, the base LLM and the VAE, and check them.

    The base LLM's weights (≈14.5 GB) are fetched only when the release checkpoint lacks the
    frozen base weights; its config and tokenizer always are.
    """
    offline = _offline(local_files_only)
    sources = sources or resolve_sources(release, token=token, local_files_only=offline)

    def pinned(role: str, ref: RepoRef) -> RepoRef:
        commit = sources[role]["commit"]
        return ref if ref.is_local else RepoRef(ref.repo, commit, ref.subfolder)

    release_ref = pinned("release", release.repo)
    root = fetch(release_ref, _release_patterns(release), token=token, local_files_only=offline)
    mllm_bin = _require_checkpoint(root / release.mllm_folder / MLLM_FILE, release_ref)
    decoder_dir = root / release.decoder_folder
    latest = _require_file(decoder_dir / "latest", release_ref)
    _require_checkpoint(decoder_dir / latest.read_text().strip() / DECODER_FILE, release_ref)

    base_patterns = list(BASE_LLM_FILES)
    if not release_has_base_weights(mllm_bin):
        base_patterns += BASE_LLM_WEIGHTS
    base_ref = pinned("base_llm", release.base_llm)
    base_dir = fetch(base_ref, base_patterns, token=token, local_files_only=offline)
    _require_file(base_dir / "config.json", base_ref)
    if not any((base_dir / name).is_file() for name in ("tokenizer.model", "tokenizer.json")):
        raise IncompleteFilesError(
            f"{base_ref.describe()} has no tokenizer.model or tokenizer.json in {base_dir}"
        )

    vae_ref = pinned("vae", release.vae)
    vae_dir = fetch(vae_ref, None, token=token, local_files_only=offline)
    _require_file(vae_dir / "config.json", vae_ref)
    if not any(vae_dir.glob("*.safetensors")) and not any(vae_dir.glob("*.bin")):
        raise IncompleteFilesError(f"{vae_ref.describe()} has no weights in {vae_dir}")
    return ReleaseFiles(
        mllm_bin=mllm_bin,
        decoder_dir=decoder_dir,
        base_llm_dir=base_dir,
        vae_dir=vae_dir,
        sources=sources,
        latent_size=release.latent_size,
    )


def fetch(
    ref: RepoRef,
    allow_patterns: Sequence[str] | None,
    *,
    token: str | None = None,
    local_files_only: bool | None = None,
) -> Path:
    """Download (or find in the cache) the files of `ref` matching `allow_patterns`; returns the
    local folder (the subfolder, when `ref` names one).

    With a subfolder, only that folder is fetched and the patterns apply inside it. Cached files
    whose size differs from the Hub's listing are reported as truncated. A local folder is
    returned as it is.
    """
    patterns = _in_subfolder(ref, allow_patterns)
    if ref.is_local:
        return _local_root(ref)
    offline = _offline(local_files_only)
    try:
        root = Path(
            _hf_snapshot_download(
                ref.repo,
                revision=ref.revision,
                allow_patterns=patterns,
                token=token,
                local_files_only=offline,
            )
        )
    except IncompleteSnapshotError as error:
        missing = _missing_files(ref, Path(error.snapshot_path), patterns)
        raise IncompleteFilesError(
            f"the cached copy of {ref.describe()} lacks {missing} and the Hub cannot be reached "
            "to complete it: run once with network access (unset HF_HUB_OFFLINE)"
        ) from error
    except (HfHubHTTPError, LocalEntryNotFoundError) as error:
        raise explain_hub_error(error, ref, token=token) from error
    except OSError as error:
        raise HubError(f"downloading {ref.describe()} failed: {error}") from error
    _check_sizes(ref, root, patterns)
    return root / ref.subfolder if ref.subfolder else root


def release_has_base_weights(mllm_bin: Path) -> bool:
    """Whether the release MLLM checkpoint carries the frozen base weights of its LoRA layers
    (`<module>.base_layer.weight` as newer PEFT names them, or `<module>.weight`).

    Reads only the checkpoint's index (memory-mapped).
    """
    import torch

    try:
        state = torch.load(mllm_bin, map_location="cpu", mmap=True, weights_only=True)
    except Exception as error:
        raise IncompleteFilesError(
            f"{mllm_bin} cannot be read ({type(error).__name__}: {error}): it is truncated or "
            "corrupt; delete it from the Hugging Face cache and download it again"
        ) from error
    modules = {key.split(".lora_A.")[0] for key in state if ".lora_A." in key}
    return bool(modules) and all(
        f"{module}.base_layer.weight" in state or f"{module}.weight" in state
        for module in modules
    )


def explain_hub_error(error: Exception, ref: RepoRef, *, token: str | None = None) -> HubError:
    """One sentence saying what went wrong with `ref` and what to do about it."""
    have_token = bool(token or get_token())
    page = f"https://huggingface.co/{ref.repo}"
    if isinstance(error, GatedRepoError):
        if not have_token:
            return AccessError(
                f"{ref.repo} is a gated model and no Hugging Face token is set: accept its terms "
                f"at {page}, then {_TOKEN_HELP}"
            )
        return AccessError(
            f"the Hugging Face token was refused for the gated model {ref.repo}: accept its terms "
            f"at {page} with the account that owns HF_TOKEN (or use a token of an account that "
            "has access) and try again"
        )
    if isinstance(error, RevisionNotFoundError):
        return AccessError(
            f"revision {ref.revision} does not exist in {ref.repo}: fix its 'revision' in the "
            "character registry (assets/characters.yaml)"
        )
    if isinstance(error, RepositoryNotFoundError) or (
        isinstance(error, HfHubHTTPError) and _status(error) in (401, 403)
    ):
        if not have_token:
            return AccessError(
                f"{ref.repo} was not found or needs a Hugging Face token: check the repo id in "
                f"the character registry, or {_TOKEN_HELP}"
            )
        return AccessError(
            f"{ref.repo} was not found or is not accessible with the current HF_TOKEN: check "
            "the repo id in the character registry and that the token's account can read it"
        )
    if isinstance(error, (LocalEntryNotFoundError, RevisionResolutionError)):
        return HubError(
            f"{ref.describe()} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
            "the Hub cannot be reached (offline mode or no network): run once with network "
            "access, or point HF_HUB_CACHE at a cache that holds it"
        )
    return HubError(f"downloading {ref.describe()} failed: {error}")


def _resolve_commit(
    ref: RepoRef, patterns: Sequence[str] | None, *, token: str | None, local_files_only: bool
) -> str:
    if ref.is_local:
        _local_root(ref)
        return _fingerprint(Path(ref.repo), _in_subfolder(ref, patterns))
    try:
        return resolve_revision(
            ref.repo, revision=ref.revision, token=token, local_files_only=local_files_only
        ).resolved
    except (HfHubHTTPError, RevisionResolutionError) as error:
        raise explain_hub_error(error, ref, token=token) from error


def _release_patterns(release: ReleaseSource) -> list[str]:
    return [f"{release.mllm_folder}/*", f"{release.decoder_folder}/*"]


def _in_subfolder(ref: RepoRef, patterns: Sequence[str] | None) -> list[str] | None:
    if ref.subfolder is None:
        return list(patterns) if patterns is not None else None
    return [f"{ref.subfolder}/{p}" for p in (patterns or ["*"])]


def _offline(local_files_only: bool | None) -> bool:
    return constants.is_offline_mode() if local_files_only is None else local_files_only


def _local_root(ref: RepoRef) -> Path:
    path = Path(ref.repo) / ref.subfolder if ref.subfolder else Path(ref.repo)
    if not path.is_dir():
        raise IncompleteFilesError(f"the local folder {path} does not exist")
    return path


def _fingerprint(root: Path, patterns: list[str] | None) -> str:
    """`local-<digest>` of the relative names, sizes and modification times of matching files."""
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for name in filter_repo_objects(files, allow_patterns=patterns):
        stat = (root / name).stat()
        digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return f"local-{digest.hexdigest()[:16]}"


def _check_sizes(ref: RepoRef, root: Path, patterns: list[str] | None) -> None:
    """Compare cached files with the Hub's listing of the commit, where the cache holds one."""
    try:
        listing = get_cached_repo_tree(ref.repo, revision=root.name)
    except CachedRepoTreeNotFoundError:
        return
    expected = {f.path: f.size for f in listing}
    for name in filter_repo_objects(sorted(expected), allow_patterns=patterns):
        path = root / name
        if path.is_file() and path.stat().st_size != expected[name]:
            raise IncompleteFilesError(
                f"{name} of {ref.repo}@{root.name[:12]} is truncated or corrupt in the cache "
                f"({path.stat().st_size} bytes, the Hub lists {expected[name]}): delete "
                f"{path.resolve()} and download again"
            )


def _missing_files(ref: RepoRef, root: Path, patterns: list[str] | None) -> str:
    """The files of the commit's listing that are absent under `root`, for messages."""
    try:
        listing = [f.path for f in get_cached_repo_tree(ref.repo, revision=root.name)]
    except CachedRepoTreeNotFoundError:
        return "some files"
    missing = [
        name for name in filter_repo_objects(sorted(listing), allow_patterns=patterns)
        if not (root / name).is_file()
    ]
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    return ", ".join(missing[:3]) + more if missing else "some files"


def _require_file(path: Path, ref: RepoRef) -> Path:
    if not path.is_file():
        raise IncompleteFilesError(
            f"{ref.describe()} has no {path.name} at {path}: check the folder names in the "
            "character registry, or delete the cached snapshot and download again"
        )
    if path.stat().st_size == 0:
        raise IncompleteFilesError(f"{path} of {ref.describe()} is empty: download it again")
    return path


def _require_checkpoint(path: Path, ref: RepoRef) -> Path:
    """A PyTorch checkpoint is a zip archive: reading its central directory (at the end of the
    file) catches truncated and overwritten files without reading the weights."""
    _require_file(path, ref)
    try:
        with zipfile.ZipFile(path) as archive:
            archive.infolist()
    except (zipfile.BadZipFile, OSError) as error:
        raise IncompleteFilesError(
            f"{path} of {ref.describe()} is truncated or corrupt ({error}): delete "
            f"{path.resolve()} and download it again"
        ) from error
    return path


def _status(error: HfHubHTTPError) -> int | None:
    response = getattr(error, "response", None)
    return getattr(response, "status_code", None)


def _trusted_layout(path: Path, what: str) -> None:
    try:
        check_layout(path)
    except ConversionError as error:
        raise IncompleteFilesError(
            f"{what} is not a complete converted AnimeGamer character: {error}"
        ) from error
