"""`CueMemoryEnv`: the smallest task that needs memory, as batched tensor ops.

A cue (one of `n_cues`) is shown only on an episode's first observation; `delay` blank steps later
a query asks for it, and the action then earns 1 if it names the cue, 0 otherwise. A memoryless
policy sees the same query observation whatever the cue, so it cannot beat 1/n_cues on average;
a recurrent one can reach 1. The evidence for recurrent policies (scripts/recurrent_vs_mlp.py).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor

from parlightning.config_types import PositiveInt, Seed, check_allocation, check_args, restricted_number_type
from parlightning.envs.base import ActionSpec, BatchedEnv, StepResult, checked_device, world_lifecycle, world_specs
from parlightning.method_args import check_state, checked_methods

# the cues size every observation (a one-hot of n_cues) and the action head: a count, capped as every tensor size is
Cues = restricted_number_type("Cues", int, [(">=", 2), ("<=", 10**6)], docstring="the number of cues, 2..10**6")
# an episode is delay + 1 steps: a million blank steps is far past what any rollout or BPTT chunk can span
Delay = restricted_number_type("Delay", int, [(">=", 0), ("<=", 10**6)], docstring="blank steps, 0..10**6")


@checked_methods(**world_specs(), lifecycle=world_lifecycle())
class CueMemoryEnv(BatchedEnv):
    """N actors, each episode `delay + 1` steps: observation `[n_cues + 1]` = one-hot cue at step 0,
    the query flag (last entry) at step `delay`, zeros between. Action: discrete `n_cues`, scored
    only at the query step (which terminates the episode). Fresh cues come from the env's own seeded
    generator; the first three parameters are the data module's env factory order."""

    checkpoint_exact = True

    def __init__(self, num_envs: PositiveInt, device: str | torch.device = "cpu", seed: Seed = 0,
                 n_cues: Cues = 2, delay: Delay = 4) -> None:
        num_envs, seed, n_cues, delay = check_args("CueMemoryEnv", CueMemoryEnv.__init__, locals()).values()
        self.device = checked_device("CueMemoryEnv.device", device)
        # per actor and cue: the one-hot (int64), its float copy, the masked copy and the concatenation (float32)
        check_allocation(f"CueMemoryEnv(num_envs={num_envs}, n_cues={n_cues})", (8 + 4 * 3) * num_envs * (n_cues + 1),
                         self.device, "lower n_cues or num_envs")
        self.num_envs, self.n_cues, self.delay = num_envs, n_cues, delay
        self.observation_shape = (n_cues + 1,)
        self.action_spec = ActionSpec("discrete", nvec=(n_cues,))
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.cue = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.elapsed = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def _draw(self) -> Tensor:
        return torch.randint(self.n_cues, (self.num_envs,), generator=self.generator, device=self.device)

    def _observe(self, cue: Tensor, elapsed: Tensor) -> Tensor:
        """[N, n_cues + 1]: the cue's one-hot where elapsed == 0, the query flag where elapsed == delay."""
        shown = torch.nn.functional.one_hot(cue, self.n_cues).float() * (elapsed == 0).unsqueeze(1)
        return torch.cat((shown, (elapsed == self.delay).float().unsqueeze(1)), 1)

    def reset(self, *, seed: Optional[int] = None, task_index: Optional[Tensor] = None) -> Tensor:
        """Start every actor on a fresh cue (no task bank: `task_index` is ignored)."""
        if seed is not None:
            self.generator.manual_seed(seed)
        self.cue = self._draw()
        self.elapsed = torch.zeros_like(self.elapsed)
        return self._observe(self.cue, self.elapsed)

    def step(self, action: Tensor, next_task: Optional[Tensor | Callable[[Tensor], Tensor]] = None) -> StepResult:
        """Score the query step, advance the clock and restart finished actors on a fresh cue."""
        query = self.elapsed == self.delay
        reward = (query & (action == self.cue)).float()
        elapsed = self.elapsed + 1
        final_obs = self._observe(self.cue, elapsed)
        self.cue = torch.where(query, self._draw(), self.cue)  # drawn for all, kept where done: no host sync
        self.elapsed = elapsed.masked_fill(query, 0)
        return StepResult(self._observe(self.cue, self.elapsed), reward, query, torch.zeros_like(query), final_obs)

    def state_dict(self) -> dict[str, Any]:
        return {"cue": self.cue.clone(), "elapsed": self.elapsed.clone(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` of a CueMemoryEnv with the same num_envs (a ConfigError naming the key
        otherwise, before anything is loaded)."""

        check_state("CueMemoryEnv", state, self.state_dict(),
                    hint=f" (num_envs={self.num_envs}); load it into a CueMemoryEnv built with the num_envs it was "
                         "saved from")
        self.cue = state["cue"].to(self.device).clone()
        self.elapsed = state["elapsed"].to(self.device).clone()
        self.generator.set_state(state["generator"])
