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


# The top-level `callbacks/` examples are imported by class_path, as a user's own module would be
# (`python -m parlightning.fit` puts the working directory on sys.path; tests run elsewhere).
import sys  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
