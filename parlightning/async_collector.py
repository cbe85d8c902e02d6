"""`AsyncCollector`: rollout collection without a barrier, under a lag budget of k policy updates
(`data.max_policy_lag: k`), the schedule where workers keep producing while one learner updates.

How it runs. A background thread steps the rank's env with its own copy of the policy (the
behaviour policy) while the learner trains on the previous rollout. The learner *releases*
rounds: at its v-th rollout (after v updates) it publishes its weights as version v and
releases every round j <= v + k (calling `on_rollout_start(j)` for it, so the planner's shard
and λ are set in the learner thread, k rounds ahead). The thread starts round j only once it is
released (that wait is `perf/collector_wait_frac`), loads the newest published weights before
every env step, and stamps each step with the version it used. Round j is trained after j
updates, so every sample is at most k versions old (checked on every rollout). Everything
that touches the trainer (rollout hooks, sampler records, DDP collectives, GAE with the PARL
bonus, logging) runs in the learner thread; the collector thread only steps the env, so under
DDP each rank runs its own collector and the ranks issue the same collectives in the same order.
A thread by default: the env and the behaviour policy then share memory with the learner, an
external world's waits release the GIL, and tensor ops release it while they compute; but the
loop's many small torch calls still take the learner's GIL, so `data.collect_in: process`
(`parlightning.process_collector.ProcessCollector`) runs this same loop in a child process.

Staleness correction: decoupled PPO (Hilton et al. 2021, "Batch size-invariance for policy
optimization") with truncated importance weights (IMPACT, V-trace's rho-bar). At the start of
the update the learner scores the rollout with its own current policy pi_prox; the clipped ratio
is pi_theta / pi_prox (`logprobs` in the batch), and each sample's surrogate is weighted by
w = min(pi_prox / mu, `weight_clip`) with mu the behaviour policy that acted. Clipping against mu
instead would put stale samples outside the trust region before the first gradient step (no
learning from them) or let the update run off; the weights correct the sampling distribution
and the truncation bounds their variance. Advantages use the behaviour-time values (GAE at most
k updates old): V-trace targets would also correct them, at the price of a value pass per
update; with k <= 2 the correction of the action distribution is the part that matters.

Checkpoints: the saved env state is the collector's, taken between two steps, and the counters
are the learner's; resuming loses the rounds in flight (at most k rollouts, collected but not
trained), which are collected afresh: a warning says so on load. Recurrent policies are refused.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Iterator, Optional

import torch
from torch import Tensor

from parlightning.buffer import RolloutBuffer
from parlightning.callbacks.base import rollout_callbacks
from parlightning.collector import SyncCollector, _value
from parlightning.errors import ConfigError
from parlightning.rollout import Rollout

if TYPE_CHECKING:
    from parlightning.data import RolloutDataModule


class StampedBuffer(RolloutBuffer):
    """A rollout buffer whose every sample carries its policy version (`versions` [T, N]) and,
    once the learner has scored it, the proximal log-probs and truncated importance weights."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.versions = torch.zeros(self.num_steps, self.num_envs, dtype=torch.long, device=self.device)
        self.prox_logprobs: Optional[Tensor] = None
        self.is_weights: Optional[Tensor] = None

    def flat(self) -> dict[str, Tensor]:
        flat = super().flat()
        B = self.num_steps * self.num_envs
        flat["versions"] = self.versions.reshape(B)
        if self.prox_logprobs is not None:  # the ratio is taken against the proximal policy
            flat["behaviour_logprobs"] = flat["logprobs"]
            flat["logprobs"] = self.prox_logprobs.reshape(B)
            flat["is_weights"] = self.is_weights.reshape(B)
        return flat


class AsyncCollector(SyncCollector):
    """Collects in a background thread under a lag budget of `max_lag` updates; see the module
    docstring. `weight_clip` truncates the importance weights pi_prox / mu."""

    weight_clip = 1.0
    join_timeout = 10.0  # seconds `close` waits for the thread (it may be inside a slow env step)

    def __init__(self, dm: "RolloutDataModule", device: torch.device, rank: int = 0, max_lag: int = 1) -> None:
        if isinstance(max_lag, bool) or not isinstance(max_lag, int) or max_lag < 1:
            raise ConfigError(f"data.max_policy_lag: AsyncCollector needs an integer >= 1, got {max_lag!r}")
        super().__init__(dm, device, rank)
        self.max_lag = max_lag
        self.behaviour: Optional[torch.nn.Module] = None  # the thread's copy of the policy
        # The sampler (and what rollout hooks touch): the thread holds it only while it picks tasks, so
        # the learner's hooks and sampler records never wait for a slow env step to end.
        self._lock = threading.RLock()
        self._step_lock = threading.Lock()  # env, observations and counters: held over each whole env step
        self._in_hooks = 0  # > 0 while the learner holds `_lock` (rollout hooks, sampler records)
        self._weights_lock = threading.Lock()
        self._published: Optional[dict[str, Tensor]] = None
        self._published_version = -1
        self._behaviour_version = -1
        self._tickets: queue.Queue = queue.Queue()  # (round, shard) released by the learner; None stops
        self._ready: queue.Queue = queue.Queue()  # finished rounds, or ("error", exception)
        self._thread: Optional[threading.Thread] = None
        self._released = 0  # next round to release
        self._closed = False
        self._round = 0  # the round the thread is collecting (its picks' round index)
        self._round_shard: Optional[Tensor] = None
        self._last_collect_start: Optional[float] = None
        self._learner_wait = 0.0

    def bind_memory(self, policy: torch.nn.Module) -> None:
        raise ConfigError("data.max_policy_lag: asynchronous collection does not support recurrent policies; "
                          "use model.policy: mlp or data.max_policy_lag: 0")

    # ------------------------------------------------------------------ learner side
    def _publish(self, policy: torch.nn.Module, version: int) -> None:
        snapshot = {k: v.detach().clone() for k, v in policy.state_dict().items()}
        with self._weights_lock:
            self._published, self._published_version = snapshot, version

    @contextlib.contextmanager
    def _learner_lock(self) -> Iterator[None]:
        with self._lock:
            self._in_hooks += 1
            try:
                yield
            finally:
                self._in_hooks -= 1

    def _release(self, trainer: Any, module: Any, upto: int) -> None:
        """Release rounds up to `upto`: their `on_rollout_start` hooks run here, in the learner thread."""
        while self._released <= upto:
            j = self._released
            with self._learner_lock():
                for cb in rollout_callbacks(trainer):
                    cb.on_rollout_start(trainer, module, j)
                shard = self.shard.clone() if self.shard is not None else None
            self._issue(j, shard)
            self._released += 1

    def _issue(self, round_j: int, shard: Optional[Tensor]) -> None:
        """Hand round j (and the shard its picks draw from) to the collector."""
        self._tickets.put((round_j, shard))

    def _start_collecting(self, policy: torch.nn.Module) -> None:
        """First rollout: the behaviour policy (a copy of the learner's) and the collector thread."""
        self.behaviour = copy.deepcopy(policy).requires_grad_(False)
        self._thread = threading.Thread(target=self._loop, name=f"async-collector-rank{self.rank}", daemon=True)
        self._thread.start()

    def collect(self) -> Rollout:
        """The next rollout, at most `max_lag` updates stale, post-processed and scored for the update."""
        dm = self.dm
        trainer = dm.trainer
        module = trainer.lightning_module if trainer is not None else None
        policy = module.policy
        version = dm.round_index  # updates the learner's policy has had
        call_start = time.perf_counter()
        iteration_time = None if self._last_collect_start is None else call_start - self._last_collect_start
        self._last_collect_start = call_start
        self._publish(policy, version)
        if self._thread is None:
            self._released = dm.round_index
            self._start_collecting(policy)
        self._release(trainer, module, version + self.max_lag)
        item = self._wait()
        wait = time.perf_counter() - call_start
        round_j, buf, step_versions, next_value, truncated_values, rollout_time, collector_wait_frac = item
        if round_j != dm.round_index:
            raise RuntimeError(f"AsyncCollector: got round {round_j}, expected {dm.round_index}")
        lags = [version - b for b in step_versions]
        if max(lags) > self.max_lag or min(lags) < 0:
            raise RuntimeError(f"AsyncCollector: policy lag {max(lags)} exceeds data.max_policy_lag={self.max_lag}")
        rollout = self._finish(trainer, module, buf, next_value, truncated_values, rollout_time, iteration_time,
                               min(step_versions))
        self._score(policy, buf)
        stats = rollout.stats
        stats["perf/policy_lag"] = torch.tensor(sum(lags) / len(lags))
        stats["perf/policy_lag_max"] = torch.tensor(float(max(lags)))
        if iteration_time is not None:
            stats["perf/learner_wait_frac"] = torch.tensor(min(self._learner_wait / iteration_time, 1.0))
        stats["perf/collector_wait_frac"] = torch.tensor(collector_wait_frac)
        self._learner_wait = wait  # counted against the iteration it starts
        for cb in rollout_callbacks(trainer):
            cb.on_rollout_end(trainer, module, rollout)
        dm.last_rollout = rollout
        dm.round_index += 1
        return rollout

    def _wait(self) -> tuple:
        while True:
            try:
                item = self._ready.get(timeout=0.5)
            except queue.Empty:
                if self._thread is None or not self._thread.is_alive():
                    self.close()
                    raise RuntimeError("AsyncCollector: the collector thread stopped without a rollout") from None
                continue
            if item[0] == "error":
                self.close()  # end the env's worker processes before the error ends the run
                raise item[1]
            return item

    def _finish(self, trainer: Any, module: Any, buf: StampedBuffer, next_value: Tensor, truncated_values: Tensor,
                rollout_time: float, iteration_time: Optional[float], behaviour_version: int) -> Rollout:
        """What SyncCollector does after the step loop (hooks, sampler, PARL bonus, GAE, stats),
        in the learner thread; the thread's picks wait meanwhile (the sampler is shared)."""
        dm = self.dm
        callbacks = rollout_callbacks(trainer)
        done = buf.done
        with self._learner_lock():  # the collector thread picks tasks from the same sampler
            episodes = self._finish_episodes(buf, trainer, module, callbacks)
        buf.compute_advantages(next_value, truncated_values, dm.gamma, dm.gae_lambda)
        steps = self.num_envs * self.num_steps * dm.world_size
        dm.env_steps += steps
        rollout = Rollout(
            round_index=dm.round_index, buffer=buf, episode_return=buf.episode_return[done],
            episode_length=buf.episode_length[done], episodes=episodes, env_steps=dm.env_steps,
            policy_version=behaviour_version,  # in PPO updates: the oldest weights that acted in it
        )
        rollout.stats.update(self._stats(rollout, steps, rollout_time, iteration_time))
        return rollout

    def _score(self, policy: torch.nn.Module, buf: StampedBuffer) -> None:
        """Proximal log-probs of the stored actions under the learner's current policy, and the
        truncated importance weights min(pi_prox / mu, weight_clip)."""
        keyed = {"key": buf.keys.reshape(-1)} if buf.keys is not None else {}
        B = self.num_steps * self.num_envs
        if buf.masks is not None:  # the proximal log-prob under the same action masks as the behaviour's
            keyed["mask"] = buf.masks.reshape(B, -1)
        with torch.no_grad():
            prox, _, _ = policy.evaluate(buf.obs.reshape(B, *buf.obs.shape[2:]),
                                         buf.actions.reshape(B, *buf.actions.shape[2:]), **keyed)
        prox = prox.reshape(self.num_steps, self.num_envs)
        buf.prox_logprobs = prox
        buf.is_weights = (prox - buf.logprobs).exp().clamp(max=self.weight_clip)

    # ------------------------------------------------------------------ collector thread
    def _refresh(self) -> None:
        """Load the newest published weights into the behaviour policy (a Python int compare when none)."""
        if self._published_version == self._behaviour_version:
            return
        with self._weights_lock:
            weights, version = self._published, self._published_version
        self.behaviour.load_state_dict(weights)
        self._behaviour_version = version

    def _pick(self, reset_mask: Tensor) -> Tensor:
        generator = getattr(self, "task_generator", self.action_generator)  # the sampler's own stream where there is one
        with self._lock:  # the learner records episodes into the same sampler
            picked = self.sampler.pick_batch(self._round_shard, self._round, reset_mask, generator)
            self.current_task = torch.where(reset_mask, picked, self.current_task)
        return picked

    def _loop(self) -> None:
        try:
            last_end = time.perf_counter()
            while True:
                t0 = time.perf_counter()
                ticket = self._tickets.get()
                waited = time.perf_counter() - t0
                if ticket is None or self._closed:
                    return
                self._round, self._round_shard = ticket
                start = time.perf_counter()
                item = self._collect_round(ticket[0])
                end = time.perf_counter()
                self._ready.put((*item, end - start, waited / max(end - last_end, 1e-9)))
                last_end = end
        except BaseException as err:  # handed to the learner, which raises it
            self._ready.put(("error", err))

    def _collect_round(self, round_j: int) -> tuple:
        spec = self.env.action_spec
        buf = StampedBuffer(self.num_steps, self.num_envs, tuple(self.env.observation_shape), spec.action_shape,
                            self.device, torch.long if spec.is_discrete else torch.float32)
        self.buffer = buf
        policy, key_row = self.behaviour, self.dm.key_row
        picker = self._pick if self.sampler is not None else None
        step_versions = []
        for t in range(self.num_steps):
            if self._closed:
                raise RuntimeError("AsyncCollector: closed while collecting")
            self._refresh()
            if self._behaviour_version < round_j - self.max_lag:
                raise RuntimeError(f"AsyncCollector: round {round_j} released before weights of version "
                                   f"{round_j - self.max_lag}")
            step_versions.append(self._behaviour_version)
            with self._step_lock, torch.inference_mode():
                buf.versions[t].fill_(self._behaviour_version)
                self.obs = self._step(t, policy, self.obs, picker)
        with torch.inference_mode():  # bootstrap values from the behaviour policy that acted last
            keyed = key_row is not None
            next_value = _value(policy, self.obs, key_row[self.current_task] if keyed else None)
            truncated_values = torch.zeros_like(buf.values)
            where = buf.truncated.nonzero(as_tuple=True)
            if where[0].numel():
                truncated_values[where] = _value(policy, buf.final_obs[where], buf.keys[where] if keyed else None)
        self._check_finite(buf)
        return round_j, buf, step_versions, next_value, truncated_values

    # ------------------------------------------------------------------ state and shutdown
    def state_dict(self) -> dict[str, Any]:
        if self._in_hooks:  # written from a rollout hook: the thread may be waiting mid-step for the lock held here
            return super().state_dict()
        with self._step_lock:  # between two env steps of the thread (it touches the sampler only inside a step)
            return super().state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        warnings.warn(
            f"data.max_policy_lag={self.max_lag}: resuming from a checkpoint loses the rollouts that were in flight "
            f"when it was written (at most {self.max_lag}, collected but not trained on); they are collected afresh",
            stacklevel=2,
        )

    def close(self) -> None:
        """Stop the thread (after its current env step) and close the env (ending its worker processes)."""
        if self._closed:
            return
        self._closed = True
        self._tickets.put(None)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.join_timeout)  # a hung world: give up on it; closing the env ends its processes
        super().close()
