"""A corpus of bad inputs and faults, run through the real CLI (`parlightning.fit.main`), each
outcome classified:

    clean       one `error:` line, a non-zero exit, no traceback, nothing written
    traceback   a Python traceback (or more than one error line)
    hang        no answer within --timeout seconds (the case's process is killed)
    accepted    exit 0: the bad value was silently accepted
    messy       a non-zero exit without an `error:` line, or files left behind

Every case runs in its own process, forked from this one once `parlightning.fit` is imported (so a
case costs its own work, not an interpreter start), in its own empty folder. Prints one row per
case that is not clean, the counts and the clean share.

    python scripts/bad_inputs.py            # every case (a few minutes on 2 cores)
    python scripts/bad_inputs.py --quick    # a subset of each kind (tests/test_bad_inputs_corpus.py runs it)
    python scripts/bad_inputs.py --list     # the cases, without running them
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
CONFIG = str(ROOT / "configs" / "swarm.yaml")
EXTERNAL = str(ROOT / "configs" / "external.yaml")
BASE = ["--trainer.max_epochs", "2", "--data.num_envs", "8", "--data.num_steps", "4",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


class Case(NamedTuple):
    kind: str
    name: str
    args: list[str]  # after --config CONFIG BASE; "{dir}" is the case's folder, "{ckpt}" a good checkpoint there
    files: dict[str, bytes] = {}  # written into the case's folder first
    config: str = CONFIG
    quick: bool = False


# ---------------------------------------------------------------------------------- fault worlds
class _World:
    """A small correct external world (2 actions, 2 features, episodes of 2 steps, one task bank)."""

    tasks = ["a-0", "a-1"]
    observation_shape = (2,)
    action_spec = {"kind": "discrete", "nvec": [2]}

    def __init__(self, seed: int = 0, actor: int = 0) -> None:
        self.actor, self.t = actor, 0

    def reset(self, task: Any) -> Any:
        self.t = 0
        return [0.0, 0.0]

    def step(self, action: Any) -> Any:
        self.t += 1
        done = self.t >= 2
        return [float(self.t), 0.0], 1.0, done, False, ({"outcome": 1.0} if done else None)


def _faulty(field: str, value: Any) -> type:
    class Faulty(_World):
        def step(self, action: Any) -> Any:
            obs, reward, term, trunc, parts = super().step(action)
            out = {"obs": obs, "reward": reward, "terminated": True, "truncated": trunc,
                   "parts": {"outcome": 1.0}}
            if field.startswith("parts."):
                out["parts"][field[6:]] = value
            else:
                out[field] = value
            return out["obs"], out["reward"], out["terminated"], out["truncated"], out["parts"]

    return Faulty


class RaisingWorld(_World):
    def step(self, action: Any) -> Any:
        raise KeyError("tool result has no 'id'")


class HangingWorld(_World):
    def step(self, action: Any) -> Any:
        time.sleep(3600)


class ExitingWorld(_World):
    def step(self, action: Any) -> Any:
        os._exit(3)


class NoShapeWorld(_World):
    observation_shape = None  # type: ignore[assignment]


WORLD_FAULTS = {
    "obs_too_long": ("obs", [1.0, 2.0, 3.0]), "obs_string": ("obs", "ready"), "obs_none": ("obs", None),
    "obs_nested": ("obs", [[1.0], [2.0, 3.0]]), "reward_none": ("reward", None), "reward_string": ("reward", "1"),
    "reward_list": ("reward", [1.0]), "reward_nan": ("reward", math.nan), "reward_inf": ("reward", math.inf),
    "terminated_string": ("terminated", "yes"), "terminated_none": ("terminated", None),
    "parts_list": ("parts", [1.0]), "parts_unknown": ("parts.speed", 1.0), "outcome_nan": ("parts.outcome", math.nan),
    "outcome_string": ("parts.outcome", "high"), "n_subagents_inf": ("parts.n_subagents", math.inf),
    "completed_none": ("parts.completed", None),
}
for _name, (_field, _value) in WORLD_FAULTS.items():
    globals()[f"World_{_name}"] = _faulty(_field, _value)
    globals()[f"World_{_name}"].__name__ = globals()[f"World_{_name}"].__qualname__ = f"World_{_name}"


def make_bad_shape_env(num_envs: int, device: str, seed: int):  # no return annotation
    return None


# ---------------------------------------------------------------------------------- the corpus
def _grid() -> list[Case]:
    """Bad values for numeric fields (values a field legitimately takes are left out)."""
    fields = {
        "model.lr": ["0", "-1", "nan", "inf", "abc", "[1]"],
        "model.clip_coef": ["0", "-0.2", "nan", "abc"],
        "model.vf_coef": ["-1", "nan", "abc"],
        "model.ent_coef": ["-0.01", "nan", "inf", "abc"],
        "model.max_grad_norm": ["0", "-1", "nan", "abc"],
        "model.adam_eps": ["0", "-1e-5", "nan"],
        "model.target_kl": ["0", "-0.1", "nan"],
        "model.hidden_sizes": ["[0]", "[-8]", "[]", "abc", "[64.5]", "[200000, 200000]"],
        "model.activation": ["sigmoidal", "5"],
        "model.policy": ["transformer", "3"],
        "model.rnn_hidden": ["0", "-4"],
        "data.num_envs": ["0", "-8", "abc", "1.5", "50000000"],
        "data.num_steps": ["0", "-4", "abc", "2.5"],
        "data.update_epochs": ["0", "-1", "abc"],
        "data.num_minibatches": ["0", "-2", "3", "1000"],
        "data.max_policy_lag": ["-1", "abc"],
        "data.seed": ["-1", "4294967296", "abc"],
        "data.bptt_len": ["4", "0"],
        "data.collect_in": ["gpu", "5"],
        "trainer.max_epochs": ["-5", "abc", "1.5"],
        "trainer.devices": ["0", "abc", "-3"],
        "trainer.accelerator": ["tpu9", "5"],
        "trainer.precision": ["7", "abc"],
        "trainer.default_root_dir": ["/proc/none", "/dev/null/x"],
        "trainer.gradient_clip_val": ["-1", "abc"],
        "seed_everything": ["-1", "4294967296", "abc"],
        "torch_threads": ["0", "-2", "abc"],
        "data.env.init_args.max_width": ["0", "-3", "abc", "100000"],
        "data.env.init_args.max_subagents": ["0", "-1", "abc"],
        "data.env.init_args.families": ["[nosuch]", "[]", "5"],
        "data.env.init_args.tasks_per_family": ["0", "-2"],
        "data.env.init_args.subagent_reliability": ["1.5", "-0.1", "nan"],
        "data.env.init_args.max_episode_steps": ["0", "-1"],
        "data.reward.init_args.max_subagents": ["0", "-1", "7"],
    }
    quick = {("model.lr", "-1"), ("model.ent_coef", "-0.01"), ("data.num_envs", "0"), ("trainer.max_epochs", "abc"),
             ("data.env.init_args.max_width", "100000"), ("model.hidden_sizes", "[200000, 200000]")}
    return [Case("argument", f"{field}={value}", [f"--{field}", value], quick=(field, value) in quick)
            for field, values in fields.items() for value in values]


BOMB = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['1'] * 9)}]\n"
               for p, c in zip(["", "a", "b", "c", "d", "e", "f"], "abcdefg")) + "model:\n  hidden_sizes: *g\n"


def _config_files() -> list[Case]:
    files = {
        "trainer_int": b"trainer: 5\n", "model_null": b"model: null\n", "data_list": b"data: []\n",
        "not_utf8": b"model:\n  lr: \xff\xfe\n", "alias_bomb": BOMB.encode(), "duplicate_key": b"model:\n  lr: 1\n  lr: 2\n",
        "empty": b"", "top_list": b"- 1\n- 2\n", "unknown_section": b"modle:\n  lr: 0.1\n",
        "unknown_key": b"model:\n  learning_rate: 0.1\n", "string_lr": b"model:\n  lr: fast\n",
        "tabs": b"model:\n\tlr: 0.1\n", "bad_yaml": b"model: [1, 2\n", "optimizer": b"optimizer: Adam\n",
        "binary": bytes(range(256)), "env_bad_init_args": b"data:\n  env:\n    init_args: {max_width: -4}\n",
        "env_bad_class": b"data:\n  env:\n    class_path: nosuch.Env\n",
        "sampler_bad_class": b"data:\n  sampler:\n    class_path: parlightning.distribution.samplers.NoSuchSampler\n",
        "callback_not_class": b"trainer:\n  callbacks:\n    - class_path: os.path\n",
        "callbacks_mapping": b"trainer:\n  callbacks: {a: 1}\n",
        "world_arg_misspelt": b"data:\n  env:\n    init_args: {max_subagentz: 3}\n",
        "hidden_string": b"model:\n  hidden_sizes: '64,64'\n",
        "negative_seed": b"seed_everything: -3\n",
    }
    quick = {"trainer_int", "not_utf8", "alias_bomb", "world_arg_misspelt"}
    cases = [Case("config", name, ["--config", "{dir}/bad.yaml"], {"bad.yaml": content}, quick=name in quick)
             for name, content in files.items()]
    cases += [Case("config", "missing_file", ["--config", "{dir}/none.yaml"]),
              Case("config", "directory", ["--config", "{dir}"]),
              Case("argument", "unknown_flag", ["--model.lrr", "0.1"]),
              Case("argument", "optimizer_flag", ["--optimizer", "Adam"]),
              Case("argument", "scientific_negative", ["--model.lr", "-1e-3"]),
              Case("argument", "env_not_batched", ["--data.env", "bad_inputs.make_bad_shape_env"]),
              Case("argument", "env_not_importable", ["--data.env", "bad_inputs.no_such_factory"]),
              Case("argument", "ckpt_missing", ["--ckpt_path", "{dir}/none.ckpt"], quick=True)]
    return cases


def _checkpoints() -> list[Case]:
    names = ["random_bytes", "truncated", "no_checksum", "flipped_pickle", "flipped_weight", "nan_weights",
             "nan_moments", "foreign_tensor", "pickled_object", "empty_file", "wrong_hidden", "finished",
             "resized_env_state", "edited_hparams", "directory"]
    quick = {"no_checksum", "flipped_pickle", "nan_moments"}
    return [Case("checkpoint", n, ["--ckpt_path", f"{{dir}}/{n}.ckpt" if n != "directory" else "{dir}"],
                 quick=n in quick) for n in names]


def _worlds() -> list[Case]:
    def world(name: str, *extra: str) -> Case:
        return Case("world", name, ["--data.env.init_args.world", f"bad_inputs:{name}",
                                    "--data.env.init_args.world_kwargs", "{}", "--data.env.init_args.shared", "null",
                                    "--data.env.init_args.step_timeout", "2", *extra], config=EXTERNAL,
                    quick=name in ("World_reward_none", "RaisingWorld"))
    cases = [world(f"World_{n}") for n in WORLD_FAULTS]
    cases += [world("RaisingWorld"), world("RaisingWorld", "--data.env.init_args.retries", "2"), world("HangingWorld"),
              world("NoShapeWorld"), world("ExitingWorld", "--data.env.init_args.workers", "1"),
              world("HangingWorld", "--data.env.init_args.workers", "1"),
              Case("world", "world_not_importable", ["--data.env.init_args.world", "nosuch:World"], config=EXTERNAL),
              Case("world", "pool_workers_cap", ["--data.env.init_args.shared.pool.class_path",
                                                 "parlightning.subagents.ProcessPool",
                                                 "--data.env.init_args.shared.pool.init_args",
                                                 '{"fn": "parlightning.subagents.examples:skill_matcher", '
                                                 '"workers": 300}'], config=EXTERNAL),
              Case("world", "step_timeout_zero", ["--data.env.init_args.step_timeout", "0"], config=EXTERNAL),
              Case("world", "retries_negative", ["--data.env.init_args.retries", "-1"], config=EXTERNAL),
              Case("world", "workers_negative", ["--data.env.init_args.workers", "-1"], config=EXTERNAL)]
    return cases


def corpus() -> list[Case]:
    return _grid() + _config_files() + _checkpoints() + _worlds()


# ---------------------------------------------------------------------------------- checkpoints to break
def _good_checkpoint(folder: Path) -> Path:
    from parlightning.cli.fit import main

    main(["--config", CONFIG, *BASE, "--trainer.max_epochs", "1", "--trainer.default_root_dir", str(folder)])
    return next(folder.rglob("last.ckpt"))


def _bad_checkpoints(good: Path, out: Path) -> None:
    import zipfile

    import torch

    from parlightning.runtime.checkpoint import CHECKSUM_KEY, state_checksum

    data = good.read_bytes()
    ck = torch.load(good, weights_only=True)

    def resave(name: str, checkpoint: dict, checksum: bool = True) -> None:
        checkpoint = {k: v for k, v in checkpoint.items() if k != CHECKSUM_KEY}
        if checksum:
            checkpoint[CHECKSUM_KEY] = state_checksum(checkpoint)
        torch.save(checkpoint, out / f"{name}.ckpt")

    (out / "random_bytes.ckpt").write_bytes(os.urandom(4096))
    (out / "truncated.ckpt").write_bytes(data[: len(data) // 2])
    (out / "empty_file.ckpt").write_bytes(b"")
    resave("no_checksum", {**ck, "state_dict": {k: v * -30 for k, v in ck["state_dict"].items()}}, checksum=False)
    with zipfile.ZipFile(good) as archive:
        pkl = next(i for i in archive.infolist() if i.filename.endswith("data.pkl"))
    mid = pkl.header_offset + 30 + len(pkl.filename) + len(pkl.extra) + pkl.file_size // 2
    (out / "flipped_pickle.ckpt").write_bytes(data[:mid] + bytes(b ^ 0xFF for b in data[mid:mid + 8]) + data[mid + 8:])
    weight = max(ck["state_dict"].values(), key=lambda t: t.numel()).contiguous().numpy().tobytes()
    at = data.find(weight) + len(weight) // 2
    (out / "flipped_weight.ckpt").write_bytes(data[:at] + bytes(b ^ 0xFF for b in data[at:at + 16]) + data[at + 16:])
    sd = dict(ck["state_dict"])
    first = next(k for k, v in sd.items() if v.is_floating_point())
    sd[first] = sd[first].clone()
    sd[first].view(-1)[0] = math.nan
    resave("nan_weights", {**ck, "state_dict": sd})
    nan_opt = torch.load(good, weights_only=True)
    next(iter(nan_opt["optimizer_states"][0]["state"].values()))["exp_avg"].view(-1)[0] = math.nan
    resave("nan_moments", nan_opt)
    torch.save({"weights": torch.zeros(3)}, out / "foreign_tensor.ckpt")
    torch.save({"state_dict": {}, "loops": {}, "optimizer_states": [], "x": argparse.Namespace(a=1)},
               out / "pickled_object.ckpt")
    wide = dict(ck["state_dict"])
    wide[first] = torch.zeros(wide[first].shape[0] * 2, *wide[first].shape[1:])
    resave("wrong_hidden", {**ck, "state_dict": wide})
    done = torch.load(good, weights_only=True)
    done["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"] = 5
    resave("finished", done)
    env_state = torch.load(good, weights_only=True)
    world = env_state["RolloutDataModule"]["ranks"][0]["env"]
    world["pending"] = torch.cat([world["pending"], world["pending"]], dim=1)  # [slots, actors]: twice the actors
    resave("resized_env_state", env_state)
    edited = torch.load(good, weights_only=True)
    edited["hyper_parameters"]["hidden_sizes"] = [128, 128]
    resave("edited_hparams", edited)


# ---------------------------------------------------------------------------------- running
def _child(case: Case, folder: str, err_path: str) -> None:
    fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    os.chdir(folder)
    from parlightning.cli.fit import main

    args = ["--config", case.config, *BASE, "--trainer.default_root_dir", folder,
            *[a.replace("{dir}", folder) for a in case.args]]
    try:
        main(args)
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
            sys.stderr.flush()
            os._exit(1)
        sys.stderr.flush()
        os._exit(stop.code if isinstance(stop.code, int) else 0)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stderr.flush()
    os._exit(0)


def classify(code: int | None, stderr: str, written: list[str]) -> str:
    if code is None:
        return "hang"
    if code == 0:
        return "accepted"
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    if "Traceback (most recent call last)" in stderr or len(lines) > 1:
        return "traceback"
    if len(lines) != 1 or written:
        return "messy"
    return "clean"


def run_case(case: Case, work: Path, bad_ckpts: Path, timeout: float) -> tuple[str, str]:
    folder = Path(tempfile.mkdtemp(dir=work, prefix="case."))
    for name, content in case.files.items():
        (folder / name).write_bytes(content)
    if case.kind == "checkpoint" and case.name != "directory":
        shutil.copy(bad_ckpts / f"{case.name}.ckpt", folder / f"{case.name}.ckpt")
    before = {p for p in folder.rglob("*")}
    err_path = str(work / f"{folder.name}.stderr")
    proc = mp.get_context("fork").Process(target=_child, args=(case, str(folder), err_path))
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
        code = None
    else:
        code = proc.exitcode
    stderr = Path(err_path).read_text(errors="replace")
    written = sorted(str(p.relative_to(folder)) for p in set(folder.rglob("*")) - before)
    outcome = classify(code, stderr, written)
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    detail = (last if outcome != "messy" or not written else f"wrote {written[:3]}; {last}")[:220]
    shutil.rmtree(folder, ignore_errors=True)
    return outcome, detail


def main(argv: list[str] | None = None) -> dict[str, int]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a subset of each kind (about 20 cases)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds before a case counts as a hang")
    p.add_argument("--kind", nargs="+", default=None, help="only these kinds (argument, config, checkpoint, world)")
    p.add_argument("--list", action="store_true", help="print the cases and exit")
    p.add_argument("--all-rows", action="store_true", help="print clean cases too")
    a = p.parse_args(argv)
    if a.timeout <= 0:
        p.error("argument --timeout: must be positive")
    cases = [c for c in corpus() if (not a.quick or c.quick) and (a.kind is None or c.kind in a.kind)]
    if a.list:
        for c in cases:
            print(f"{c.kind:10s} {c.name}")
        print(f"{len(cases)} cases")
        return {}
    import parlightning.cli.fit  # noqa: F401 (imported once: every case's process is forked from here)

    counts: dict[str, int] = {}
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bad_inputs.") as tmp:
        work = Path(tmp)
        bad = work / "checkpoints"
        bad.mkdir()
        if any(c.kind == "checkpoint" for c in cases):
            _bad_checkpoints(_good_checkpoint(work / "good"), bad)
        for case in cases:
            outcome, detail = run_case(case, work, bad, a.timeout)
            counts[outcome] = counts.get(outcome, 0) + 1
            if outcome != "clean" or a.all_rows:
                print(f"{outcome:9s} {case.kind:10s} {case.name:32s} {detail}", flush=True)
    total = sum(counts.values())
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{total} cases in {time.monotonic() - start:.0f} s (load average {load:.1f}): "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"clean share: {counts.get('clean', 0)}/{total} = {counts.get('clean', 0) / max(total, 1):.1%}")
    return counts


if __name__ == "__main__":
    main()
