"""Recurrent actor-critic (GRU or LSTM) and the per-actor hidden state it carries through rollouts.

Every actor has its own row of one batched hidden-state tensor `[N, S, H]` (S = 1 for a GRU; 2 for
an LSTM, h and c stacked), zeroed exactly where that actor's episode starts, so memory never leaks
across episodes or actors. The update re-runs the recurrence over whole per-actor chunks from the
state stored at each chunk's start (truncated BPTT), applying the same resets inside the chunk, so
the recomputed log-probs equal the rollout's before any gradient step.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch
from torch import Tensor, nn

from parlightning.buffer import RolloutBuffer
from parlightning.envs.base import ActionSpec
from parlightning.errors import ArgumentError
from parlightning.policies.actor_critic import (
    ACTIVATIONS, CategoricalHead, GaussianHead, check_layers, check_observation_shape, checked_logits, layer_init, mlp,
)

CELLS = {"gru": nn.GRUCell, "lstm": nn.LSTMCell}


class RecurrentActorCritic(nn.Module):
    """Observation encoder (MLP) -> GRU/LSTM cell -> actor head and critic head (CleanRL's LSTM
    agent, shared trunk). States are batch-first `[B, S, H]`; `episode_start` [B] (or [B, L]) marks
    the rows whose state is zeroed before the cell runs."""

    is_recurrent = True

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_spec: ActionSpec,
        hidden_sizes: Sequence[int] = (64,),
        rnn_hidden: int = 64,
        cell: str = "gru",
        activation: str = "tanh",
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        if not isinstance(cell, str) or cell not in CELLS:
            raise ArgumentError(f"{owner}(cell): unknown {cell!r:.40}; choose one of {sorted(CELLS)}")
        if isinstance(rnn_hidden, bool) or not isinstance(rnn_hidden, int) or rnn_hidden <= 0:
            raise ArgumentError(f"{owner}(rnn_hidden): must be a positive integer, got {rnn_hidden!r:.40}")
        hidden = check_layers(owner, hidden_sizes, activation)
        obs_dim = math.prod(check_observation_shape(f"{owner}(observation_shape)", observation_shape))
        self.obs_dim = obs_dim  # the flattened observation the network takes (`observation_fault`)
        self.action_spec, self.cell, self.rnn_hidden = action_spec, cell, rnn_hidden
        self.state_layers = 2 if cell == "lstm" else 1
        self.encoder = (
            nn.Sequential(mlp([obs_dim, *hidden], activation, out_std=math.sqrt(2)), ACTIVATIONS[activation]())
            if hidden else nn.Identity()
        )
        self.rnn = CELLS[cell](hidden[-1] if hidden else obs_dim, rnn_hidden)
        for name, param in self.rnn.named_parameters():
            if name.startswith("weight"):
                nn.init.orthogonal_(param, 1.0)
            else:
                nn.init.zeros_(param)
        self.head: CategoricalHead | GaussianHead = (
            CategoricalHead(action_spec.nvec) if action_spec.is_discrete else GaussianHead(action_spec.shape)
        )
        self.actor = layer_init(nn.Linear(rnn_hidden, self.head.n_outputs), std=0.01)
        self.critic = layer_init(nn.Linear(rnn_hidden, 1), std=1.0)

    def prior_layer(self) -> nn.Linear:
        """The actor's output layer (its bias carries `parlightning.policies.actor_critic.set_action_prior`)."""
        return self.actor

    def prior_nvec(self) -> tuple[int, ...]:
        return tuple(self.action_spec.nvec)

    def initial_state(self, num_envs: int, device: Any = None) -> Tensor:
        """A fresh (zero) hidden state for `num_envs` actors: [N, S, H]."""
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 0:
            raise ArgumentError(f"{type(self).__name__}.initial_state(num_envs): must be an int >= 0 (the number of "
                                f"actors), got {num_envs!r}")
        return torch.zeros(num_envs, self.state_layers, self.rnn_hidden, device=device)

    def _check_state(self, state: Any, obs: Any, method: str) -> None:
        """`state` is [N, S, H] for this policy's cell (metadata only: no host read)."""
        want = (getattr(obs, "shape", (None,))[0], self.state_layers, self.rnn_hidden)
        got = tuple(getattr(state, "shape", ()))
        if not isinstance(state, Tensor) or got != want:
            raise ArgumentError(f"{type(self).__name__}.{method}(state): must be the hidden state [N, S, H] = "
                                f"{list(want)} (N actors as in obs, S = {self.state_layers} for the {self.cell} cell, "
                                f"H = rnn_hidden {self.rnn_hidden}; initial_state(N) makes a fresh one), got "
                                f"{list(got) if isinstance(state, Tensor) else type(state).__name__}")

    def _step(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One cell step: x [B, F], state [B, S, H] -> (features [B, H], new state [B, S, H])."""
        if self.cell == "lstm":
            h, c = self.rnn(x, state.unbind(1))
            return h, torch.stack((h, c), 1)
        h = self.rnn(x, state.squeeze(1))
        return h, h.unsqueeze(1)

    def unroll(self, obs: Tensor, state: Tensor, episode_start: Tensor) -> tuple[Tensor, Tensor]:
        """Run the recurrence over sequences: obs [B, L, ...], state [B, S, H], episode_start [B, L]
        -> (features [B, L, H], final state [B, S, H]); a row's state is zeroed where its episode starts."""
        # unbind, not x[t]: one backward op for all steps (indexing each step zero-fills a full [L, B, F] grad)
        xs = self.encoder(obs.flatten(2)).transpose(0, 1).contiguous().unbind(0)  # L x [B, F]
        keep = (~episode_start).t().to(state.dtype)[..., None, None].unbind(0)  # L x [B, 1, 1]
        features = []
        for x, k in zip(xs, keep):
            out, state = self._step(x, state * k)
            features.append(out)
        return torch.stack(features, 1), state

    def act(
        self, obs: Tensor, generator: Optional[torch.Generator], state: Tensor, episode_start: Tensor,
        mask: Optional[Tensor] = None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One rollout step for N actors: (action, log-prob, value, new state); `mask` the world's
        action mask (see `CategoricalHead._log_probs`)."""
        self._check_state(state, obs, "act")
        features, state = self.unroll(obs.unsqueeze(1), state, episode_start.unsqueeze(1))
        features = features[:, 0]
        action, logprob = self.head.sample(checked_logits(self.actor, self.actor(features), self.head.n_outputs), generator, mask)
        return action, logprob, self.critic(features).squeeze(-1), state

    def value(self, obs: Tensor, state: Tensor, episode_start: Tensor) -> Tensor:
        """V(obs) for N actors given their hidden state (zeroed where `episode_start`)."""
        features, _ = self.unroll(obs.unsqueeze(1), state, episode_start.unsqueeze(1))
        return self.critic(features[:, 0]).squeeze(-1)

    def evaluate_sequences(
        self, obs: Tensor, actions: Tensor, episode_start: Tensor, state0: Tensor, mask: Optional[Tensor] = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Score stored chunks under the current parameters with truncated BPTT from each chunk's
        initial state: obs [B, L, ...], actions [B, L, ...], episode_start [B, L], state0 [B, S, H],
        mask [B, L, M] or None -> (log-prob, entropy, value), each [B, L] like the stored fields."""
        B, L = episode_start.shape
        features, _ = self.unroll(obs, state0, episode_start)
        features = features.reshape(B * L, -1)
        flat_mask = None if mask is None else mask.flatten(0, 1)
        logprob, entropy = self.head.log_prob_entropy(
            checked_logits(self.actor, self.actor(features), self.head.n_outputs), actions.flatten(0, 1), flat_mask)
        return logprob.reshape(B, L), entropy.reshape(B, L), self.critic(features).reshape(B, L)


class RecurrentRollout:
    """Every actor's hidden state between steps and rollouts, and the recurrent policy as the step
    loop sees it: `act(obs, generator)` like the MLP. Each step it stores the state the actor starts
    from and its `episode_start` in the buffer; `episode_start` at t is the buffer's done at t-1
    (written by the loop), at the first step of training every actor starts."""

    def __init__(self, policy: RecurrentActorCritic, buffer: RolloutBuffer) -> None:
        self.policy, self.buffer = policy, buffer
        self.state = policy.initial_state(buffer.num_envs, buffer.device)
        self.episode_start = torch.ones(buffer.num_envs, dtype=torch.bool, device=buffer.device)
        buffer.allocate_memory(tuple(self.state.shape[1:]))
        self.t = 0

    def begin(self, policy: RecurrentActorCritic) -> "RecurrentRollout":
        """Start a rollout with `policy` (the module's current network)."""
        self.policy, self.t = policy, 0
        return self

    def act(self, obs: Tensor, generator: Optional[torch.Generator] = None,
            mask: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:
        """Step t of the rollout for every actor: (action, log-prob, value), as the MLP's `act`."""
        buf, t = self.buffer, self.t
        if t > 0:
            self.episode_start = buf.terminated[t - 1] | buf.truncated[t - 1]
        buf.write_memory(t, self.state, self.episode_start)
        action, logprob, value, self.state = self.policy.act(obs, generator, self.state, self.episode_start, mask)
        self.t = t + 1
        return action, logprob, value

    def end(self, obs: Tensor) -> Tensor:
        """After the last step: note which actors start a new episode next, and return V(obs)."""
        last = self.buffer.num_steps - 1
        self.episode_start = self.buffer.terminated[last] | self.buffer.truncated[last]
        return self.policy.value(obs, self.state, self.episode_start)

    def truncated_values(self) -> Tensor:
        """[T, N] V(final observation) where an episode was truncated (0 elsewhere): the episode goes
        on from the state the actor had after that step, with no reset. One host sync."""
        buf = self.buffer
        values = torch.zeros_like(buf.values)
        where = buf.truncated.nonzero(as_tuple=True)
        if where[0].numel():
            after = torch.cat((buf.states[1:], self.state.unsqueeze(0)))  # state after step t, before any reset
            same_episode = torch.zeros_like(where[0], dtype=torch.bool)  # no reset before the final observation
            values[where] = self.policy.value(buf.final_obs[where], after[where], same_episode)
        return values

    def restart(self) -> None:
        """Every actor starts a new episode at the next step (the env was reset)."""
        self.episode_start = torch.ones_like(self.episode_start)

    def state_dict(self) -> dict[str, Tensor]:
        """Every actor's hidden state and episode-start flag (tensors, for the checkpoint)."""
        return {"state": self.state.clone(), "episode_start": self.episode_start.clone()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Resume every actor's hidden state; refuses a state of another shape, naming the fields."""
        if tuple(state["state"].shape) != tuple(self.state.shape):
            raise ValueError(
                f"recurrent state: the checkpoint's hidden state has shape {tuple(state['state'].shape)}, this "
                f"policy's {tuple(self.state.shape)}; resume with the same model.policy, model.rnn_hidden and "
                "data.num_envs"
            )
        self.state = state["state"].to(self.state.device).clone()
        self.episode_start = state["episode_start"].to(self.episode_start.device).clone()
