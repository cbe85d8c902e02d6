"""Round 19's classes (`scripts/bad_inputs_round19.py`, measured before these fixes): a checkpoint
tensor with no plain bytes (sparse, quantized, nested, on the meta device) given to export, the
loaders or `stamp_checkpoint`; a checkpoint's `policy_spaces` entry that describes no policy (a zero
category count, a shape that is text) or weights that do not fit the policy its own record builds,
named by the entry; an HTTP pool's empty `success_marker` (every reply holds it) or `api_key`; and
every signal whose default action ends the program without a word (SIGALRM, SIGQUIT, ...), not only
SIGTERM / SIGHUP / SIGUSR1 / SIGUSR2 / SIGXCPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from parlightning.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SWARM = str(ROOT / "configs" / "swarm.yaml")
TINY = ["--data.num_envs", "8", "--data.num_steps", "8", "--trainer.max_epochs", "1",
        "--trainer.enable_model_summary", "false", "--trainer.enable_progress_bar", "false"]


def _quantized() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.ones(4, 78), 0.1, 0, torch.qint8)


# ------------------------------------------------------------------ tensors with no plain bytes
@pytest.mark.parametrize("make, says", [
    (lambda: torch.empty(3, device="meta"), "state_dict.w is a tensor on the meta device (a shape without data)"),
    (lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), "state_dict.w is a nested tensor of torch.float32 "
                                                                         "whose bytes cannot be read"),
])
def test_stamp_checkpoint_names_a_tensor_with_no_bytes_to_checksum(make, says):
    from parlightning.runtime.checkpoint import stamp_checkpoint

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's prototype warning for nested tensors
        tensor = make()
    with pytest.raises(ConfigError) as err:
        stamp_checkpoint({"state_dict": {"w": tensor}, "epoch": 1})
    assert str(err.value).startswith("stamp_checkpoint(checkpoint): ") and says in str(err.value), str(err.value)


def test_a_stamped_file_holding_a_meta_tensor_is_named_at_load(monkeypatch):
    from parlightning.runtime.checkpoint import CHECKSUM_KEY, stamp_checkpoint, verify_checkpoint

    ck = stamp_checkpoint({"state_dict": {"w": torch.ones(3)}})
    ck["state_dict"]["w"] = torch.empty(3, device="meta")  # stamped over data, then replaced by a shape alone
    with pytest.raises(ConfigError) as err:
        verify_checkpoint(ck, "c.ckpt")
    assert str(err.value).startswith("--ckpt_path: 'c.ckpt': state_dict.w is a tensor on the meta device"), str(err.value)
    del ck[CHECKSUM_KEY]  # loaded unchecked (PARLIGHTNING_UNCHECKED_CHECKPOINTS=1): still refused, by its kind
    monkeypatch.setenv("PARLIGHTNING_UNCHECKED_CHECKPOINTS", "1")
    with pytest.raises(ConfigError, match=r"holds a meta-device \(data-less\) tensor at state_dict.w"):
        verify_checkpoint(ck, "c.ckpt")


@pytest.mark.parametrize("where, make, kind", [
    ("state_dict", lambda v: v.to_sparse(), "sparse_coo"),
    ("state_dict", lambda v: v.to_sparse_csr(), "sparse_csr"),
    ("state_dict", lambda v: _quantized(), "quantized"),
    ("optimizer_states", lambda v: v.to_sparse(), "sparse_coo"),
])
def test_export_and_the_loaders_refuse_a_weight_that_is_not_a_dense_tensor(ckpt, restamped, where, make, kind):
    from parlightning import load_policy
    from parlightning.cli.export import load_policy as export_load

    def edit(ck):
        if where == "state_dict":
            ck["state_dict"]["policy.critic.0.weight"] = make(ck["state_dict"]["policy.critic.0.weight"])
        else:
            state = ck["optimizer_states"][0]["state"][0]
            state["exp_avg"] = make(state["exp_avg"])

    path = restamped(edit)
    key = "state_dict.policy.critic.0.weight" if where == "state_dict" else "optimizer_states.0.state.0.exp_avg"
    for load in (export_load, load_policy):
        with pytest.raises(ConfigError) as err:
            load(path)
        assert f"holds a {kind} tensor at {key}, which no save of python -m parlightning.fit writes" in str(err.value), \
            str(err.value)
    export_load(ckpt)  # the unedited file still loads


# ------------------------------------------------------------------ policy_spaces and weights named by the entry
def _spaces(ck) -> dict:
    return ck["policy_spaces"]


@pytest.mark.parametrize("edit, says", [
    (lambda ck: _spaces(ck)["action_spec"].__setitem__("nvec", [0] * len(_spaces(ck)["action_spec"]["nvec"])),
     "policy_spaces.action_spec.nvec: [0, 0,"),
    (lambda ck: _spaces(ck).__setitem__("observation_shape", "13x6"), "policy_spaces.observation_shape: '13x6' is not a "
                                                                     "list of sizes, each an int >= 1"),
    (lambda ck: _spaces(ck).__setitem__("observation_shape", [13, -6]), "policy_spaces.observation_shape: [13, -6]"),
    (lambda ck: _spaces(ck)["action_spec"].pop("kind"), "policy_spaces.action_spec: {"),
    (lambda ck: _spaces(ck)["action_spec"].__setitem__("kind", "discrete"), "policy_spaces.action_spec.nvec: a discrete "
                                                                            "action is one category"),
])
def test_a_policy_spaces_entry_that_describes_no_policy_is_named(restamped, edit, says):
    from parlightning import load_policy
    from parlightning.cli.export import load_policy as export_load

    from parlightning.ppo.module import PPOModule

    path = restamped(edit)
    for load, flag in ((export_load, "--ckpt_path"), (load_policy, "load_policy(path)")):
        with pytest.raises(ConfigError) as err:
            load(path)
        assert str(err.value).startswith(f"{flag}: {path!r}: {says}"), str(err.value)
    with pytest.raises(ConfigError) as err:  # Lightning's own loader: the module rebuilds the policy from the entry
        PPOModule.load_from_checkpoint(path)
    assert str(err.value).startswith(says), str(err.value)


def test_weights_that_do_not_fit_name_the_saved_values_the_shapes_follow(restamped):
    from parlightning import load_policy
    from parlightning.cli.export import load_policy as export_load

    path = restamped(lambda ck: ck["hyper_parameters"].__setitem__("hidden_sizes", [32, 32]))
    for load, key in ((export_load, "critic.0.weight"), (load_policy, "policy.critic.0.weight")):
        with pytest.raises(ConfigError) as err:
            load(path)
        text = str(err.value)
        assert f"its weights do not fit the policy its own policy_spaces and hyper_parameters build ({key} is [64, 78] " \
               "in the checkpoint, [32, 78] here; its shapes follow policy_spaces.observation_shape [13, 6], " in text, text
        assert "hyper_parameters.hidden_sizes [32, 32]" in text, text
    # a key, not a shape: the misfit alone (no shapes to explain)
    path = restamped(lambda ck: ck["state_dict"].__setitem__("policy.extra.weight", torch.zeros(2)))
    with pytest.raises(ConfigError) as err:
        export_load(path)
    assert "(unexpected ['extra.weight']): one of them was edited" in str(err.value), str(err.value)


# ------------------------------------------------------------------ HTTP pools
@pytest.mark.parametrize("pool", ["HTTPPool", "AsyncHTTPPool"])
@pytest.mark.parametrize("field, says", [
    ("success_marker", "success_marker is '', which every reply contains, so every answer would count as a success"),
    ("api_key", "api_key is '' (an unset environment variable?): the requests would go without a key"),
])
def test_an_http_pool_refuses_an_empty_marker_or_key(pool, field, says):
    import parlightning.subagents as subagents

    with pytest.raises(ValueError, match=rf"^{pool}: {field} is ''") as err:
        getattr(subagents, pool)(base_url="http://127.0.0.1:9", probe=False, **{field: ""})
    assert says in str(err.value)
    getattr(subagents, pool)(base_url="http://127.0.0.1:9", probe=False, **{field: None})  # null: no marker / no key


# ------------------------------------------------------------------ signals
def test_every_signal_whose_default_ends_the_program_raises_signalled():
    from parlightning.cli.stop_signals import KILLING, Signalled, stop_on_signals

    names = {signal.Signals(s).name for s in KILLING}
    assert {"SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGXCPU", "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGQUIT",
            "SIGIO", "SIGPWR"} <= names
    assert not names & {"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGPIPE", "SIGXFSZ", "SIGCHLD"}
    for signum in KILLING:
        if signum == signal.SIGTERM or signal.getsignal(signum) != signal.SIG_DFL:
            continue  # pytest or xdist may hold one; the block only takes signals at their default
        with pytest.raises(Signalled) as err:
            with stop_on_signals(after=" (test)"):
                os.kill(os.getpid(), signum)  # the handler runs in this (main) thread before the next line
                pytest.fail(f"{signal.Signals(signum).name} did not stop the block")
        assert err.value.signum == signum and err.value.code == 128 + signum
        assert signal.getsignal(signum) == signal.SIG_DFL  # the default is back after the block


WORLD = '''
import os
import signal

from parlightning.envs.swarm import SwarmEnv


class SignalsItself(SwarmEnv):
    """Sends its own process the signal named in R19_SIGNAL at its 3rd step (as a timer or Ctrl-\\\\ would)."""

    def step(self, *args, **kwargs):
        self._n = getattr(self, "_n", 0) + 1
        if self._n == 3:
            os.kill(os.getpid(), getattr(signal, os.environ["R19_SIGNAL"]))
        return super().step(*args, **kwargs)
'''


@pytest.mark.parametrize("name", ["SIGALRM", "SIGQUIT"])
def test_a_fit_sent_a_timer_or_quit_signal_ends_with_one_line_and_the_shells_code(tmp_path, name):
    (tmp_path / "r19signals.py").write_text(WORLD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]), "R19_SIGNAL": name}
    signum = getattr(signal, name)
    # the signal at its default action, as in a terminal's foreground job: a background job of a
    # non-interactive shell inherits SIGINT and SIGQUIT ignored (POSIX), and the program keeps an
    # ignored signal ignored, as it keeps nohup's SIGHUP (CI may start the suite that way)
    proc = subprocess.run([sys.executable, "-m", "parlightning.fit", "--config", SWARM, "--data.env",
                           "r19signals.SignalsItself", *TINY, "--trainer.default_root_dir", str(tmp_path / "runs")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: signal.signal(signum, signal.SIG_DFL))
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 128 + signum, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"error: {name}: stopped by a signal"), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs" / "lightning_logs" / "version_0").exists()  # stopped in its first rollout: nothing kept
