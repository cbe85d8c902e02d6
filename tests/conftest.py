"""Test defaults: one intra-op thread (fast for small policies on a 2-core machine)."""

import os

import pytest
import torch

torch.set_num_threads(1)
os.environ.setdefault("PL_DISABLE_FORK", "1")


@pytest.fixture
def tmp_cwd(tmp_path, monkeypatch):
    """Run a test inside a fresh temporary directory (so lightning_logs lands there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
