"""The end of an update epoch has one named place: the loader marks the last minibatch of every
update epoch (`UPDATE_EPOCH_END`) and PPOModule runs `on_update_epoch_end` (its one collective: the
target-KL and non-finite stops) after exactly those minibatches, never by counting batch indices."""

import lightning.pytorch as pl

from parlightning.buffer import UPDATE_EPOCH_END
from parlightning.ppo.data import RolloutDataModule
from parlightning.envs.swarm import SwarmEnv
from parlightning.ppo.module import PPOModule


def _env(num_envs, device, seed):
    return SwarmEnv(num_envs=num_envs, device=device, seed=seed, families=("solo", "fanout"))


class Trace(pl.Callback):
    """(epoch, batch_idx, flag) per trained minibatch."""

    def __init__(self):
        self.flags = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.flags.append((trainer.current_epoch, batch_idx, batch[UPDATE_EPOCH_END]))


def _fit(tmp_path, module, epochs=2, update_epochs=3, num_minibatches=2):
    calls = []
    original = module.on_update_epoch_end

    def counted():
        calls.append((module.trainer.current_epoch, module.trainer.fit_loop.epoch_loop.batch_idx))
        original()

    module.on_update_epoch_end = counted
    trace = Trace()
    dm = RolloutDataModule(env=_env, num_envs=8, num_steps=4, update_epochs=update_epochs,
                           num_minibatches=num_minibatches)
    pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, callbacks=[trace], default_root_dir=tmp_path).fit(module, datamodule=dm)
    return trace.flags, calls


def test_the_loader_marks_the_last_minibatch_of_each_update_epoch_and_the_hook_runs_after_it(tmp_path):
    flags, calls = _fit(tmp_path, PPOModule(anneal_lr=False), update_epochs=3, num_minibatches=2)
    assert [f for _, _, f in flags] == [False, True] * 3 * 2  # 3 update epochs x 2 minibatches, 2 iterations
    marked = [(e, i) for e, i, f in flags if f]
    assert marked == [(e, i) for e in range(2) for i in (1, 3, 5)]
    assert len(calls) == 6  # once per update epoch, after its last minibatch


def test_a_target_kl_stop_is_decided_at_the_marked_boundary(tmp_path):
    flags, calls = _fit(tmp_path, PPOModule(anneal_lr=False, target_kl=1e-9), update_epochs=3, num_minibatches=2)
    assert [(i, f) for _, i, f in flags] == [(0, False), (1, True)] * 2  # the update stops after one update epoch
    assert len(calls) == 2


def test_one_minibatch_per_update_epoch_marks_every_batch(tmp_path):
    flags, calls = _fit(tmp_path, PPOModule(anneal_lr=False), epochs=1, update_epochs=2, num_minibatches=1)
    assert [f for _, _, f in flags] == [True, True] and len(calls) == 2
