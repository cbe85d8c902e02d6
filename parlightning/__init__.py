"""parlightning: PPO for orchestrator policies (PARL) on PyTorch Lightning."""

from parlightning import _moved

__version__ = "0.1.0"

_moved.install()  # old module paths (before the subpackage layout) resolve to the moved modules

__all__ = ["Policy", "load_policy"]  # `parlightning.fit` is the training entry point (a callable module)


def __getattr__(name: str):
    """`parlightning.load_policy(path).predict(obs)`: imported on first use, so `import parlightning` stays light."""
    if name in ("load_policy", "Policy"):
        from parlightning import inference

        return getattr(inference, name)
    raise AttributeError(f"module 'parlightning' has no attribute {name!r}")
