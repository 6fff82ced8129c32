"""`python -m animegamer.convert`: the three subcommands, publishing, and one-line errors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
import yaml

# The Hub-cache fixtures are shared with the resolver's tests.
from test_hub import calls, gated_hub, hub_cache, tiny_release  # noqa: F401

from animegamer.characters.conversion.character import LAYOUT_FILES, read_manifest
from animegamer.characters.registry import default_registry_path
from animegamer.convert.__main__ import main
from animegamer.models.tiny_decoder import TINY_LATENT_SIZE

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def registry(tmp_path) -> Path:
    """The shipped registry, with the tiny release's latent size for Qiqi."""
    data = yaml.safe_load(default_registry_path().read_text())
    data["characters"][0]["weights"]["release"]["latent_size"] = list(TINY_LATENT_SIZE)
    shutil.copytree(default_registry_path().parent / "avatars", tmp_path / "avatars")
    path = tmp_path / "characters.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    """Exit status 2 and one `error:` line, last on stderr (progress bars may precede it)."""
    assert code == 2
    assert "Traceback" not in err and err.endswith("\n")
    error_lines = [line for line in err.splitlines() if "error: " in line]
    assert len(error_lines) == 1 and err.splitlines()[-1].split("\r")[-1].startswith("error: ")
    for fragment in fragments:
        assert fragment in error_lines[0]


def test_character_converts_into_out_once(hub_cache, registry, calls, capsys, tmp_path):  # noqa: F811
    out = tmp_path / "qiqi"
    args = ("character", "--name", "Qiqi", "--out", out, "--registry", registry)
    code, stdout, _ = run(capsys, *args)
    assert code == 0
    assert f"converted Qiqi: {out}" in stdout
    assert all((out / name).is_file() for name in LAYOUT_FILES)
    assert read_manifest(out)["sources"]["release"]["mllm_folder"] == "MLLM-Qiqi"

    code, stdout, _ = run(capsys, *args)
    assert code == 0 and "already holds this conversion" in stdout
    assert calls == {"mllm": 1, "decoder": 1}


def test_character_without_out_fills_the_startup_cache(
    hub_cache, registry, capsys, tmp_path, monkeypatch  # noqa: F811
):
    monkeypatch.setenv("ANIMEGAMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ANIMEGAMER_CHARACTERS", str(registry))  # instead of --registry
    code, stdout, _ = run(capsys, "character", "--name", "Qiqi")
    assert code == 0
    (converted,) = (tmp_path / "cache" / "characters").glob("Qiqi-*[!k]")
    assert f"converted Qiqi: {converted}" in stdout


def test_push_to_hub_publishes_with_a_model_card(
    hub_cache, registry, capsys, tmp_path, monkeypatch  # noqa: F811
):
    recorded = {}

    def create_repo(self, repo_id, **kwargs):
        recorded["create"] = (repo_id, kwargs)

    def upload_folder(self, **kwargs):
        recorded["upload"] = kwargs
        return SimpleNamespace(commit_url="https://huggingface.co/me/qiqi/commit/abc", oid="abc")

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    out = tmp_path / "qiqi"
    code, stdout, _ = run(
        capsys, "character", "--name", "Qiqi", "--out", out, "--registry", registry,
        "--push-to-hub", "me/qiqi", "--private",
    )
    assert code == 0
    create_options = {"repo_type": "model", "private": True, "exist_ok": True}
    assert recorded["create"] == ("me/qiqi", create_options)
    assert recorded["upload"]["folder_path"] == str(out)
    assert "README.md" in recorded["upload"]["allow_patterns"]
    assert "converted: {repo: me/qiqi, revision: abc}" in stdout
    card = (out / "README.md").read_text()
    assert card.startswith("---\n") and "license: other" in card
    assert "- mistralai/Mistral-7B-Instruct-v0.1" in card
    commit = read_manifest(out)["sources"]["base_llm"]["commit"]
    assert f"`{commit}`" in card and "repo: me/qiqi" in card


def test_mllm_and_decoder_subcommands(tiny_release, capsys, tmp_path):  # noqa: F811
    out = tmp_path / "character"
    code, stdout, _ = run(
        capsys, "mllm", "--release", tiny_release["mllm_bin"],
        "--base-llm", tiny_release["base_llm"], "--out", out,
    )
    assert code == 0 and f"wrote {out}" in stdout
    assert (out / "llm" / "config.json").is_file() and (out / "resamplers.safetensors").is_file()
    assert (out / "tokenizer" / "tokenizer.json").is_file()
    code, _, _ = run(
        capsys, "decoder", "--release", tiny_release["decoder"], "--out", out,
        "--latent-size", *TINY_LATENT_SIZE,
    )
    assert code == 0 and (out / "transformer" / "config.json").is_file()


def test_errors_are_one_line_with_exit_code_2(
    hub_cache, registry, capsys, tmp_path, tiny_release  # noqa: F811
):
    code, _, err = run(capsys, "character", "--name", "Pazu", "--registry", registry)
    assert_one_line_error(code, err, "unknown character 'Pazu'", "Qiqi, Sosuke")

    code, _, err = run(
        capsys, "mllm", "--release", tmp_path / "missing.bin",
        "--base-llm", tiny_release["base_llm"], "--out", tmp_path / "x",
    )
    assert_one_line_error(code, err, "missing.bin")

    code, _, err = run(
        capsys, "decoder", "--release", tiny_release["decoder"], "--out", tmp_path / "y"
    )
    assert_one_line_error(code, err, "pos_embedding has 346 positions", "latent 60x90")

    taken = tmp_path / "taken"
    taken.mkdir()
    code, _, err = run(
        capsys, "character", "--name", "Qiqi", "--out", taken, "--registry", registry
    )
    assert_one_line_error(code, err, f"{taken} already exists")


def test_a_missing_gated_token_is_one_line(gated_hub, registry, capsys, tmp_path):  # noqa: F811
    code, _, err = run(
        capsys, "character", "--name", "Qiqi", "--out", tmp_path / "o", "--registry", registry
    )
    assert_one_line_error(code, err, "is a gated model and no Hugging Face token", "HF_TOKEN")


def test_module_entry_point_prints_no_traceback(tmp_path):
    broken = tmp_path / "characters.yaml"
    broken.write_text("format: 1\ncharacters:\n  - name: Qiqi\n")
    result = subprocess.run(
        [sys.executable, "-m", "animegamer.convert", "character", "--name", "Qiqi",
         "--registry", str(broken)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "characters[0] (Qiqi): field 'defaults' is required" in result.stderr
