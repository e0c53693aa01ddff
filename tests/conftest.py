"""Fixtures shared by every test directory."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_model_dir() -> Path | None:
    """The ONNX MiniLM export in ../shared/models, or MEMMACHINE_TEST_MODEL_DIR."""
    configured = os.environ.get("MEMMACHINE_TEST_MODEL_DIR")
    path = (
        Path(configured)
        if configured
        else REPO_ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2"
    )
    return path if (path / "onnx" / "model.onnx").is_file() else None


@pytest.fixture(scope="session")
def model_dir() -> Path:
    path = shared_model_dir()
    if path is None:
        pytest.skip(
            "no local ONNX model (../shared/models/all-MiniLM-L6-v2 or MEMMACHINE_TEST_MODEL_DIR)"
        )
    return path


@pytest.fixture
def unique() -> str:
    """A short random token for ids, key prefixes and database names."""
    return uuid.uuid4().hex[:10]
