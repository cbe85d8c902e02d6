"""parlightning: PPO for orchestrator policies (PARL) on PyTorch Lightning."""

__version__ = "0.1.0"
