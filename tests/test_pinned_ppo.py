"""PPO pinned by value: the loss against CleanRL's formulation, the module's use of its hparams,
gradient clipping, the lr schedule, target-KL, explained variance, and every minibatch field of a
real Lightning fit against a reference computed from a tiny deterministic env's own record (so a
stale policy, a wrong bootstrap observation, actors mixing in GAE or a missing PARL bonus fail)."""

import copy
import math

import lightning.pytorch as pl
import pytest
import torch

from test_buffer import _reference_gae  # the per-actor textbook recursion (tests/test_buffer.py)
from parlightning.buffer import compute_gae
from parlightning.callbacks.base import RolloutCallback
from parlightning.ppo.data import RolloutDataModule
from parlightning.envs.base import ActionSpec, BatchedEnv, EpisodeParts, StepResult
from parlightning.ppo.loss import ppo_loss
from parlightning.ppo.module import PPOModule
from parlightning.policies.actor_critic import ActorCritic
from parlightning.parl.reward import ConstantSchedule, PARLReward
from parlightning.distribution.samplers import DifficultyWeighted


# ------------------------------------------------------------------ a tiny deterministic world
class TallyEnv(BatchedEnv):
    """N actors; actor n's episodes last 2 + n % 3 steps and end, alternately per actor, in a
    termination or a truncation. Obs [4] = (actor, elapsed, clock, 1) scaled: unique per (step,
    actor), the reset obs differs from the final one. Reward depends on the action and the actor.
    Every step is recorded (`history`) so a test can rebuild the rollout without the buffer.
    With `tasks`, it has a three-task bank, takes `next_task` and reports `EpisodeParts`."""

    checkpoint_exact = True

    def __init__(self, num_envs, device="cpu", seed=0, tasks=False):
        self.num_envs, self.device, self.tasks = num_envs, torch.device(device), tasks
        self.observation_shape = (4,)
        self.action_spec = ActionSpec("discrete", nvec=(2,))
        self.actor = torch.arange(num_envs, device=self.device)
        self.length = 2 + self.actor % 3
        self.elapsed = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.episodes = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.task = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.clock = 0
        self.history = []
        if tasks:
            self.task_ids = ["easy-0", "easy-1", "hard-0"]
            self.max_subagents = 4

    def _obs(self):
        return torch.stack([self.actor / 8.0, self.elapsed / 4.0, torch.full_like(self.elapsed, self.clock) / 64.0,
                            torch.ones_like(self.elapsed)], 1).float()

    def reset(self, *, seed=None, task_index=None):
        self.elapsed.zero_()
        if task_index is not None:
            self.task = task_index.clone()
        self.obs = self._obs()
        return self.obs.clone()

    def step(self, action, next_task=None):
        reward = (action == (self.actor + self.elapsed) % 2).float() * (1.0 + 0.5 * self.actor) - 0.25 * self.elapsed
        self.elapsed = self.elapsed + 1
        self.clock += 1
        done = self.elapsed >= self.length
        terminated = done & ((self.episodes + self.actor) % 2 == 0)
        truncated = done & ~terminated
        final_obs = self._obs()
        parts = None
        if self.tasks:
            a = self.actor.float()
            parts = EpisodeParts(self.task.clone(), (reward > 0).float(), a % 5, a % 4, torch.minimum(a % 3, a % 4),
                                 a, 2 * a)
            if next_task is not None:
                picked = next_task(done) if callable(next_task) else next_task
                self.task = torch.where(done, picked, self.task)
        self.episodes = self.episodes + done.long()
        self.elapsed = self.elapsed.masked_fill(done, 0)
        obs = self._obs()
        self.history.append(dict(obs=self.obs.clone(), action=action.clone(), reward=reward.clone(),
                                 terminated=terminated.clone(), truncated=truncated.clone(),
                                 final_obs=final_obs.clone(), parts=parts))
        self.obs = obs
        return StepResult(obs.clone(), reward, terminated, truncated, final_obs, parts)


def _factory(made, **kw):
    def make(num_envs, device, seed):
        made.append(TallyEnv(num_envs, device, seed, **kw))
        return made[-1]
    return make


def _trainer(epochs, callbacks=(), **kw):
    return pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, callbacks=list(callbacks), **kw)


def _key(row):
    return tuple(int(round(float(x) * 64)) for x in row)


class Reference(RolloutCallback):
    """At each rollout's end, rebuild it from the env's record and the policy as it stands
    (nothing has been updated since collection), and keep it by observation; then check every
    minibatch row against it."""

    def __init__(self, made, gamma, lam, reward=None):
        self.made, self.gamma, self.lam, self.reward = made, gamma, lam, reward
        self.rows, self.snapshots, self.checked, self.truncated_rows = {}, [], 0, 0
        self.episode_means = []  # (mean return, mean length) of the episodes that ended in each rollout

    def _episodes(self, env, T):
        """Return (env reward, unshaped) and length of every episode that ended in the last T steps,
        in [T, N] row-major order; episodes may have started in an earlier rollout."""
        N = env.num_envs
        ret, length, out = torch.zeros(N, dtype=torch.float64), torch.zeros(N), []
        for i, s in enumerate(env.history):
            ret += s["reward"].double()
            length += 1
            done = s["terminated"] | s["truncated"]
            if i >= len(env.history) - T:
                out += [(float(ret[n]), float(length[n])) for n in range(N) if done[n]]
            ret[done], length[done] = 0.0, 0.0
        return out

    def on_rollout_end(self, trainer, pl_module, rollout):
        env, T = self.made[-1], rollout.buffer.num_steps
        steps = env.history[-T:]
        policy = pl_module.policy
        stack = lambda k: torch.stack([s[k] for s in steps])  # noqa: E731
        obs, actions, rewards = stack("obs"), stack("action"), stack("reward")
        term, trunc, final_obs = stack("terminated"), stack("truncated"), stack("final_obs")
        if self.reward is not None:  # PARL shaping at every finished episode, from the env's own parts
            parts = [EpisodeParts(*(torch.stack(c) for c in zip(*(s["parts"] for s in steps))))]
            p = parts[0]
            rewards = rewards + self.reward.bonus(p.n_subagents, p.assigned, p.completed) * (term | trunc)
        with torch.inference_mode():
            logprob, _, values = policy.evaluate(obs.flatten(0, 1), actions.flatten())
            logprob, values = logprob.view(T, -1), values.view(T, -1)
            trunc_values = policy.value(final_obs.flatten(0, 1)).view(T, -1)
            next_value = policy.value(env.obs)
        adv = _reference_gae(rewards, values, term, trunc, trunc_values, next_value, self.gamma, self.lam)
        ret = adv + values.double()
        self.truncated_rows += int(trunc.sum())
        self.snapshots.append(copy.deepcopy(policy))
        self.rows = {}
        for t in range(T):
            for n in range(obs.shape[1]):
                self.rows[_key(obs[t, n])] = dict(actions=actions[t, n], logprobs=logprob[t, n], values=values[t, n],
                                                  advantages=adv[t, n], returns=ret[t, n], rewards=rewards[t, n])
        episodes = self._episodes(env, T)
        self.episode_means.append((sum(r for r, _ in episodes) / len(episodes), sum(n for _, n in episodes) / len(episodes)))
        if self.reward is not None:  # the sampler learnt from every finished episode's outcome, per task
            sampler = trainer.datamodule.sampler
            seen = torch.zeros(3), torch.zeros(3)
            for s in env.history:
                d = s["terminated"] | s["truncated"]
                seen[0].index_add_(0, s["parts"].task[d], torch.ones(int(d.sum())))
                seen[1].index_add_(0, s["parts"].task[d], (s["parts"].outcome[d] >= sampler.pass_threshold).float())
            torch.testing.assert_close(sampler.attempts, seen[0])
            torch.testing.assert_close(sampler.passes, seen[1])
            assert 0 < float(seen[1].sum()) < float(seen[0].sum())
        buf = rollout.buffer  # the buffer agrees too (its rewards are the shaped ones)
        torch.testing.assert_close(buf.rewards, rewards.float(), rtol=0, atol=1e-5)
        torch.testing.assert_close(buf.advantages.double(), adv, rtol=1e-4, atol=1e-4)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        assert len(self.rows) == batch["obs"].shape[0] * trainer.datamodule.num_minibatches
        for i, row in enumerate(batch["obs"]):
            ref = self.rows[_key(row)]
            assert int(batch["actions"][i]) == int(ref["actions"])
            for k in ("logprobs", "values", "advantages", "returns"):
                assert math.isclose(float(batch[k][i]), float(ref[k]), rel_tol=1e-4, abs_tol=1e-4), (k, i)
            self.checked += 1


@pytest.mark.parametrize("tasks", [False, True], ids=["plain", "parl_reward"])
def test_every_minibatch_row_equals_a_reference_rebuilt_from_the_envs_record(tasks):
    """Values, log-probs, GAE advantages and returns of every trained row equal a per-actor
    reference computed from what the env saw and the policy that acted: the rollout is collected by
    the current weights, truncation bootstraps from V(final obs), termination does not, actors never
    mix, gamma and lambda are the configured ones, and (with tasks) the PARL bonus is added at
    every finished episode."""
    pl.seed_everything(0)
    made = []
    reward = PARLReward(4, ConstantSchedule(0.5), ConstantSchedule(0.25)) if tasks else None
    gamma, lam = 0.9, 0.7
    sampler = DifficultyWeighted(seed=0) if tasks else None
    dm = RolloutDataModule(env=_factory(made, tasks=tasks), num_envs=6, num_steps=8, update_epochs=2,
                           num_minibatches=2, gamma=gamma, gae_lambda=lam, reward=reward, sampler=sampler)
    ref = Reference(made, gamma, lam, reward)
    module = PPOModule(lr=0.05, anneal_lr=False, hidden_sizes=(16,), max_grad_norm=None)
    trainer = _trainer(3, [ref])
    trainer.fit(module, datamodule=dm)
    assert ref.checked == 3 * 2 * 2 * 24  # every row of every minibatch of every iteration
    assert ref.truncated_rows > 0
    # the last rollout's logged episode statistics: means over the episodes that ended in it
    mean_return, mean_length = ref.episode_means[-1]
    assert math.isclose(float(trainer.callback_metrics["charts/episodic_return"]), mean_return, rel_tol=1e-5)
    assert math.isclose(float(trainer.callback_metrics["charts/episodic_length"]), mean_length, rel_tol=1e-5)
    # the check has teeth: each iteration's weights differ from the previous iteration's
    obs = torch.stack([s["obs"] for s in made[-1].history]).flatten(0, 1)
    act = torch.stack([s["action"] for s in made[-1].history]).flatten()
    with torch.no_grad():
        lp = [p.evaluate(obs, act)[0] for p in ref.snapshots]
        v = [p.value(obs) for p in ref.snapshots]
    for a, b, va, vb in zip(lp, lp[1:], v, v[1:]):
        assert (a - b).abs().max() > 1e-2 and (va - vb).abs().max() > 1e-2
    with torch.no_grad():  # and V(final obs) is far from V(reset obs) and V(last obs)
        env = made[-1]
        hist = env.history[-8:]
        final = torch.stack([s["final_obs"] for s in hist])
        mask = torch.stack([s["truncated"] for s in hist])
        last = torch.stack([s["obs"] for s in hist])
        reset = final.clone()
        reset[..., 1] = 0
        pol = ref.snapshots[-1]
        vf, vr, vl = pol.value(final[mask]), pol.value(reset[mask]), pol.value(last[mask])
        assert (vf - vr).abs().min() > 1e-3 and (vf - vl).abs().min() > 1e-3


# ------------------------------------------------------------------ GAE on its own
def test_gae_of_each_actor_alone_equals_its_column_with_distinct_values():
    g = torch.Generator().manual_seed(3)
    T, N = 9, 4
    rewards = torch.randn(T, N, generator=g)
    values = torch.randn(T, N, generator=g) * 3 + torch.arange(N) * 10.0  # far apart per actor
    u = torch.rand(T, N, generator=g)
    term, trunc = u < 0.15, (u >= 0.15) & (u < 0.3)
    trunc_values = torch.randn(T, N, generator=g) - torch.arange(N) * 10.0
    next_value = torch.tensor([5.0, -7.0, 11.0, -13.0])
    adv, ret = compute_gae(rewards, values, term, trunc, trunc_values, next_value, 0.9, 0.6)
    ref = _reference_gae(rewards, values, term, trunc, trunc_values, next_value, 0.9, 0.6)
    torch.testing.assert_close(adv.double(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret, adv + values)
    for n in range(N):
        c = slice(n, n + 1)
        alone, _ = compute_gae(rewards[:, c], values[:, c], term[:, c], trunc[:, c], trunc_values[:, c],
                               next_value[c], 0.9, 0.6)
        torch.testing.assert_close(alone, adv[:, c], rtol=0, atol=1e-6)


def test_gae_two_step_hand_computation():
    # one actor, no episode end: delta1 = 1 + 0.5*4 - 3 = 0, delta0 = 2 + 0.5*3 - 1 = 2.5
    # A1 = 0, A0 = 2.5 + 0.5*0.8*0 = 2.5; with r1 = 2: delta1 = 1, A1 = 1, A0 = 2.5 + 0.4 = 2.9
    z = torch.zeros(2, 1, dtype=torch.bool)
    adv, ret = compute_gae(torch.tensor([[2.0], [2.0]]), torch.tensor([[1.0], [3.0]]), z, z, torch.zeros(2, 1),
                           torch.tensor([4.0]), 0.5, 0.8)
    torch.testing.assert_close(adv, torch.tensor([[2.9], [1.0]]))
    torch.testing.assert_close(ret, torch.tensor([[3.9], [4.0]]))


# ------------------------------------------------------------------ the loss against CleanRL's code
def _cleanrl_loss(newlogprob, entropy, newvalue, b_logprobs, b_values, mb_advantages, b_returns, clip_coef,
                  ent_coef, vf_coef, norm_adv, clip_vloss):
    """CleanRL ppo.py's minibatch loss, transcribed."""
    logratio = newlogprob - b_logprobs
    ratio = logratio.exp()
    old_approx_kl = (-logratio).mean()
    approx_kl = ((ratio - 1) - logratio).mean()
    clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
    if norm_adv:
        mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()
    if clip_vloss:
        v_loss_unclipped = (newvalue - b_returns) ** 2
        v_clipped = b_values + torch.clamp(newvalue - b_values, -clip_coef, clip_coef)
        v_loss_clipped = (v_clipped - b_returns) ** 2
        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
    else:
        v_loss = 0.5 * ((newvalue - b_returns) ** 2).mean()
    entropy_loss = entropy.mean()
    loss = pg_loss - ent_coef * entropy_loss + v_loss * vf_coef
    return loss, pg_loss, v_loss, entropy_loss, approx_kl, old_approx_kl, clipfrac


def _loss_inputs(seed, n=64):
    g = torch.Generator().manual_seed(seed)
    old_lp = -torch.rand(n, generator=g) * 2
    new_lp = old_lp + torch.randn(n, generator=g) * 0.4  # many ratios outside 1 ± clip
    old_v = torch.randn(n, generator=g)
    new_v = old_v + torch.randn(n, generator=g) * 0.5
    return (new_lp, torch.rand(n, generator=g) + 0.5, new_v, old_lp, old_v,
            torch.randn(n, generator=g) * 2 + 0.7, torch.randn(n, generator=g) * 2)


@pytest.mark.parametrize("norm_adv", [True, False])
@pytest.mark.parametrize("clip_vloss", [True, False])
@pytest.mark.parametrize("clip_coef", [0.1, 0.3])
def test_ppo_loss_equals_cleanrl_for_every_setting(norm_adv, clip_vloss, clip_coef):
    args = _loss_inputs(int(norm_adv) + 2 * int(clip_vloss) + int(10 * clip_coef))
    out = ppo_loss(*args, clip_coef=clip_coef, ent_coef=0.03, vf_coef=0.7, norm_adv=norm_adv, clip_vloss=clip_vloss)
    ref = _cleanrl_loss(*args, clip_coef, 0.03, 0.7, norm_adv, clip_vloss)
    for name, got, want in zip(out._fields, out, ref):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=name)
    assert 0.1 < float(out.clip_fraction) < 0.9  # the clip is exercised both ways


@pytest.mark.parametrize("norm_adv", [True, False])
def test_ppo_loss_on_sequence_minibatches_equals_the_flattened_rows(norm_adv):
    """A recurrent minibatch is [B, L]: advantages are normalised over all of its B*L rows, not per axis."""
    args = _loss_inputs(7, n=48)
    seq = ppo_loss(*(a.view(6, 8) for a in args), norm_adv=norm_adv)
    flat = ppo_loss(*args, norm_adv=norm_adv)
    for name, a, b in zip(seq._fields, seq, flat):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_ppo_loss_gradient_pushes_up_positive_advantage_actions_and_entropy():
    new_lp = torch.zeros(2, requires_grad=True)
    ent = torch.ones(2, requires_grad=True)
    out = ppo_loss(new_lp, ent, torch.zeros(2), torch.zeros(2), torch.zeros(2), torch.tensor([1.0, -1.0]),
                   torch.zeros(2), ent_coef=0.1, norm_adv=False)
    out.loss.backward()
    torch.testing.assert_close(new_lp.grad, torch.tensor([-0.5, 0.5]))  # minimising raises the good action
    torch.testing.assert_close(ent.grad, torch.tensor([-0.05, -0.05]))  # and raises entropy


# ------------------------------------------------------------------ the module uses its hparams
def _module_batch(policy, seed=0, n=32):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 4, generator=g)
    with torch.no_grad():
        actions, logprobs, values = policy.act(obs, g)
    return dict(obs=obs, actions=actions, logprobs=logprobs - torch.randn(n, generator=g) * 0.3,
                values=values + torch.randn(n, generator=g) * 0.5, advantages=torch.randn(n, generator=g) * 3 + 1,
                returns=torch.randn(n, generator=g) * 2)


@pytest.mark.parametrize("norm_adv,clip_vloss", [(True, True), (False, False), (True, False)])
def test_training_step_returns_the_loss_with_the_modules_own_coefficients(norm_adv, clip_vloss):
    hp = dict(clip_coef=0.15, ent_coef=0.05, vf_coef=0.8, norm_adv=norm_adv, clip_vloss=clip_vloss)
    module = PPOModule(anneal_lr=False, hidden_sizes=(8,), **hp)
    torch.manual_seed(0)
    module.policy = ActorCritic((4,), ActionSpec("discrete", nvec=(3,)), (8,))
    batch = _module_batch(module.policy)
    loss = module.training_step(batch, 1)
    lp, ent, v = module.policy.evaluate(batch["obs"], batch["actions"])
    args = (lp, ent, v, batch["logprobs"], batch["values"], batch["advantages"], batch["returns"])
    want = ppo_loss(*args, **hp).loss
    torch.testing.assert_close(loss, want)
    flipped = ppo_loss(*args, **{**hp, "norm_adv": not norm_adv, "clip_vloss": not clip_vloss}).loss
    assert abs(float(want.detach()) - float(flipped.detach())) > 1e-3  # the flags matter at these inputs


# ------------------------------------------------------------------ optimisation details in a fit
class GradNorms(pl.Callback):
    """Total grad norm before clipping (Lightning clips after this hook) and after the step."""

    def __init__(self):
        self.before, self.after, self.lrs, self.eps = [], [], [], []

    @staticmethod
    def _norm(module):
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.before.append(self._norm(pl_module))
        self.lrs.append(optimizer.param_groups[0]["lr"])
        self.eps.append(optimizer.param_groups[0]["eps"])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.after.append(self._norm(pl_module))  # gradients are zeroed only in the next closure


def _tally_dm(made, **kw):
    args = dict(num_envs=6, num_steps=8, update_epochs=1, num_minibatches=2)
    return RolloutDataModule(env=_factory(made), **{**args, **kw})


def test_gradients_are_clipped_to_max_grad_norm_and_gradient_clip_val_wins():
    pl.seed_everything(0)
    rec = GradNorms()
    _trainer(2, [rec]).fit(PPOModule(anneal_lr=False, hidden_sizes=(16,), max_grad_norm=0.05), datamodule=_tally_dm([]))
    assert len(rec.before) == 4 and min(rec.before) > 0.5
    assert all(math.isclose(a, 0.05, rel_tol=1e-3) for a in rec.after), rec.after
    rec = GradNorms()
    _trainer(1, [rec], gradient_clip_val=0.2).fit(PPOModule(anneal_lr=False, hidden_sizes=(16,), max_grad_norm=0.05),
                                                  datamodule=_tally_dm([]))
    assert all(math.isclose(a, 0.2, rel_tol=1e-3) for a in rec.after), rec.after
    rec = GradNorms()  # None: not clipped
    _trainer(1, [rec]).fit(PPOModule(anneal_lr=False, hidden_sizes=(16,), max_grad_norm=None), datamodule=_tally_dm([]))
    assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(rec.after, rec.before))


def test_lr_anneals_linearly_from_full_at_the_first_iteration_and_adam_eps_is_used():
    pl.seed_everything(0)
    rec = GradNorms()
    _trainer(4, [rec]).fit(PPOModule(lr=0.01, adam_eps=1e-3, hidden_sizes=(16,)), datamodule=_tally_dm([]))
    per_iteration = rec.lrs[::2]
    assert rec.lrs[1::2] == per_iteration  # constant within an iteration
    torch.testing.assert_close(torch.tensor(per_iteration), torch.tensor([0.01, 0.0075, 0.005, 0.0025]))
    assert set(rec.eps) == {1e-3}


def test_fused_adam_is_opt_in_and_trains_like_the_default_up_to_rounding():
    """model.fused_adam builds torch's fused Adam; off (default) is the plain one. The same seed
    gives the same weights up to float rounding (the fused kernel sums in another order)."""
    weights = {}
    for fused in (False, True):
        pl.seed_everything(0)
        module = PPOModule(lr=0.01, hidden_sizes=(16,), fused_adam=fused)
        _trainer(3).fit(module, datamodule=_tally_dm([]))
        assert bool(module.trainer.optimizers[0].defaults.get("fused")) is fused
        weights[fused] = torch.cat([p.detach().flatten() for p in module.policy.parameters()])
    torch.testing.assert_close(weights[True], weights[False], rtol=1e-4, atol=1e-5)
    assert PPOModule().hparams.fused_adam is False


class StepsPerIteration(pl.Callback):
    def __init__(self):
        self.steps, self._start = [], 0

    def on_train_epoch_start(self, trainer, pl_module):
        self._start = trainer.global_step

    def on_train_epoch_end(self, trainer, pl_module):
        self.steps.append(trainer.global_step - self._start)


@pytest.mark.parametrize("target_kl,most", [(None, 8), (1e9, 8), (1e-9, 2)])
def test_target_kl_cuts_the_update_short_in_every_iteration_and_only_when_exceeded(target_kl, most):
    """4 epochs x 2 minibatches: a tiny target stops after at most one epoch, in every iteration
    (the first minibatch of an iteration has KL 0: the policy has not moved yet)."""
    pl.seed_everything(0)
    rec = StepsPerIteration()
    module = PPOModule(lr=0.01, anneal_lr=False, hidden_sizes=(16,), target_kl=target_kl)
    _trainer(3, [rec]).fit(module, datamodule=_tally_dm([], update_epochs=4))
    assert len(rec.steps) == 3
    if most == 8:
        assert rec.steps == [8, 8, 8]
    else:
        assert all(1 <= s <= most for s in rec.steps), rec.steps


def test_a_target_kl_stop_in_one_iteration_does_not_cut_the_next():
    """The stop is per rollout: iteration 0 stops (tiny target), then the target is raised and
    iteration 1 must run all 4 epochs x 2 minibatches."""
    pl.seed_everything(0)
    rec = StepsPerIteration()

    class Raise(pl.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            pl_module.hparams.target_kl = 1e9

    module = PPOModule(lr=0.01, anneal_lr=False, hidden_sizes=(16,), target_kl=1e-9)
    _trainer(2, [rec, Raise()]).fit(module, datamodule=_tally_dm([], update_epochs=4))
    assert rec.steps[0] <= 2 and rec.steps[1] == 8, rec.steps


class LossReference(pl.Callback):
    """Each minibatch's ppo_loss parts, recomputed before its optimizer step with the module's hparams."""

    def __init__(self):
        self.parts, self.rows = [], []

    def on_train_epoch_start(self, trainer, pl_module):
        self.parts, self.rows = [], []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        hp = pl_module.hparams
        with torch.no_grad():
            lp, ent, v = pl_module.policy.evaluate(batch["obs"], batch["actions"])
            out = ppo_loss(lp, ent, v, batch["logprobs"], batch["values"], batch["advantages"], batch["returns"],
                           hp.clip_coef, hp.ent_coef, hp.vf_coef, hp.norm_adv, hp.clip_vloss)
        names = {"policy_loss": "policy_loss", "value_loss": "value_loss", "entropy": "entropy",
                 "approx_kl": "approx_kl", "old_approx_kl": "old_approx_kl", "clipfrac": "clip_fraction"}
        self.parts.append({tag: float(getattr(out, field)) for tag, field in names.items()})  # CleanRL tag -> field
        self.rows.append(batch["advantages"].numel())


def test_logged_losses_are_this_iterations_row_weighted_means_over_its_minibatches():
    pl.seed_everything(0)
    ref = LossReference()
    trainer = _trainer(2, [ref])
    trainer.fit(PPOModule(lr=0.01, anneal_lr=False, hidden_sizes=(16,)), datamodule=_tally_dm([], update_epochs=2))
    assert len(ref.parts) == 4
    for k in ref.parts[0]:
        want = sum(p[k] * r for p, r in zip(ref.parts, ref.rows)) / sum(ref.rows)
        got = float(trainer.callback_metrics[f"losses/{k}"])
        assert math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-6), (k, got, want)
    assert float(trainer.callback_metrics["losses/approx_kl"]) > 0


class KeepRollout(RolloutCallback):
    def on_rollout_end(self, trainer, pl_module, rollout):
        self.returns, self.values = rollout.buffer.returns.clone(), rollout.buffer.values.clone()


def test_explained_variance_is_one_minus_var_of_residuals_over_var_of_returns():
    pl.seed_everything(0)
    keep = KeepRollout()
    trainer = _trainer(6, [keep])  # the last rollout's value is logged last; by then the critic has learnt
    trainer.fit(PPOModule(lr=0.03, anneal_lr=False, hidden_sizes=(16,)), datamodule=_tally_dm([], update_epochs=4))
    y, v = keep.returns.flatten().double(), keep.values.flatten().double()
    want = 1 - (y - v).var() / y.var()
    got = float(trainer.callback_metrics["losses/explained_variance"])
    assert math.isclose(got, float(want), rel_tol=1e-4, abs_tol=1e-5), (got, float(want))
    assert float(want) > 0.05 and abs(float(want) - (1 - float(((y - v).var() / v.var())))) > 0.05
