"""Shared fixtures: where the repository and the reference vectors are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


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
