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


@pytest.fixture(scope="session")
def ckpt(tmp_path_factory) -> str:
    """A real 1-iteration fit of configs/swarm.yaml (8 actors x 8 steps): its last checkpoint, shared
    read-only by the tests of the bad-input rounds' fixes (each edits a copy)."""
    from parlightning import fit

    folder = tmp_path_factory.mktemp("swarmfit")
    fit(os.path.join(ROOT, "configs", "swarm.yaml"),
        ["--data.num_envs", "8", "--data.num_steps", "8", "--trainer.max_epochs", "1", "--trainer.enable_model_summary",
         "false", "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(folder)])
    return str(next(folder.glob("lightning_logs/version_0/checkpoints/last.ckpt")))


@pytest.fixture
def restamped(ckpt, tmp_path):
    """`restamped(edit)`: the path of a copy of `ckpt` that `edit(checkpoint_dict)` changed and
    `stamp_checkpoint` re-stamped (a checkpoint edited on purpose, which the checksum then trusts)."""
    def make(edit) -> str:
        from parlightning.runtime.checkpoint import stamp_checkpoint

        checkpoint = torch.load(ckpt, weights_only=True)
        edit(checkpoint)
        out = tmp_path / "c.ckpt"
        torch.save(stamp_checkpoint(checkpoint), out)
        return str(out)

    return make
