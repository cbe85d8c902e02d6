"""`python -m parlightning.export`: a trained policy as a torch.export program (and ONNX) whose greedy
actions equal the policy's, run in a fresh process that never imports parlightning."""

import glob
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from parlightning.envs.base import ActionSpec
from parlightning.errors import ConfigError
from parlightning.cli.export import GreedyPolicy, export_policy, load_policy, main as export_main
from parlightning.cli.fit import main as fit_main
from parlightning.policies.actor_critic import ActorCritic
from parlightning.policies.recurrent import RecurrentActorCritic

ROOT = os.path.join(os.path.dirname(__file__), "..")

RUN_WITHOUT_PARLIGHTNING = textwrap.dedent("""
    import sys, torch
    for name in sys.argv[1:]:
        program = torch.export.load(name + ".pt2").module()
        obs = torch.load(name + ".obs.pt")
        torch.save(program(obs), name + ".actions.pt")
        torch.save(program(obs[:1]), name + ".first.pt")  # the batch dimension is dynamic, down to 1
    assert "parlightning" not in sys.modules and not any(m.startswith("parlightning.") for m in sys.modules)
""")


@pytest.fixture(scope="module")
def cartpole_ckpt(tmp_path_factory):
    """A real checkpoint of a 1-iteration CartPole fit (discrete actions, 4-dim observations)."""
    root = tmp_path_factory.mktemp("fit")
    fit_main(["--config", os.path.join(ROOT, "configs", "cartpole_tensor.yaml"), "--trainer.max_epochs", "1",
              "--data.num_envs", "8", "--data.num_steps", "16", "--trainer.enable_progress_bar", "false",
              "--trainer.enable_model_summary", "false", "--trainer.logger", "false",
              "--trainer.default_root_dir", str(root)])
    (ckpt,) = glob.glob(str(root / "checkpoints" / "*.ckpt"))
    return ckpt


def _reference(policy, obs):
    """Greedy actions computed by hand from the actor's raw outputs."""
    out = policy.actor(obs.flatten(1))
    spec = policy.action_spec
    if spec.kind == "continuous":
        return out.reshape(obs.shape[0], *spec.shape)
    parts = [p.argmax(-1) for p in out.split(list(spec.nvec), dim=-1)]
    return parts[0] if spec.kind == "discrete" else torch.stack(parts, -1)


def test_exported_programs_match_the_policy_in_a_process_without_parlightning(cartpole_ckpt, tmp_path):
    torch.manual_seed(0)
    export_main(["--ckpt_path", cartpole_ckpt, "--out", str(tmp_path / "cartpole.pt2")])
    trained, obs_shape = load_policy(cartpole_ckpt)
    assert obs_shape == (4,) and trained.action_spec.kind == "discrete"
    cases = {  # name: (policy, observation shape)
        "cartpole": (trained, obs_shape),
        "multi": (ActorCritic((2, 3), ActionSpec("multi_discrete", nvec=(3, 2, 5))), (2, 3)),  # padded heads, 2-D obs
        "box": (ActorCritic((5,), ActionSpec("continuous", shape=(2,), low=-1.0, high=1.0)), (5,)),
    }
    expected = {}
    for name, (policy, shape) in cases.items():
        if name != "cartpole":
            for p in policy.parameters():  # away from init (zero log-std, tiny actor outputs)
                p.data.normal_(0, 0.5)
            export_policy(policy, shape, tmp_path / f"{name}.pt2")
        obs = torch.randn(64, *shape) * 2
        torch.save(obs, tmp_path / f"{name}.obs.pt")
        with torch.no_grad():
            expected[name] = _reference(policy, obs)
            assert torch.equal(GreedyPolicy(policy)(obs), expected[name])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-c", RUN_WITHOUT_PARLIGHTNING, *(str(tmp_path / n) for n in cases)],
                   cwd=tmp_path, env=env, check=True, timeout=300)
    for name, want in expected.items():
        got, first = (torch.load(tmp_path / f"{name}.{part}.pt") for part in ("actions", "first"))
        assert got.shape == want.shape and got.dtype == want.dtype, name
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)  # integers: exact
        torch.testing.assert_close(first, want[:1], rtol=0, atol=1e-6)
    assert set(expected["cartpole"].tolist()) == {0, 1}  # both actions occur: the comparison has teeth
    assert expected["multi"].shape == (64, 3) and expected["box"].shape == (64, 2)


def test_onnx_export_matches_the_policy(cartpole_ckpt, tmp_path):
    onnx = pytest.importorskip("onnx", reason="the onnx extra: pip install parlightning[onnx]")
    pytest.importorskip("onnxscript", reason="the onnx extra: pip install parlightning[onnx]")
    from onnx.reference import ReferenceEvaluator

    export_main(["--ckpt_path", cartpole_ckpt, "--out", str(tmp_path / "policy.onnx")])  # format from the suffix
    policy, _ = load_policy(cartpole_ckpt)
    obs = torch.randn(32, 4) * 2
    (actions,) = ReferenceEvaluator(onnx.load(tmp_path / "policy.onnx")).run(None, {"obs": obs.numpy()})
    with torch.no_grad():
        assert torch.equal(torch.from_numpy(actions), _reference(policy, obs))


def test_export_refuses_what_it_cannot_export_with_one_error_line(cartpole_ckpt, tmp_path, monkeypatch, capsys):
    for args, line in (  # argparse's refusals (exit 2): one `prog: error: argument --x: ...` line
            (["--ckpt_path", str(tmp_path / "missing.ckpt"), "--out", str(tmp_path / "p.pt2")],
             "error: argument --ckpt_path: no file at"),
            (["--ckpt_path", cartpole_ckpt, "--out", str(tmp_path / "nowhere" / "p.pt2")], "error: argument --out: the folder")):
        with pytest.raises(SystemExit) as exit_:
            export_main(args)
        errors = [ln for ln in capsys.readouterr().err.splitlines() if "error:" in ln]
        assert exit_.value.code == 2 and len(errors) == 1 and line in errors[0], errors
    with pytest.raises(ConfigError, match="recurrent policy"):
        GreedyPolicy(RecurrentActorCritic((4,), ActionSpec("discrete", nvec=(2,))))
    with pytest.raises(ConfigError, match="keyed policy"):
        GreedyPolicy(ActorCritic((4,), ActionSpec("discrete", nvec=(2,)), n_keys=3))
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if the onnx extra were not installed
    with pytest.raises(SystemExit, match=r"^error: --format onnx: needs the onnx extra"):
        export_main(["--ckpt_path", cartpole_ckpt, "--out", str(tmp_path / "p.bin"), "--format", "onnx"])
    assert sorted(os.listdir(tmp_path)) == []  # nothing half-written
