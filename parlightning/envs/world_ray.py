"""`RayWorlds`: the N external worlds spread over Ray actors (contiguous blocks of actors, a
`WorldRunner` in each: a thread per sync world, one event loop for `async def` worlds), with
`WorldRunner`'s interface (`facts`, `run_all`, `close`, `pids`), so rollout workers (worlds and
their subagent pools) scale past one machine, independently of the trainer's ranks.

`ExternalBatchedEnv(runner="ray", workers=P)` uses it: P Ray actors (`workers: 0` means one).
Ray connects to the cluster named by `RAY_ADDRESS` (or one already initialised in this process),
else starts a local one. Each actor builds its own `shared` resources from their specs (a pool's
limits apply per actor) and asks Ray for `num_cpus: 0` (worlds mostly wait; say otherwise with
`actor_options`), spread over the cluster's nodes. The error contract is `WorkerProcesses'`: a
world that raises or hangs is reported by its actor as the actor index and why; an actor that
dies or stops answering ends the call naming the block of actors it ran. `ray` is an optional
extra: `pip install .[ray]`.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping, Optional

from parlightning.envs.world_runner import WorldCallFailed, WorldRunner, build_shared, close_all, facts_disagreement, resolve
from parlightning.errors import ConfigError
from parlightning.runtime.waits import expected_wait

_READY_TIMEOUT = 300.0  # seconds an actor may take to be scheduled, import and build its worlds


def import_ray() -> Any:
    """ray, or one ConfigError naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise ConfigError("data.env.init_args.runner: ray needs the ray package, which is not installed: "
                          "pip install 'parlightning[ray]' (in a checkout: pip install .[ray]), or use "
                          "runner: local (threads here, or worker processes with workers: P)") from None
    return ray


class WorldBlock:
    """The body of one Ray actor: the worlds of `actors` and their shared resources."""

    def __init__(self, world: Any, world_kwargs: Mapping[str, Any], shared: Optional[Mapping[str, Any]],
                 actors: list[int], seed: int, step_timeout: float, retries: int) -> None:
        self.resources: dict[str, Any] = {}
        self.runner: Optional[WorldRunner] = None
        self.error: Optional[str] = None
        try:
            factory = resolve(world, "data.env.world") if isinstance(world, str) else world
            self.resources = build_shared(shared)
            self.runner = WorldRunner(factory, {**world_kwargs, **self.resources}, actors, seed, step_timeout, retries)
        except Exception as err:  # reported by `facts`, so the driver raises one clear error
            close_all(list(self.resources.values()))
            self.error = f"{err}" if isinstance(err, ConfigError) else f"{type(err).__name__}: {err}"

    def facts(self) -> tuple[str, Any]:
        if self.runner is None:
            return "error", self.error
        return "ready", self.runner.facts()

    def run_all(self, method: str, args: Mapping[int, tuple]) -> tuple[str, Any]:
        try:
            return "ok", self.runner.run_all(method, args)
        except WorldCallFailed as failed:
            return "failed", (failed.actor, failed.method, failed.why)

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
        close_all(list(self.resources.values()))


class RayWorlds:
    """`WorldRunner`'s interface over `workers` Ray actors (1 <= workers <= num_envs).

    Args:
        world, world_kwargs, shared, seed, step_timeout, retries: as `ExternalBatchedEnv`'s
            (sent to the actors with Ray's serializer; `shared` resources are built in each actor).
        actor_options: Ray's `.options(...)` for every actor (default `num_cpus: 0`, spread).
    """

    def __init__(self, world: Any, world_kwargs: Mapping[str, Any], shared: Optional[Mapping[str, Any]],
                 num_envs: int, workers: int, seed: int, step_timeout: float, retries: int,
                 actor_options: Optional[Mapping[str, Any]] = None) -> None:
        ray = import_ray()
        for name, spec in (shared or {}).items():
            if not isinstance(spec, Mapping):
                raise ConfigError(f"data.env.init_args.shared.{name}: with runner: ray a shared resource is built in "
                                  "each Ray actor: give it as {class_path, init_args}, not ready-made")
        if not ray.is_initialized():
            ray.init(include_dashboard=False)  # RAY_ADDRESS names a cluster; without it, a local Ray
        self._ray = ray
        self.step_timeout, self.retries = step_timeout, retries
        workers = max(1, min(workers, num_envs))
        bounds = [num_envs * w // workers for w in range(workers + 1)]
        self.blocks = [list(range(bounds[w], bounds[w + 1])) for w in range(workers)]
        self._owner = {i: w for w, block in enumerate(self.blocks) for i in block}
        options = {"num_cpus": 0, "scheduling_strategy": "SPREAD", **dict(actor_options or {})}
        remote = ray.remote(WorldBlock).options(**options)
        self._actors = [remote.remote(world, dict(world_kwargs), dict(shared or {}), block, seed, step_timeout,
                                      retries) for block in self.blocks]
        self._closed = False
        self._facts: Optional[dict] = None
        try:
            answers = self._get([a.facts.remote() for a in self._actors], "start", _READY_TIMEOUT)
        except WorldCallFailed as failed:
            self.close()
            raise ConfigError(f"data.env.init_args.runner: ray: {failed.why} while starting") from None
        for w, (status, value) in enumerate(answers):
            if status == "error":
                self.close()
                raise ConfigError(value)
            if self._facts is None:
                self._facts = value
            why = facts_disagreement(str(value.get("world_name", "world")), self.blocks[0][0], self._facts,
                                     self.blocks[w][0], value)
            if why is not None:  # (each actor compared its own worlds with its first)
                self.close()
                raise ConfigError(why)
        self.pids = self._get([a.pid.remote() for a in self._actors], "start", _READY_TIMEOUT)

    def _span(self, w: int) -> str:
        block = self.blocks[w]
        return f"{block[0]}-{block[-1]}"

    def _get(self, refs: list, method: str, timeout: float, workers: Optional[list[int]] = None) -> list:
        """Every answer of `refs` (one per worker in `workers`), or WorldCallFailed naming the block."""
        ray = self._ray
        workers = list(range(len(refs))) if workers is None else workers
        with expected_wait(timeout, f"the Ray world actors' {method}"):
            ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        if pending:
            w = workers[refs.index(pending[0])]
            raise WorldCallFailed(self.blocks[w][0], method, f"Ray actor {w} (actors {self._span(w)}) stopped "
                                                            f"answering for {timeout:g}s")
        out = []
        for w, ref in zip(workers, refs):
            try:
                out.append(ray.get(ref))
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as err:
                why = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(err)).split())[:600]
                hint = (" (the world, its arguments and shared resources must import on the Ray workers: install "
                        "your package there or pass ray.init(runtime_env=...))" if "deserializ" in why else "")
                raise WorldCallFailed(self.blocks[w][0], method, f"Ray actor {w} (actors {self._span(w)}) died or "
                                                                f"failed: {type(err).__name__}: {why}{hint}") from None
        return out

    def facts(self) -> dict[str, Any]:
        return dict(self._facts)

    def run_all(self, method: str, args: Mapping[int, tuple]) -> dict[int, Any]:
        """Send each actor its worlds' calls, then collect every answer (or the first failure)."""
        if not args:
            return {}
        per_worker: dict[int, dict[int, tuple]] = {}
        for i, a in args.items():
            per_worker.setdefault(self._owner[i], {})[i] = a
        workers = list(per_worker)
        refs = [self._actors[w].run_all.remote(method, per_worker[w]) for w in workers]
        # the actors time each call out themselves; this is the backstop for an actor that hangs or dies
        answers = self._get(refs, method, self.step_timeout * (self.retries + 1) + 10.0, workers)
        results: dict[int, Any] = {}
        for status, value in answers:
            if status == "failed":
                raise WorldCallFailed(*value)
            results.update(value)
        return results

    def close(self) -> None:
        """Close every actor's worlds and shared resources, then end the actors; idempotent."""
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        try:
            ray.wait([a.close.remote() for a in self._actors], num_returns=len(self._actors), timeout=10.0)
        except Exception:
            pass
        for actor in self._actors:
            try:
                ray.kill(actor)
            except Exception:
                pass
        self._actors = []
