"""Batched, tensor-native worlds behind the `BatchedEnv` protocol."""

from parlightning.envs.base import ActionSpec, BatchedEnv, EpisodeParts, StepResult, task_ids_of
from parlightning.envs.cartpole import CartPoleEnv
from parlightning.envs.gym import GymVectorEnv
from parlightning.envs.normalize import NormalizeEnv
from parlightning.envs.swarm import SwarmEnv

__all__ = ["ActionSpec", "BatchedEnv", "CartPoleEnv", "EpisodeParts", "GymVectorEnv", "NormalizeEnv", "StepResult", "SwarmEnv",
           "task_ids_of"]
