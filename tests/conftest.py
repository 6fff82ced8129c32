"""Shared fixtures: where the repository and the reference vectors are."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

QIQI_FIELDS = {
    "character": "Qiqi",
    "adverb": "quickly",
    "motion": "fly on broomstick",
    "time": "day",
    "place": "sky",
}
"""A valid instruction, field by field (tests import it: `from conftest import QIQI_FIELDS`)."""
QIQI_VALUES = tuple(QIQI_FIELDS.values())
"""The same instruction as the API takes it: the five fields in order."""
COMMAND_FORMS = [
    ("quickly run, day town", ("Qiqi", "quickly", "run", "day", "town")),
    ("run", ("Qiqi", "quickly", "run", "day/night", "sky")),
    ("run, night town", ("Qiqi", "quickly", "run", "night", "town")),
    ("slowly walk along the street · evening harbour",
     ("Qiqi", "slowly", "walk along the street", "evening", "harbour")),
    ("gently sit on railing; seaside town",
     ("Qiqi", "gently", "sit on railing", "day/night", "seaside town")),
    ("gently sit on railing, night", ("Qiqi", "gently", "sit on railing", "night", "sky")),
    ("Character: Qiqi; Motion: quickly fly on broomstick; Background: day sky.",
     ("Qiqi", "quickly", "fly on broomstick", "day", "sky")),
    ("character: qiqi; motion: happily jump", ("Qiqi", "happily", "jump", "day/night", "sky")),
    ("Motion: lie down; Background: night grass",
     ("Qiqi", "quickly", "lie down", "night", "grass")),
    ("Qiqi eats a big cake at the beach",
     ("Qiqi", "quickly", "eat a big cake at the beach", "day/night", "sky")),
    ("Qiqi: slowly walk, night town", ("Qiqi", "slowly", "walk", "night", "town")),
    ("Qiqi happily flies on broomstick, morning sky",
     ("Qiqi", "happily", "fly on broomstick", "morning", "sky")),
    ("\uff31\uff49\uff51\uff49 watches, day town", ("Qiqi", "quickly", "watch", "day", "town")),
    ("quick\u200bly run\u202e, day t\U000e0041own", ("Qiqi", "quickly", "run", "day", "town")),
]
"""Every form the command line reads, with the five fields it plays in a fresh game of Qiqi
whose words are the registry's (default adverb `quickly`, time `day/night`, place `sky`): short
commands with each separator, the labelled form with parts left out, a sentence led by the name
(the verb back to its base form), fullwidth letters and invisible characters."""


def _reference_root() -> Path:
    override = os.environ.get("ANIMEGAMER_REFERENCE")
    if override:
        return Path(override)
    return REPO_ROOT.parent / "shared" / "reference"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """The reference vectors of the original implementation, or a skip saying why not."""
    root = _reference_root()
    if not (root / "README.md").is_file():
        pytest.skip(
            f"reference vectors not found at {root} (they live in ../shared/reference; "
            "set ANIMEGAMER_REFERENCE to point elsewhere)"
        )
    return root


@pytest.fixture(scope="session")
def preview_engine(tmp_path_factory):
    """One preview engine (tiny random models, 2 steps) for every test that plays turns."""
    from animegamer.serving.settings import Settings
    from animegamer.serving.stand_ins import create_preview_engine

    settings = Settings(
        engine="preview", preview_steps=2, output_dir=tmp_path_factory.mktemp("clips")
    )
    return create_preview_engine(settings)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def served_app(tmp_path_factory) -> Iterator[str]:
    """The whole app, as `python app.py` builds it, on the preview engine at a free port."""
    from animegamer.ui import create_app

    environ = {
        "ANIMEGAMER_ENGINE": "preview",
        "ANIMEGAMER_PREVIEW_STEPS": "2",
        "ANIMEGAMER_OUTPUT_DIR": str(tmp_path_factory.mktemp("served-clips")),
    }
    demo, launch_kwargs = create_app(environ)
    _, url, _ = demo.launch(
        server_name="127.0.0.1",
        server_port=free_port(),
        prevent_thread_lock=True,
        quiet=True,
        **launch_kwargs,
    )
    yield url
    demo.close()


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One torch thread for a module of tiny-model training tests: the 2 cores of the machine
    are shared, and tiny models gain nothing from a second thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


DIFFUSERS_MARKERS = (
    "big_accelerator", "lora", "ip_adapter", "training", "attention", "memory", "cpu_offload",
    "group_offload", "compile", "single_file", "quantization", "bitsandbytes", "quanto", "torchao",
    "gguf", "modelopt", "sdnq", "context_parallel", "tensor_parallel", "slow", "cache", "autoround",
)
"""Markers of diffusers' own test modules, which tests/test_diffusers_mixins.py imports from a
diffusers checkout (`DIFFUSERS_TESTS`); registered so that `--strict-markers` accepts them."""


def pytest_configure(config: pytest.Config) -> None:
    for marker in DIFFUSERS_MARKERS:
        config.addinivalue_line("markers", f"{marker}: a diffusers test marker")
