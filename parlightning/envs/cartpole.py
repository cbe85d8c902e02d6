"""CartPole-v1 as batched tensor ops: Gymnasium's classic-control dynamics for N actors at once.

Same constants, explicit Euler integrator, termination thresholds, reward (1 per step, the
terminal step included), truncation (500 steps) and initial state (uniform in [-0.05, 0.05))
as `gymnasium.envs.classic_control.CartPoleEnv` wrapped in `TimeLimit`, so the same problem
runs through `GymVectorEnv` and natively and the throughput comparison is honest. The one
difference: the state is float32 here (float64 inside Gymnasium), which moves results by about
1e-7 per step.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import Tensor

from parlightning.config_types import PositiveInt, Seed, check_allocation, check_args
from parlightning.envs.base import ActionSpec, BatchedEnv, StepResult, checked_device, world_lifecycle, world_specs
from parlightning.method_args import check_state, checked_methods, holds, mark

# Gymnasium's constants (gymnasium/envs/classic_control/cartpole.py).
GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_POLE + MASS_CART
HALF_POLE_LENGTH = 0.5
POLE_MASS_LENGTH = MASS_POLE * HALF_POLE_LENGTH
FORCE_MAG = 10.0
TAU = 0.02  # seconds between state updates
THETA_THRESHOLD = 12 * 2 * math.pi / 360  # radians, about 0.2095
X_THRESHOLD = 2.4
RESET_BOUND = 0.05


@checked_methods(**world_specs(), lifecycle=world_lifecycle(exact=None))
class CartPoleEnv(BatchedEnv):
    """N CartPole-v1 actors stepped by one set of tensor ops, with per-actor auto-reset.

    State `[N, 4]` = (cart position, cart velocity, pole angle, pole angular velocity), which is
    also the observation. Action `[N]` integer: 1 pushes right, anything else pushes left (as in
    Gymnasium). `truncated` is set at `max_episode_steps` even on a terminal step, exactly like
    Gymnasium's `TimeLimit`; a learner should treat `terminated` as the stronger signal.
    Resets draw from the env's own seeded `torch.Generator` on its device. The first three
    parameters are the data module's env factory order `(num_envs, device, seed)`.
    """

    checkpoint_exact = True  # state_dict resumes the very same trajectories

    def __init__(self, num_envs: PositiveInt, device: str | torch.device = "cpu", seed: Seed = 0,
                 max_episode_steps: PositiveInt = 500):
        typed = check_args("CartPoleEnv", CartPoleEnv.__init__, locals())  # the annotated ranges (config_types)
        self.num_envs, self.max_episode_steps, seed = typed["num_envs"], typed["max_episode_steps"], typed["seed"]
        self.device = checked_device("CartPoleEnv.device", device)
        # per actor: the state [4] and its step's temporaries (float32), the step counter and flags
        check_allocation(f"CartPoleEnv(num_envs={self.num_envs})", 4 * 16 * self.num_envs, self.device,
                         "lower num_envs")
        self.observation_shape = (4,)
        self.action_spec = ActionSpec("discrete", nvec=(2,))
        self.seed = seed
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        n = self.num_envs
        self.state = torch.zeros(n, 4, device=self.device)
        self.elapsed = torch.zeros(n, dtype=torch.long, device=self.device)
        # Length (= return: reward is 1 per step) of each actor's last finished episode, valid where done.
        self.last_episode_length = torch.zeros(n, dtype=torch.long, device=self.device)

    @property
    def last_episode_return(self) -> Tensor:
        """Return of each actor's last finished episode ([N] float, valid where done)."""
        return self.last_episode_length.float()

    def _initial_state(self) -> Tensor:
        u = torch.rand(self.num_envs, 4, generator=self.generator, device=self.device)
        return u.mul_(2 * RESET_BOUND).sub_(RESET_BOUND)

    def reset(self, *, seed: Optional[int] = None, task_index: Optional[Tensor] = None) -> Tensor:
        """Start every actor afresh; `seed` reseeds the generator. CartPole has no task bank, so
        `task_index` is ignored."""
        if seed is not None:
            self.generator.manual_seed(seed)
        self.state = self._initial_state()
        self.elapsed = torch.zeros_like(self.elapsed)
        return self.state.clone()

    def step(self, action: Tensor, next_task: Optional[Tensor] = None) -> StepResult:
        """Advance all actors one Euler step of 0.02 s; finished actors restart (`next_task` ignored)."""
        # before reset, and action's shape, dtype and device: checked at entry (`checked_methods`)
        action = action.to(self.device)

        x, x_dot, theta, theta_dot = self.state.unbind(1)
        force = (action == 1).float().mul_(2 * FORCE_MAG).sub_(FORCE_MAG)  # +10 for 1, -10 otherwise
        cos, sin = theta.cos(), theta.sin()
        temp = (force + POLE_MASS_LENGTH * theta_dot.square() * sin) / TOTAL_MASS
        theta_acc = (GRAVITY * sin - cos * temp) / (
            HALF_POLE_LENGTH * (4.0 / 3.0 - MASS_POLE * cos.square() / TOTAL_MASS)
        )
        x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos / TOTAL_MASS
        # Explicit Euler: positions move with the old velocities. Out of place throughout, so
        # stepping under torch.inference_mode and then outside it both work.
        final_obs = torch.stack((x_dot, x_acc, theta_dot, theta_acc), dim=1).mul_(TAU).add_(self.state)

        x, theta = final_obs[:, 0], final_obs[:, 2]
        terminated = (x.abs() > X_THRESHOLD) | (theta.abs() > THETA_THRESHOLD)
        elapsed = self.elapsed + 1
        truncated = elapsed >= self.max_episode_steps
        done = terminated | truncated
        reward = torch.ones(self.num_envs, device=self.device)

        self.last_episode_length = torch.where(done, elapsed, self.last_episode_length)
        self.elapsed = elapsed.masked_fill_(done, 0)
        # Draw a fresh start for every actor (no host sync) and keep it only where done.
        self.state = torch.where(done.unsqueeze(1), self._initial_state(), final_obs)
        return StepResult(self.state.clone(), reward, terminated, truncated, final_obs)

    def state_dict(self) -> dict[str, Any]:
        """Everything to resume exactly: physical state, step counters and the generator."""
        return {
            "num_envs": self.num_envs,
            "max_episode_steps": self.max_episode_steps,
            "seed": self.seed,
            "state": self.state.clone(),
            "elapsed": self.elapsed.clone(),
            "last_episode_length": self.last_episode_length.clone(),
            "generator": self.generator.get_state(),
            "generator_device": self.device.type,  # CPU and CUDA generator states differ in kind
            "needs_reset": not holds(self, "reset"),  # a state saved before any reset needs one after loading
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()`; the env must have the same num_envs and max_episode_steps."""
        own = self.state_dict()
        check_state("CartPoleEnv", state, own, skip=own)  # the key set; num_envs, the generator's kind, below
        for key in ("num_envs", "max_episode_steps"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"checkpoint has {key}={state[key]} but this CartPoleEnv has {key}={getattr(self, key)}: "
                    f"build the env with {key}={state[key]} to resume"
                )
        if state["generator_device"] != self.device.type:
            raise ValueError(
                f"checkpoint's generator is a {state['generator_device']} generator but this CartPoleEnv is on "
                f"{self.device.type}: build the env with device={state['generator_device']!r} to resume exactly"
            )
        check_state("CartPoleEnv", state, own)  # every tensor's dtype and shape
        self.seed = state["seed"]
        self.state = state["state"].to(self.device, torch.float32).clone()
        self.elapsed = state["elapsed"].to(self.device, torch.long).clone()
        self.last_episode_length = state["last_episode_length"].to(self.device, torch.long).clone()
        self.generator.set_state(state["generator"])
        mark(self, "reset", not state["needs_reset"])
