"""Example of a user's own task sampler: hardest-first, two methods, no base class.

Copy and adapt it; name it in the YAML config:

    data:
      sampler:
        class_path: parlightning.examples.hardest_first.HardestFirst

The data module wraps it with `parlightning.distribution.samplers.as_batched`, which asks `pick` for a queue
of tasks at each round and replays finished episodes into `record` at rollout end.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence


class HardestFirst:
    """Picks the shard task with the lowest mean score so far (untried tasks first; ties go to
    the task picked least, so a round's queue spreads over equally hard tasks).

    A caveat worth measuring: "hardest" includes tasks the policy can never solve, which carry
    no learning signal; `DifficultyWeighted` / `PosteriorSignal` aim at the informative middle.
    """

    name = "hardest-first"

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one instance may be shared by threads: guard the state
        self.score_sum: dict[str, float] = {}
        self.count: dict[str, int] = {}
        self.picked: dict[str, int] = {}

    def _mean(self, task_id: str) -> float:
        n = self.count.get(task_id, 0)
        return -1.0 if n == 0 else self.score_sum[task_id] / n  # untried sorts first

    def pick(self, keys: Sequence[str], round_index: int) -> str:
        """One id from `keys` (never mutated): lowest mean score, then fewest picks."""
        if len(keys) == 0:
            raise ValueError("HardestFirst.pick: the shard is empty; give it at least one task id")
        with self._lock:
            task_id = min(keys, key=lambda k: (self._mean(k), self.picked.get(k, 0)))
            self.picked[task_id] = self.picked.get(task_id, 0) + 1
        return task_id

    def record(self, task_id: str, score: float) -> None:
        """What one rollout of `task_id` scored, in 0..1."""
        with self._lock:
            self.score_sum[task_id] = self.score_sum.get(task_id, 0.0) + float(score)
            self.count[task_id] = self.count.get(task_id, 0) + 1

    # optional: checkpoints (plain containers, so torch.load(weights_only=True) reads them)
    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return {"score_sum": dict(self.score_sum), "count": dict(self.count), "picked": dict(self.picked)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self.score_sum = dict(state.get("score_sum", {}))
            self.count = dict(state.get("count", {}))
            self.picked = dict(state.get("picked", {}))
