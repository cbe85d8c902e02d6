"""Fault injectors for the reliability tests, importable by class_path from a subprocess run
(`PYTHONPATH=tests`): a world that emits NaN, callbacks that stop, slow down or fail one rank."""

from __future__ import annotations

import os
import time

import lightning.pytorch as pl
import torch

from parlightning.callbacks.base import RolloutCallback
from parlightning.envs.swarm import SwarmEnv


class NaNSwarm(SwarmEnv):
    """SwarmEnv that puts a NaN into `where` ("reward" or "obs") of actor `actor` at its
    `at_step`-th step call (0-based, counted over the whole run)."""

    def __init__(self, num_envs: int = 8, device: str = "cpu", seed: int = 0, at_step: int = 10,
                 where: str = "reward", actor: int = 1, **kwargs) -> None:
        super().__init__(num_envs=num_envs, device=device, seed=seed, **kwargs)
        self.at_step, self.where, self.actor, self.calls = at_step, where, actor, 0

    def step(self, action, next_task=None):
        res = super().step(action, next_task)
        if self.calls == self.at_step:
            field = res.reward if self.where == "reward" else res.obs
            field[self.actor] = float("nan")
        self.calls += 1
        return res


class StopAfter(pl.Callback):
    """Ends fit after `iterations` PPO iterations, as if the run were interrupted there (the
    epoch's checkpoint is still written: ModelCheckpoint runs after this hook)."""

    def __init__(self, iterations: int = 2) -> None:
        self.iterations = iterations

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.current_epoch + 1 >= self.iterations:
            trainer.should_stop = True


class SigtermAfter(pl.Callback):
    """Sends this process a real SIGTERM at the end of PPO iteration `iterations` (before that
    iteration's checkpoint: ModelCheckpoint runs after this hook, and Lightning defers the stop to
    the iteration's end): a preemption at a known moment, so a test never races a clock."""

    def __init__(self, iterations: int = 2) -> None:
        self.iterations = iterations

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.current_epoch + 1 == self.iterations:
            import signal

            os.kill(os.getpid(), signal.SIGTERM)


class SlowRollouts(RolloutCallback):
    """Sleeps `seconds` at every rollout start, so a test can kill a run mid-way."""

    def __init__(self, seconds: float = 0.5) -> None:
        self.seconds = seconds

    def on_rollout_start(self, trainer, pl_module, round_index: int) -> None:
        time.sleep(self.seconds)


class FailOnRank(RolloutCallback):
    """Raises on rank `rank` at rollout `round_index` (the others carry on into the update)."""

    def __init__(self, rank: int = 1, round_index: int = 1) -> None:
        self.rank, self.round_index = rank, round_index

    def on_rollout_start(self, trainer, pl_module, round_index: int) -> None:
        if trainer.global_rank == self.rank and round_index == self.round_index:
            raise RuntimeError(f"injected failure on rank {self.rank} (pid {os.getpid()}) at rollout {round_index}")


class PoisonWeights(pl.Callback):
    """Sets one policy weight to NaN before minibatch `batch_idx` of iteration `iteration`."""

    def __init__(self, iteration: int = 2, batch_idx: int = 1) -> None:
        self.iteration, self.batch_idx = iteration, batch_idx

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.current_epoch == self.iteration and batch_idx == self.batch_idx:
            with torch.no_grad():
                next(pl_module.policy.parameters()).view(-1)[0] = float("nan")


class HangOnRank(RolloutCallback):
    """Rank `rank` gets stuck (sleeps for an hour) at rollout `round_index`: a hung worker."""

    def __init__(self, rank: int = 1, round_index: int = 1) -> None:
        self.rank, self.round_index = rank, round_index

    def on_rollout_start(self, trainer, pl_module, round_index: int) -> None:
        if trainer.global_rank == self.rank and round_index == self.round_index:
            time.sleep(3600)


# ---------------------------------------------------------------------------------- user worlds that break the contract
class TinyEnv:
    """A minimal correct BatchedEnv (2 discrete actions, 3 features); subclasses break one promise."""

    def __init__(self, num_envs: int = 4, device: str = "cpu", seed: int = 0) -> None:
        self.num_envs, self.device = num_envs, torch.device(device)
        self.observation_shape = (3,)
        from parlightning.envs.base import ActionSpec

        self.action_spec = ActionSpec("discrete", nvec=(2,))

    def _obs(self):
        return torch.zeros(self.num_envs, 3)

    def reset(self, *, seed=None, task_index=None):
        return self._obs()

    def step(self, action, next_task=None):
        from parlightning.envs.base import StepResult

        n = self.num_envs
        obs = self._obs()
        return StepResult(obs, self._reward(), torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool), obs)

    def _reward(self):
        return torch.ones(self.num_envs)

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        return None


class WrongObsShapeEnv(TinyEnv):
    """Declares 3 features, returns 5."""

    def _obs(self):
        return torch.zeros(self.num_envs, 5)


class WrongObsDtypeEnv(TinyEnv):
    """Returns float64 observations."""

    def _obs(self):
        return torch.zeros(self.num_envs, 3, dtype=torch.float64)


class WrongRewardShapeEnv(TinyEnv):
    """Returns a [N, 1] reward."""

    def _reward(self):
        return torch.ones(self.num_envs, 1)


class NumpyResetEnv(TinyEnv):
    """`reset` returns a numpy array."""

    def reset(self, *, seed=None, task_index=None):
        import numpy as np

        return np.zeros((self.num_envs, 3), dtype=np.float32)


def make_tiny_env(num_envs, device, seed):  # no return annotation: jsonargparse cannot tell it builds a BatchedEnv
    return TinyEnv(num_envs, device, seed)


def make_tiny_env_annotated(num_envs: int, device: str, seed: int) -> TinyEnv:
    return TinyEnv(num_envs, device, seed)


class MarkStarted(RolloutCallback):
    """Writes `<dir>/rank<R>.pid` (this rank's pid) at this rank's first rollout, so a test can signal
    a rank that is known to be training (no guessing at start-up time)."""

    def __init__(self, directory: str = ".") -> None:
        self.directory = directory

    def on_rollout_start(self, trainer, pl_module, round_index: int) -> None:
        path = os.path.join(self.directory, f"rank{trainer.global_rank}.pid")
        if not os.path.exists(path):
            with open(path + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(path + ".tmp", path)


def sync_as_ranks(samplers, timeout=60):
    """Call every sampler's `sync(reduce_sum)` as if each were a DDP rank: one thread per sampler,
    meeting in an all-reduce (SUM) that a barrier makes, as `trainer.strategy.reduce` would."""
    import threading

    barrier, inbox = threading.Barrier(len(samplers)), [None] * len(samplers)

    def reduce_for(rank):
        def reduce(t):
            inbox[rank] = t.clone()
            barrier.wait()
            total = sum(inbox)
            barrier.wait()
            return total
        return reduce

    threads = [threading.Thread(target=s.sync, args=(reduce_for(r),)) for r, s in enumerate(samplers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=timeout)


class DeadlockOnRank(MarkStarted):
    """Writes the marker files (as `MarkStarted`), then rank `rank` deadlocks at rollout `round_index`:
    its main thread waits for a lock it already holds (alive, not stopped, never progressing).
    With `declared` > 0 it first sits `slow` seconds on one line inside `expected_wait(declared)` (a
    legitimately slow call), which must not count as stuck."""

    def __init__(self, directory: str = ".", rank: int = 1, round_index: int = 2, declared: float = 0.0,
                 slow: float = 0.0) -> None:
        super().__init__(directory)
        self.rank, self.round_index, self.declared, self.slow = rank, round_index, declared, slow

    def declared_slow_call(self) -> None:
        from parlightning.runtime.waits import expected_wait

        with expected_wait(self.declared, "the test's slow call"):
            time.sleep(self.slow)

    def on_rollout_start(self, trainer, pl_module, round_index: int) -> None:
        super().on_rollout_start(trainer, pl_module, round_index)
        if trainer.global_rank == self.rank and round_index == self.round_index:
            import threading

            if self.declared:
                self.declared_slow_call()
                with open(os.path.join(self.directory, "slow_call_done"), "w"):
                    pass
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()  # never returns


class RecordRanks(pl.Callback):
    """Appends one JSON line per PPO iteration to `<dir>/rank<R>.jsonl`: this rank's optimizer steps,
    env seed, its own rollout's episodes, outcomes and sample lags (read from the buffer it trained
    on), and the values its rollout logged (before Lightning's mean over ranks)."""

    def __init__(self, directory: str = ".") -> None:
        self.directory = directory

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        import json

        dm = trainer.datamodule
        rollout = dm.last_rollout
        buf = rollout.buffer
        lags = rollout.round_index - buf.versions
        keep = buf.sample_mask if buf.sample_mask is not None else torch.ones_like(lags, dtype=torch.bool)
        ep = rollout.episodes
        record = {
            "rank": trainer.global_rank, "round": rollout.round_index, "global_step": trainer.global_step,
            "env_seed": dm.collector.loop.env_seed, "env_steps": dm.env_steps,
            "episodes": int(rollout.episode_return.numel()),
            "outcome_sum": float(ep.outcome.sum()) if ep is not None else 0.0,
            "kept": int(keep.sum()), "lag_sum": int(lags[keep].sum()), "lag_max": int(lags[keep].max()),
            "logged": {k: float(v) for k, v in rollout.stats.items()},
        }
        with open(os.path.join(self.directory, f"rank{trainer.global_rank}.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")
