"""Start-up resolution of a character: the real `snapshot_download` path against a Hub cache laid
out as the real one (offline), conversion once into an atomic cache, and the errors."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import httpx2
import huggingface_hub
import pytest
import torch
from huggingface_hub import constants

import animegamer.characters.conversion.decoder as decoder_converter
import animegamer.characters.conversion.mllm as mllm_converter
from animegamer.characters import hub
from animegamer.characters.conversion import character as character_module
from animegamer.characters.conversion.character import (
    LAYOUT_FILES,
    InsufficientResourcesError,
    Requirements,
    read_manifest,
)
from animegamer.characters.conversion.errors import ConversionError
from animegamer.characters.registry import RepoRef, load_registry
from animegamer.models.tiny_decoder import TINY_LATENT_SIZE, write_tiny_decoder_release
from animegamer.models.tiny_game_state import write_tiny_mllm_release
from animegamer.pipelines.animegamer.tiny import save_tiny_decoder
from animegamer.serving import settings as settings_module
from animegamer.serving.settings import Settings, default_cache_dir

RELEASE_REPO = "TencentARC/AnimeGamer"
RELEASE_COMMIT = "1" * 40
NEW_RELEASE_COMMIT = "2" * 40


def put_in_hub_cache(
    cache: Path, repo_id: str, files: dict[str, Path], commit: str, ref: str = "main"
) -> Path:
    """Lay `files` out as huggingface_hub does: blobs by hash, snapshot symlinks, the ref, and the
    commit's tree listing (which lets the hub detect missing files offline)."""
    storage = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = storage / "snapshots" / commit
    tree = {}
    for name, source in files.items():
        data = Path(source).read_bytes()
        blob = storage / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
        tree[name] = {"size": len(data), "blob_id": hashlib.sha1(data).hexdigest()}
    (storage / "refs").mkdir(parents=True, exist_ok=True)
    (storage / "refs" / ref).write_text(commit)
    (storage / "trees").mkdir(exist_ok=True)
    listing = {"format_version": 1, "files": tree}
    (storage / "trees" / f"{commit}.json").write_text(json.dumps(listing))
    return snapshot


def folder_files(root: Path, prefix: str = "") -> dict[str, Path]:
    return {prefix + str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="session")
def tiny_release(tmp_path_factory) -> dict[str, Path]:
    """A tiny release in the exact release layout, from the tiny factories."""
    root = tmp_path_factory.mktemp("tiny_release")
    release_bin, base_llm = write_tiny_mllm_release(root / "mllm")
    decoder = write_tiny_decoder_release(root / "VDM_Decoder")
    vae = save_tiny_decoder(root / "tiny_decoder") / "vae"
    return {"mllm_bin": release_bin, "base_llm": base_llm, "decoder": decoder, "vae": vae}


def put_release(cache: Path, tiny: dict[str, Path], commit: str) -> None:
    files = {"MLLM-Qiqi/pytorch_model.bin": tiny["mllm_bin"]}
    files |= folder_files(tiny["decoder"], "VDM_Decoder-Qiqi/")
    files |= folder_files(tiny["decoder"], "VDM_Decoder-Sosuke/")
    put_in_hub_cache(cache, RELEASE_REPO, files, commit)


def fill_hub_cache(cache: Path, tiny: dict[str, Path]) -> None:
    """The three repos the shipped Qiqi entry names, at the revisions it pins."""
    qiqi = load_registry().get("Qiqi").release
    put_release(cache, tiny, RELEASE_COMMIT)
    put_in_hub_cache(
        cache, qiqi.base_llm.repo, folder_files(tiny["base_llm"]), qiqi.base_llm.revision
    )
    put_in_hub_cache(cache, qiqi.vae.repo, folder_files(tiny["vae"], "vae/"), qiqi.vae.revision)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch, tiny_release) -> Path:
    """A Hub cache holding the tiny release, with HF_HUB_CACHE pointed at it, offline, no token."""
    cache = tmp_path / "hf"
    fill_hub_cache(cache, tiny_release)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    return cache


@pytest.fixture
def qiqi():
    """The shipped Qiqi entry, with the tiny release's latent size."""
    character = load_registry().get("Qiqi")
    release = dataclasses.replace(character.release, latent_size=TINY_LATENT_SIZE)
    return dataclasses.replace(character, release=release)


@pytest.fixture
def calls(monkeypatch) -> dict[str, int]:
    """Counts the converter calls (the real converters still run)."""
    counts = {"mllm": 0, "decoder": 0}
    real_mllm, real_decoder = mllm_converter.convert_mllm, decoder_converter.convert_decoder

    def mllm(*args, **kwargs):
        counts["mllm"] += 1
        return real_mllm(*args, **kwargs)

    def decoder(*args, **kwargs):
        counts["decoder"] += 1
        return real_decoder(*args, **kwargs)

    monkeypatch.setattr(mllm_converter, "convert_mllm", mllm)
    monkeypatch.setattr(decoder_converter, "convert_decoder", decoder)
    return counts


def blob_of(cache: Path, repo_id: str, commit: str, name: str) -> Path:
    link = cache / ("models--" + repo_id.replace("/", "--")) / "snapshots" / commit / name
    return link.resolve()


def assert_no_cache_entry(cache_dir: Path) -> None:
    folder = cache_dir / "characters"
    entries = list(folder.iterdir()) if folder.exists() else []
    assert [p.name for p in entries if not p.name.endswith(".lock")] == []


def test_resolution_converts_once_into_a_loadable_character(
    hub_cache, qiqi, calls, tmp_path, tiny_release
):
    from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX

    from animegamer.characters.conversion.decoder import load_release_state_dict
    from animegamer.models.game_state import GameStateModel
    from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline

    cache_dir = tmp_path / "animegamer"
    path = hub.resolve_character(qiqi, cache_dir)
    assert calls == {"mllm": 1, "decoder": 1}
    assert path.parent == cache_dir / "characters" and path.name.startswith("Qiqi-")
    assert all((path / name).is_file() for name in LAYOUT_FILES)
    manifest = read_manifest(path)
    assert manifest["character"] == "Qiqi"
    assert manifest["sources"]["release"]["commit"] == RELEASE_COMMIT
    assert manifest["sources"]["release"]["revision"] == "main"
    assert manifest["sources"]["base_llm"]["commit"] == qiqi.release.base_llm.revision
    assert manifest["sources"]["vae"]["subfolder"] == "vae"

    model = GameStateModel.from_pretrained(path)
    assert model.representation_dim == 64
    decoder = AnimeGamerPipeline.from_pretrained(path, device="cpu", dtype=torch.float32)
    # the release's decoder weights, converted, and the release's VAE, as they are
    source = load_release_state_dict(tiny_release["decoder"])
    torch.testing.assert_close(decoder.transformer.ofs_embedding.linear_2.weight,
                               source["flow_embed.2.weight"], rtol=0, atol=0)
    release_vae = AutoencoderKLCogVideoX.from_pretrained(tiny_release["vae"]).state_dict()
    assert release_vae.keys() == decoder.vae.state_dict().keys()
    assert all(torch.equal(value, release_vae[name])
               for name, value in decoder.vae.state_dict().items())

    again = hub.resolve_character(qiqi, cache_dir)
    assert again == path
    assert calls == {"mllm": 1, "decoder": 1}
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.name + ".lock"]


def test_only_the_characters_folders_are_requested_at_pinned_commits(
    hub_cache, qiqi, monkeypatch, tmp_path
):
    requests = []
    real = hub._hf_snapshot_download

    def spy(repo_id, **kwargs):
        requests.append((repo_id, kwargs["revision"], kwargs["allow_patterns"]))
        return real(repo_id, **kwargs)

    monkeypatch.setattr(hub, "_hf_snapshot_download", spy)
    hub.resolve_character(qiqi, tmp_path / "animegamer")
    by_repo = {repo: (revision, patterns) for repo, revision, patterns in requests}
    assert by_repo[RELEASE_REPO] == (RELEASE_COMMIT, ["MLLM-Qiqi/*", "VDM_Decoder-Qiqi/*"])
    base_revision, base_patterns = by_repo[qiqi.release.base_llm.repo]
    assert base_revision == qiqi.release.base_llm.revision
    assert "config.json" in base_patterns
    assert "*.safetensors" not in base_patterns  # the tiny release carries the base weights
    assert by_repo[qiqi.release.vae.repo] == (qiqi.release.vae.revision, ["vae/*"])


def test_a_new_release_revision_reconverts_and_replaces_the_old_one(
    hub_cache, qiqi, calls, tiny_release, tmp_path
):
    cache_dir = tmp_path / "animegamer"
    old = hub.resolve_character(qiqi, cache_dir)
    other_character = old.with_name(f"Qiqi2-{'0' * 16}")
    other_character.mkdir()
    put_release(hub_cache, tiny_release, NEW_RELEASE_COMMIT)  # refs/main moves
    new = hub.resolve_character(qiqi, cache_dir)
    assert new != old and not old.exists() and other_character.is_dir()
    assert read_manifest(new)["sources"]["release"]["commit"] == NEW_RELEASE_COMMIT
    assert calls["mllm"] == 2
    assert hub.resolve_character(qiqi, cache_dir) == new
    assert calls["mllm"] == 2


@pytest.mark.parametrize("error", [RuntimeError("disk went away"), KeyboardInterrupt()])
def test_an_interrupted_conversion_leaves_nothing_trusted(
    hub_cache, qiqi, calls, monkeypatch, tmp_path, error
):
    cache_dir = tmp_path / "animegamer"

    def fail(*args, **kwargs):
        raise error

    counting = decoder_converter.convert_decoder
    monkeypatch.setattr(decoder_converter, "convert_decoder", fail)
    expected = ConversionError if isinstance(error, Exception) else KeyboardInterrupt
    with pytest.raises(expected) as info:
        hub.resolve_character(qiqi, cache_dir)
    if expected is ConversionError:
        message = str(info.value)
        assert "animation decoder from" in message and "mp_rank_00_model_states.pt" in message
        assert "disk went away" in message
    assert calls["mllm"] == 1  # the MLLM stage had written its files before the failure
    assert_no_cache_entry(cache_dir)

    monkeypatch.setattr(decoder_converter, "convert_decoder", counting)
    path = hub.resolve_character(qiqi, cache_dir)
    assert read_manifest(path)["character"] == "Qiqi"


def test_leftovers_of_a_killed_conversion_are_never_trusted(hub_cache, qiqi, calls, tmp_path):
    cache_dir = tmp_path / "animegamer"
    path = hub.resolve_character(qiqi, cache_dir)
    shutil.rmtree(path / "transformer")  # a final folder that lost files
    stale = path.parent / f".{path.name}.tmp-killed"
    (stale / "llm").mkdir(parents=True)
    assert hub.resolve_character(qiqi, cache_dir) == path
    assert calls == {"mllm": 2, "decoder": 2}
    assert (path / "transformer" / "config.json").is_file()
    assert not stale.exists()


def test_a_truncated_cached_file_is_reported(hub_cache, qiqi, calls, tmp_path):
    name = "VDM_Decoder-Qiqi/1/mp_rank_00_model_states.pt"
    blob = blob_of(hub_cache, RELEASE_REPO, RELEASE_COMMIT, name)
    blob.write_bytes(blob.read_bytes()[: blob.stat().st_size // 2])
    with pytest.raises(hub.IncompleteFilesError, match=r"mp_rank_00_model_states.pt .*truncated"):
        hub.resolve_character(qiqi, tmp_path / "animegamer")
    assert calls == {"mllm": 0, "decoder": 0}
    assert_no_cache_entry(tmp_path / "animegamer")


def test_a_missing_cached_file_is_reported(hub_cache, qiqi, tmp_path):
    snapshot = hub_cache / "models--TencentARC--AnimeGamer" / "snapshots" / RELEASE_COMMIT
    (snapshot / "MLLM-Qiqi" / "pytorch_model.bin").unlink()
    pattern = r"copy of TencentARC/AnimeGamer@1{40} lacks MLLM-Qiqi/pytorch_model.bin and"
    with pytest.raises(hub.IncompleteFilesError, match=pattern):
        hub.resolve_character(qiqi, tmp_path / "animegamer")
    assert_no_cache_entry(tmp_path / "animegamer")


@pytest.mark.parametrize(
    "name", ["MLLM-Qiqi/pytorch_model.bin", "VDM_Decoder-Qiqi/1/mp_rank_00_model_states.pt"]
)
def test_an_overwritten_checkpoint_of_the_right_size_is_reported(
    hub_cache, qiqi, calls, tmp_path, name
):
    blob = blob_of(hub_cache, RELEASE_REPO, RELEASE_COMMIT, name)
    blob.write_bytes(b"\0" * blob.stat().st_size)
    pattern = rf"{name.rsplit('/', 1)[1]} of TencentARC/AnimeGamer@{RELEASE_COMMIT} is trunc"
    with pytest.raises(hub.IncompleteFilesError, match=pattern):
        hub.resolve_character(qiqi, tmp_path / "animegamer")
    assert calls == {"mllm": 0, "decoder": 0}
    assert_no_cache_entry(tmp_path / "animegamer")


def test_an_unreadable_checkpoint_index_is_reported(hub_cache, qiqi, monkeypatch, tmp_path):
    def unreadable(*args, **kwargs):
        raise RuntimeError("PytorchStreamReader failed reading file data/0")

    monkeypatch.setattr(torch, "load", unreadable)
    with pytest.raises(hub.IncompleteFilesError, match=r"pytorch_model.bin cannot be read.*corr"):
        hub.resolve_character(qiqi, tmp_path / "animegamer")
    assert_no_cache_entry(tmp_path / "animegamer")


def test_offline_without_the_files_says_what_to_do(hub_cache, qiqi, tmp_path):
    shutil.rmtree(hub_cache / "models--mistralai--Mistral-7B-Instruct-v0.1")
    with pytest.raises(hub.HubError) as info:
        hub.resolve_character(qiqi, tmp_path / "animegamer")
    message = str(info.value)
    assert "mistralai/Mistral-7B-Instruct-v0.1@" in message
    assert "not in the Hugging Face cache" in message and "offline" in message
    assert "\n" not in message


@pytest.fixture
def gated_hub(hub_cache, monkeypatch):
    """Online, with a Hub that refuses the gated Mistral repo; other repos are served from the
    cache (their requests fail to connect)."""

    def handler(request):
        if "Mistral-7B" in str(request.url):
            return httpx2.Response(
                401, headers={"X-Error-Code": "GatedRepo"}, json={"error": "gated"}
            )
        raise httpx2.ConnectError("no network in tests", request=request)

    shutil.rmtree(hub_cache / "models--mistralai--Mistral-7B-Instruct-v0.1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    huggingface_hub.set_client_factory(
        lambda: httpx2.Client(transport=httpx2.MockTransport(handler))
    )
    yield
    huggingface_hub.set_client_factory(huggingface_hub.utils._http.default_client_factory)


def test_a_missing_token_for_the_gated_model_is_one_clear_sentence(gated_hub, qiqi, tmp_path):
    with pytest.raises(hub.AccessError) as info:
        hub.resolve_character(qiqi, tmp_path / "animegamer")
    message = str(info.value)
    assert message.startswith("mistralai/Mistral-7B-Instruct-v0.1 is a gated model and no")
    assert "HF_TOKEN" in message and "https://huggingface.co/settings/tokens" in message
    assert isinstance(info.value.__cause__, huggingface_hub.errors.GatedRepoError)
    assert_no_cache_entry(tmp_path / "animegamer")


def test_a_refused_token_for_the_gated_model_is_one_clear_sentence(
    gated_hub, qiqi, monkeypatch, tmp_path
):
    monkeypatch.setenv("HF_TOKEN", "hf_test_token_without_access")
    with pytest.raises(hub.AccessError, match=r"token was refused for the gated model mistralai"):
        hub.resolve_character(qiqi, tmp_path / "animegamer")


def test_an_unknown_revision_or_repo_is_explained():
    response = httpx2.Response(404, request=httpx2.Request("GET", "https://huggingface.co/x"))
    ref = RepoRef("org/name", "deadbeef")
    revision = huggingface_hub.errors.RevisionNotFoundError("404", response=response)
    assert "revision deadbeef does not exist in org/name" in str(
        hub.explain_hub_error(revision, ref, token="t")
    )
    missing = huggingface_hub.errors.RepositoryNotFoundError("401", response=response)
    assert "org/name was not found or is not accessible with the current HF_TOKEN" in str(
        hub.explain_hub_error(missing, ref, token="t")
    )


def test_a_converted_repo_is_preferred_and_never_converted(hub_cache, qiqi, calls, tmp_path):
    converted = hub.resolve_character(qiqi, tmp_path / "animegamer")
    put_in_hub_cache(hub_cache, "someone/animegamer-qiqi", folder_files(converted), "3" * 40)
    character = dataclasses.replace(qiqi, converted=RepoRef("someone/animegamer-qiqi", "main"))
    path = hub.resolve_character(character, tmp_path / "other-cache")
    assert path == hub_cache / "models--someone--animegamer-qiqi" / "snapshots" / ("3" * 40)
    assert calls == {"mllm": 1, "decoder": 1}
    assert not (tmp_path / "other-cache").exists()

    (path / "transformer" / "config.json").unlink()
    with pytest.raises(hub.IncompleteFilesError, match=r"lacks transformer/config.json and"):
        hub.resolve_character(character, tmp_path / "other-cache")
    published = {k: v for k, v in folder_files(converted).items() if "transformer" not in k}
    put_in_hub_cache(hub_cache, "someone/animegamer-qiqi", published, "4" * 40, ref="v2")
    incomplete = dataclasses.replace(qiqi, converted=RepoRef("someone/animegamer-qiqi", "v2"))
    with pytest.raises(hub.IncompleteFilesError, match=r"not a complete converted.*transformer"):
        hub.resolve_character(incomplete, tmp_path / "other-cache")


def test_local_folders_work_everywhere_a_repo_id_does(tiny_release, qiqi, calls, tmp_path,
                                                      caplog):
    release_dir = tmp_path / "release"
    (release_dir / "MLLM-Qiqi").mkdir(parents=True)
    shutil.copy(tiny_release["mllm_bin"], release_dir / "MLLM-Qiqi" / "pytorch_model.bin")
    shutil.copytree(tiny_release["decoder"], release_dir / "VDM_Decoder-Qiqi")
    release = dataclasses.replace(
        qiqi.release,
        repo=RepoRef(str(release_dir), None),
        base_llm=RepoRef(str(tiny_release["base_llm"]), None),
        vae=RepoRef(str(tiny_release["vae"].parent), None, "vae"),
    )
    character = dataclasses.replace(qiqi, release=release)
    with caplog.at_level(logging.INFO, logger="animegamer.characters.hub"):
        path = hub.resolve_character(character, tmp_path / "animegamer")
        trained = dataclasses.replace(qiqi, converted=RepoRef(str(path), None))
        assert hub.resolve_character(trained, tmp_path / "animegamer") == path
    assert read_manifest(path)["sources"]["release"]["commit"].startswith("local-")
    assert hub.resolve_character(character, tmp_path / "animegamer") == path
    assert calls == {"mllm": 1, "decoder": 1}
    # nothing was downloaded, and the log says so
    assert "local folder Qiqi release: done in" in caplog.text
    assert f"local folder Qiqi ({path}): done in" in caplog.text
    assert "download" not in caplog.text


def test_disk_and_ram_are_checked_before_anything_is_written(
    hub_cache, qiqi, calls, monkeypatch, tmp_path
):
    monkeypatch.setattr(
        character_module, "estimate_requirements", lambda files: Requirements(10**15, 0)
    )
    with pytest.raises(InsufficientResourcesError, match=r"needs about 1000000.0 GB of free disk"):
        hub.resolve_character(qiqi, tmp_path / "animegamer")
    monkeypatch.setattr(
        character_module, "estimate_requirements", lambda files: Requirements(0, 10**15)
    )
    with pytest.raises(InsufficientResourcesError, match=r"1000000.0 GB of RAM, but only"):
        hub.resolve_character(qiqi, tmp_path / "animegamer")
    assert calls == {"mllm": 0, "decoder": 0}
    assert_no_cache_entry(tmp_path / "animegamer")
    unchecked = hub.resolve_character(qiqi, tmp_path / "animegamer", check_resources=False)
    assert unchecked.is_dir()


def test_estimates_count_the_inputs(hub_cache, qiqi):
    files = hub.download_release(qiqi.release)
    needed = character_module.estimate_requirements(files)
    inputs = sum(
        p.stat().st_size
        for p in [files.mllm_bin, *files.decoder_dir.rglob("*"), *files.vae_dir.rglob("*")]
        if p.is_file()
    )
    assert needed.disk_bytes > inputs and needed.ram_bytes > files.mllm_bin.stat().st_size


def test_each_stage_is_logged_with_its_duration(hub_cache, qiqi, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="animegamer.characters.hub"):
        hub.resolve_character(qiqi, tmp_path / "animegamer")
        hub.resolve_character(qiqi, tmp_path / "animegamer")
    text = caplog.text
    assert "download Qiqi release: done in" in text
    assert "convert Qiqi into" in text and "s\n" in text
    assert "cache Qiqi: converted" in text


def test_settings_read_the_cache_resource_and_zero_gpu_variables(monkeypatch, tmp_path):
    env = {"ANIMEGAMER_CACHE": str(tmp_path / "custom"),
           "ANIMEGAMER_SKIP_RESOURCE_CHECK": "1", "SPACES_ZERO_GPU": "true"}
    settings = Settings.from_env(env)
    assert settings.cache_dir == tmp_path / "custom"
    assert not settings.resource_checks and settings.zero_gpu
    monkeypatch.setattr(settings_module, "SPACE_DATA_DIR", tmp_path)
    plain = Settings.from_env({})
    assert plain.cache_dir == tmp_path / "animegamer"
    assert plain.resource_checks and not plain.zero_gpu
    monkeypatch.setattr(settings_module, "SPACE_DATA_DIR", tmp_path / "absent")
    assert default_cache_dir({}) == Path.home() / ".cache" / "animegamer"


def test_a_gated_refusal_with_a_partial_cache_is_explained_as_access(
    gated_hub, hub_cache, qiqi, tiny_release
):
    """Mistral's small files were cached before; one is missing now and the Hub refuses the
    token: the message is about access, not about being offline."""
    ref = qiqi.release.base_llm
    put_in_hub_cache(hub_cache, ref.repo, folder_files(tiny_release["base_llm"]), ref.revision)
    snapshot = hub_cache / "models--mistralai--Mistral-7B-Instruct-v0.1" / "snapshots"
    (snapshot / ref.revision / "config.json").unlink()
    with pytest.raises(hub.AccessError, match="is a gated model and no Hugging Face token"):
        hub.fetch(ref, ["config.json", "tokenizer.json"])
