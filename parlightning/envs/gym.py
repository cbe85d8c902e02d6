"""`GymVectorEnv`: any Gymnasium env, vectorized by `gymnasium.make_vec`, behind `BatchedEnv`.

Bring your own environment: pass a registered env id. Observations come back as float32
tensors on `device`; actions go in as tensors. Gymnasium runs on the host in numpy, so every
step crosses host and device once (that is the price of the adapter; `CartPoleEnv` shows the
tensor-native alternative). Gymnasium is an optional extra: `pip install parlightning[gym]`.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from parlightning.config_types import PositiveInt, Seed, check_args
from parlightning.envs.base import ActionArg, ActionSpec, BatchedEnv, StepResult, checked_device, world_lifecycle, world_specs
from parlightning.method_args import check_state, checked_methods
from parlightning.errors import ConfigError

_VECTORIZATIONS = ("sync", "async", "vector_entry_point")


def _uniform_bound(values: np.ndarray) -> Optional[float]:
    """The one finite value shared by every dimension of a Box bound, else None."""
    first = float(values.flat[0])
    if np.isfinite(first) and np.all(values == first):
        return first
    return None


def action_spec_of(space: Any) -> tuple[ActionSpec, Optional[np.ndarray]]:
    """The `ActionSpec` for one actor's Gymnasium action space, and the offset (`start`) to add
    to the policy's 0-based indices for discrete spaces."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return ActionSpec("discrete", nvec=(int(space.n),)), np.asarray(space.start, dtype=np.int64)
    if isinstance(space, spaces.MultiDiscrete):
        if space.nvec.ndim != 1:
            raise ValueError(
                f"GymVectorEnv supports 1-D MultiDiscrete action spaces, got nvec shape {space.nvec.shape}: "
                "flatten the action space with a wrapper"
            )
        nvec = tuple(int(n) for n in space.nvec)
        return ActionSpec("multi_discrete", nvec=nvec), np.asarray(space.start, dtype=np.int64)
    if isinstance(space, spaces.Box):
        spec = ActionSpec(
            "continuous", shape=tuple(space.shape), low=_uniform_bound(space.low), high=_uniform_bound(space.high)
        )
        return spec, None
    raise ValueError(
        f"GymVectorEnv supports Discrete, MultiDiscrete and Box action spaces, got {space}: "
        "wrap the env to expose one of them"
    )


def resolve_wrappers(wrappers: Optional[Sequence[Any]]) -> Optional[list[Callable[..., Any]]]:
    """Gymnasium wrappers given as callables or import paths (`gymnasium.wrappers.FlattenObservation`,
    settable from YAML), as callables."""
    if wrappers is None:
        return None
    if isinstance(wrappers, (str, bytes)) or callable(wrappers):
        wrappers = [wrappers]
    out = []
    for w in wrappers:
        if isinstance(w, str):
            module, _, name = w.rpartition(".")
            try:
                w = getattr(importlib.import_module(module), name) if module else None
            except (ImportError, AttributeError):
                w = None
            if w is None:
                raise ConfigError(f"wrappers: cannot import {module + '.' + name if module else name!r}; name a "
                                  "wrapper by its import path, e.g. gymnasium.wrappers.FlattenObservation")
        if not callable(w):
            raise ConfigError(f"wrappers: {w!r} is not callable; each wrapper takes an env and returns an env")
        out.append(w)
    return out


@checked_methods(**world_specs(ActionArg(same_device=False, flat=True)), lifecycle=world_lifecycle(
    exact=False, closes=True,
    reset_why=" (also needed after load_state_dict: Gymnasium env internals are not checkpointed)"))
class GymVectorEnv(BatchedEnv):
    """N copies of a Gymnasium env as one `BatchedEnv` (Gymnasium's SAME_STEP auto-reset).

    - Actions: `discrete` -> [N] ints in 0..n-1, `multi_discrete` -> [N, k] ints, `continuous` ->
      [N, *shape] (or flat [N, prod(shape)]) floats, clipped to the Box bounds before stepping
      (the policy's log-prob stays that of the unclipped sample, as in CleanRL and SB3).
      Discrete `start` offsets are added here, so the policy always emits 0-based indices.
    - `terminated` and `truncated` are Gymnasium's, passed through; `final_obs` is the true last
      observation of a finished episode (`info["final_obs"]`), `obs` the reset observation.
    - Episode statistics: `last_episode_return` / `last_episode_length` ([N], valid where done),
      `episode_count` ([N] finished episodes per actor).
    - `seed` seeds the first reset (actor i gets seed + i, Gymnasium's convention).
    - `vectorization`: `sync` (default) or `async` (Gymnasium's Sync/AsyncVectorEnv over N copies),
      or `vector_entry_point`: the env's own native vector implementation (`gymnasium.make_vec(...,
      vectorization_mode="vector_entry_point")`; CartPole registers `CartPoleVectorEnv`, stepping all
      N actors as numpy arrays, no Python loop over copies). Its constructor takes the env's
      arguments (no `wrappers`, no `vector_kwargs`); a native env that autoresets NEXT_STEP (CartPole's)
      is adapted: an actor whose episode ended sees its last observation once more, and its next
      action is ignored by the env (reward 0, not counted in the episode) while it resets; `obs`
      and `final_obs` are then that last observation. `vector_mode` says which one runs.
    - `wrappers`: Gymnasium wrappers applied to every copy, as callables or import paths (from
      YAML: `wrappers: [gymnasium.wrappers.FlattenObservation]`).
    - `env_kwargs` (a dict, settable from YAML) and any extra keyword arguments go to
      `gymnasium.make_vec`: e.g. `max_episode_steps`, the env's own arguments.
    - The first three parameters are the data module's env factory order `(num_envs, device,
      seed)`; `env_id` is keyword-only: `GymVectorEnv(8, env_id="CartPole-v1")`, or in YAML
      `class_path: parlightning.envs.GymVectorEnv` with `init_args: {env_id: CartPole-v1}`.

    Checkpoints hold the seed and the episode counters only: Gymnasium env internals cannot be
    saved in general, so after `load_state_dict` call `reset()` before stepping.
    """

    checkpoint_exact = False  # after load_state_dict, reset() before stepping

    def __init__(
        self,
        num_envs: PositiveInt,
        device: str | torch.device = "cpu",
        seed: Seed = 0,
        *,
        env_id: str,
        vectorization: str = "sync",
        wrappers: Optional[Sequence[Any]] = None,
        env_kwargs: Optional[dict[str, Any]] = None,
        **kwargs: Any,
    ):
        try:
            import gymnasium
        except ImportError as e:
            raise ImportError("GymVectorEnv needs Gymnasium, an optional extra: pip install parlightning[gym]") from e
        try:
            from gymnasium.vector import AutoresetMode
        except ImportError as e:
            raise ImportError(
                f"GymVectorEnv needs Gymnasium >= 1.1 (same-step autoreset), found {gymnasium.__version__}: "
                "pip install -U 'parlightning[gym]'"
            ) from e
        if isinstance(num_envs, str):
            raise ConfigError(f"GymVectorEnv.num_envs: must be a positive integer, got {num_envs!r}; env_id is "
                              f"keyword-only: GymVectorEnv(num_envs, env_id={num_envs!r})")
        num_envs, seed = check_args("GymVectorEnv", GymVectorEnv.__init__, locals()).values()
        if not env_id:
            raise ConfigError("GymVectorEnv.env_id: must be a registered Gymnasium env id such as 'CartPole-v1', "
                              "got ''")
        if vectorization not in _VECTORIZATIONS:
            raise ConfigError(f"vectorization: unknown {vectorization!r}; choose one of {', '.join(_VECTORIZATIONS)}")
        env_kwargs = {**(env_kwargs or {}), **kwargs}
        wrappers = resolve_wrappers(wrappers if wrappers is not None else env_kwargs.pop("wrappers", None))
        if wrappers is not None:
            env_kwargs["wrappers"] = wrappers
        vector_kwargs = dict(env_kwargs.pop("vector_kwargs", None) or {})
        native = vectorization == "vector_entry_point"
        if native:
            try:
                has_native = gymnasium.spec(env_id).vector_entry_point is not None
            except gymnasium.error.Error:
                has_native = True  # an unknown id: make_vec below names it
            if not has_native:
                raise ConfigError(f"vectorization: {env_id} registers no vector_entry_point (a native vector env); "
                                  "use vectorization: sync or async")
            if wrappers is not None or vector_kwargs:
                raise ConfigError("vectorization: vector_entry_point takes the env's own arguments only; drop "
                                  "wrappers and vector_kwargs, or use vectorization: sync")
        mode = vector_kwargs.get("autoreset_mode", AutoresetMode.SAME_STEP) if native else (
            vector_kwargs.setdefault("autoreset_mode", AutoresetMode.SAME_STEP))
        if AutoresetMode(mode) != AutoresetMode.SAME_STEP:
            raise ValueError(
                f"GymVectorEnv needs autoreset_mode SAME_STEP (final_obs beside the reset obs), got {mode!r}: "
                "drop autoreset_mode from vector_kwargs"
            )

        self.env_id = env_id
        self.num_envs = num_envs
        self.seed = seed
        self.device = checked_device("GymVectorEnv.device", device)
        try:
            self.env = gymnasium.make_vec(
                env_id, num_envs=num_envs, vectorization_mode=vectorization, vector_kwargs=vector_kwargs, **env_kwargs
            )
        except gymnasium.error.Error as err:  # NameNotFound, VersionNotFound, ... for an unknown id
            text = " ".join(str(err).split())
            raise ConfigError(f"env_id: {text} Pass a registered Gymnasium id such as CartPole-v1 (gymnasium."
                              "pprint_registry() lists them; import the package that registers yours)") from None
        except (TypeError, ValueError, AttributeError, AssertionError) as err:
            if wrappers is None:
                raise
            names = ", ".join(getattr(w, "__qualname__", repr(w)) for w in wrappers)
            text = " ".join(str(err).split())[:200]
            raise ConfigError(f"wrappers: applying [{names}] to {env_id} raised {type(err).__name__}: {text}; each "
                              "wrapper takes an env and returns an env (e.g. gymnasium.wrappers.FlattenObservation)"
                              ) from None
        self.vector_mode = vectorization
        autoreset = AutoresetMode((getattr(self.env, "metadata", None) or {}).get("autoreset_mode",
                                                                                 AutoresetMode.SAME_STEP))
        if autoreset not in (AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP):
            self.env.close()
            raise ConfigError(f"vectorization: {env_id}'s native vector env autoresets {autoreset.value}; "
                              "GymVectorEnv adapts same-step and next-step autoreset only: use vectorization: sync")
        self._next_step = autoreset == AutoresetMode.NEXT_STEP  # done actors reset on the following step
        self._resetting = np.zeros(num_envs, dtype=bool)  # NEXT_STEP: rows this step resets (action ignored)
        obs_space = self.env.single_observation_space
        if not isinstance(obs_space, gymnasium.spaces.Box):
            self.env.close()
            raise ConfigError(
                f"wrappers: GymVectorEnv needs a Box observation space, {env_id} has {obs_space}; add "
                "wrappers: [gymnasium.wrappers.FlattenObservation] to the env's init_args (or a one-hot wrapper)"
            )
        self.observation_shape = tuple(obs_space.shape)
        self.action_spec, self._action_start = action_spec_of(self.env.single_action_space)
        act_space = self.env.single_action_space
        self._action_dtype = act_space.dtype
        if self.action_spec.kind == "continuous":
            # Per-dimension bounds (ActionSpec.low/high hold only a bound shared by every dimension).
            self.action_low = torch.as_tensor(act_space.low, dtype=torch.float32, device=self.device)
            self.action_high = torch.as_tensor(act_space.high, dtype=torch.float32, device=self.device)

        # Episode statistics live on the host beside Gymnasium's numpy data (tiny numpy ops are
        # cheaper than torch ops here); the properties below hand them out as tensors.
        n = num_envs
        self._return = np.zeros(n, np.float64)  # running, current episode
        self._length = np.zeros(n, np.int64)
        self._last_return = np.zeros(n, np.float64)
        self._last_length = np.zeros(n, np.int64)
        self._count = np.zeros(n, np.int64)
        self._seeded = False

    def _to_tensor(self, array: np.ndarray) -> Tensor:
        """`array` must be a fresh array this env owns: on CPU the tensor shares its memory."""
        return torch.from_numpy(array).to(self.device)

    @property
    def last_episode_return(self) -> Tensor:
        """Return of each actor's last finished episode ([N] float32, valid where done)."""
        return self._to_tensor(self._last_return.astype(np.float32))

    @property
    def last_episode_length(self) -> Tensor:
        """Length of each actor's last finished episode ([N] long, valid where done)."""
        return self._to_tensor(self._last_length.copy())

    @property
    def episode_count(self) -> Tensor:
        """Episodes each actor has finished ([N] long)."""
        return self._to_tensor(self._count.copy())

    def reset(self, *, seed: Optional[int] = None, task_index: Optional[Tensor] = None) -> Tensor:
        """Reset every actor. The first reset uses the constructor's seed; `seed` reseeds (actor i
        gets seed + i). No task bank, so `task_index` is ignored."""
        if seed is None and not self._seeded:
            seed = self.seed
        if seed is not None:
            self.seed = seed
            self._seeded = True
        obs, _ = self.env.reset(seed=seed)
        self._return[:] = 0
        self._length[:] = 0
        self._resetting[:] = False
        return self._to_tensor(np.array(obs, dtype=np.float32))

    def _to_numpy_action(self, action: Tensor) -> np.ndarray:
        spec = self.action_spec
        expected = (self.num_envs, *spec.action_shape)
        if spec.kind == "continuous" and action.dim() == 2 and action.shape[0] == self.num_envs:
            if action.shape[1] == int(np.prod(spec.shape)):
                action = action.reshape(expected)  # a policy's flat [N, prod(shape)] output
        if tuple(action.shape) != expected:
            raise ValueError(
                f"action for {self.env_id} ({spec.kind}) must have shape {expected}, got {tuple(action.shape)}"
            )
        if spec.kind == "continuous":
            action = torch.clamp(action.detach().to(self.device, torch.float32), self.action_low, self.action_high)
            return action.cpu().numpy().astype(self._action_dtype, copy=False)
        if action.is_floating_point() or action.is_complex():
            raise TypeError(f"{spec.kind} actions must be integer tensors, got dtype {action.dtype}")
        return action.detach().cpu().numpy().astype(np.int64) + self._action_start

    def step(self, action: Tensor, next_task: Optional[Tensor] = None) -> StepResult:
        """Step all actors; finished ones are reset by Gymnasium in the same step (`next_task` ignored)."""
        # before reset (also after load_state_dict), after close, action's shape and dtype: checked at entry
        obs, reward, terminated, truncated, info = self.env.step(self._to_numpy_action(action))
        both = np.empty((2, *np.shape(obs)), dtype=np.float32)  # [obs, final_obs], converted at once
        both[0] = obs
        both[1] = obs
        if "final_obs" in info:
            finished = np.flatnonzero(info["_final_obs"])
            if finished.size:
                both[1, finished] = np.stack([info["final_obs"][i] for i in finished])
        terminated = np.array(terminated, dtype=bool)
        truncated = np.array(truncated, dtype=bool)
        done = terminated | truncated
        self._return += reward
        self._length += ~self._resetting  # a NEXT_STEP reset step belongs to no episode
        if self._next_step:
            self._resetting = done.copy()
        self._last_return[done] = self._return[done]
        self._last_length[done] = self._length[done]
        self._count += done
        self._return[done] = 0
        self._length[done] = 0
        obs_t, final_t = self._to_tensor(both).unbind(0)
        reward_t = self._to_tensor(np.array(reward, dtype=np.float32))
        return StepResult(obs_t, reward_t, self._to_tensor(terminated), self._to_tensor(truncated), final_t)

    def close(self) -> None:
        """Close the Gymnasium vector env (stops async worker processes)."""
        self.env.close()

    def state_dict(self) -> dict[str, Any]:
        """The seed and episode counters. Gymnasium env internals (physics, RNGs inside each env)
        cannot be checkpointed in general; resuming restarts the episodes."""
        return {
            "env_id": self.env_id,
            "num_envs": self.num_envs,
            "seed": self.seed,
            "last_episode_return": torch.from_numpy(self._last_return.copy()),
            "last_episode_length": torch.from_numpy(self._last_length.copy()),
            "episode_count": torch.from_numpy(self._count.copy()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the counters and the seed; the next `reset()` reseeds with it (call it before stepping)."""
        own = self.state_dict()
        check_state("GymVectorEnv", state, own, skip=own)  # the key set; env_id and num_envs below
        for key in ("env_id", "num_envs"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"checkpoint has {key}={state[key]!r} but this GymVectorEnv has {key}={getattr(self, key)!r}: "
                    f"build the env with {key}={state[key]!r} to resume"
                )
        check_state("GymVectorEnv", state, own)  # the counters' dtype and shape
        self.seed = state["seed"]
        self._last_return[:] = state["last_episode_return"].cpu().double().numpy()
        self._last_length[:] = state["last_episode_length"].cpu().long().numpy()
        self._count[:] = state["episode_count"].cpu().long().numpy()
        self._return[:] = 0
        self._length[:] = 0
        self._seeded = False
