"""Batched, tensor-native worlds behind the `BatchedEnv` protocol."""

from parlightning.envs.base import ActionSpec, BatchedEnv, EpisodeParts, StepResult, task_ids_of

__all__ = ["ActionSpec", "BatchedEnv", "EpisodeParts", "StepResult", "task_ids_of"]
