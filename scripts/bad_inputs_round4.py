"""Round four of the bad-input corpus: inputs and faults chosen from the user-facing docs only
(README, docs/guides, configs/, every CLI's --help, the public Python API), without reading the
tests or the earlier corpora's cases. It reuses the runner and classifier of
`scripts/bad_inputs_fresh.py` (fork per case, outcomes clean / traceback / misleading / messy /
accepted / hang / crash; see that script's docstring).

    python scripts/bad_inputs_round4.py            # every case (about 10 minutes on a loaded core)
    python scripts/bad_inputs_round4.py --quick    # a representative dozen (tests/test_bad_inputs_round4.py)
    python scripts/bad_inputs_round4.py --only compose,api --verbose

Kinds of input that differ from the earlier rounds: several `--config` files that conflict, user
classes with wrong signatures or that raise, the interpreter's environment (OMP_NUM_THREADS, CUDA
variables, a leaked torchrun environment), checkpoints from another world or width, damaged, a
directory, a symlink loop, `--ckpt_path` with `max_epochs` edge cases, output paths that equal an
input, YAML oddities (duplicate keys, tabs, BOM, two documents, `.nan`, `~`), the Python API with
bad arguments, subagent pools against local servers that hang or answer garbage (127.0.0.1
only), DDP flags with bad values on CPU.

`python` cases run in a fresh interpreter (their fault is in its environment); `api` cases run a
few lines of the public API in the forked child, and print `error: <Type>: <message>` for the
package's own errors (ConfigError and the built-in ValueError/TypeError/OSError): any other
exception is a traceback.

Cases judged valid after the first run and dropped (they are not bad inputs): 16-mixed precision on the
CPU (Lightning runs it), accumulate_grad_batches 4 (fewer, larger optimizer steps), TMPDIR naming a
missing folder and HOME naming a missing folder (Python and matplotlib fall back).

Measured results: docs/guides/reliability.md, "the bad-input corpus".
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bad_inputs_fresh as bif  # noqa: E402  (the runner, classifier and fixtures; not its cases)
from bad_inputs_fresh import Case, SkipCase, both, dump, write  # noqa: E402

TINY = bif.TINY

# ---------------------------------------------------------------- user code the cases import

MY_WORLDS = '''
import torch
from parlightning.envs.cartpole import CartPoleEnv
from parlightning.envs.base import ActionSpec, BatchedEnv


class NeedsSize(CartPoleEnv):
    def __init__(self, num_envs, device="cpu", seed=0, *, size):
        super().__init__(num_envs, device, seed)


class NoArgs(CartPoleEnv):
    def __init__(self):
        super().__init__(4)


class Abstract(BatchedEnv):
    observation_shape = (4,)
    action_spec = ActionSpec("discrete", nvec=(2,))
    def __init__(self, num_envs, device="cpu", seed=0):
        self.num_envs, self.device = num_envs, torch.device(device)


class ShapeRaises(CartPoleEnv):
    def __init__(self, num_envs, device="cpu", seed=0):
        super().__init__(num_envs, device, seed)
        del self.observation_shape

    def __getattr__(self, name):
        if name == "observation_shape":
            raise RuntimeError("shape not ready")
        raise AttributeError(name)


class ResetList(CartPoleEnv):
    def reset(self, *a, **k):
        return [[0.0] * 4] * self.num_envs


class ThreeTuple(CartPoleEnv):
    def step(self, *a, **k):
        r = super().step(*a, **k)
        return tuple(r)[:3]


class InfReset(CartPoleEnv):
    def reset(self, *a, **k):
        o = super().reset(*a, **k)
        o[0, 0] = float("inf")
        return o


class ZeroNvec(CartPoleEnv):
    def __init__(self, num_envs, device="cpu", seed=0):
        super().__init__(num_envs, device, seed)
        self.action_spec = ActionSpec("discrete", nvec=(0,))


class NegNvec(CartPoleEnv):
    def __init__(self, num_envs, device="cpu", seed=0):
        super().__init__(num_envs, device, seed)
        self.action_spec = ActionSpec("multi_discrete", nvec=(2, -3))


class ScalarObs(CartPoleEnv):
    def __init__(self, num_envs, device="cpu", seed=0):
        super().__init__(num_envs, device, seed)
        self.observation_shape = ()


class HugeObs(CartPoleEnv):
    def __init__(self, num_envs, device="cpu", seed=0):
        super().__init__(num_envs, device, seed)
        self.observation_shape = (10 ** 10,)


class WrongNumEnvs(CartPoleEnv):
    def __init__(self, num_envs, device="cpu", seed=0):
        super().__init__(num_envs + 1, device, seed)


class CudaDevice(CartPoleEnv):
    def __init__(self, num_envs, device="cpu", seed=0):
        super().__init__(num_envs, device, seed)
        self.device = torch.device("cuda", 3)


class ListShape(CartPoleEnv):
    def __init__(self, num_envs, device="cpu", seed=0):
        super().__init__(num_envs, device, seed)
        self.observation_shape = ["4"]


class ExitInInit(CartPoleEnv):
    def __init__(self, num_envs, device="cpu", seed=0):
        raise SystemExit(0)


class KeyErrorReset(CartPoleEnv):
    def reset(self, *a, **k):
        return {}["obs"]


NOT_A_CLASS = 42


def factory_no_annotation(num_envs, device, seed):
    return CartPoleEnv(num_envs, device, seed)
'''

MY_PLUGINS = '''
import lightning
from parlightning.distribution.samplers import RoundRobin


class SamplerInitRaises(RoundRobin):
    def __init__(self, *a, **k):
        raise ValueError("sampler needs a database")


class SamplerWrongSig:
    def __init__(self, tasks_file):
        pass


class RewardWrong:
    def __init__(self, alpha):
        self.alpha = alpha


class CallbackFitStartRaises(lightning.Callback):
    def on_fit_start(self, trainer, pm):
        raise RuntimeError("callback broke on purpose")


class LoggerRaises:
    def __init__(self, save_dir="x"):
        raise OSError("no logging service")
'''

BROKEN_IMPORT = "import module_that_is_not_installed_xyz\n"
SYNTAX_ERROR = "def f(:\n    pass\n"

MY_XWORLDS = '''
import asyncio
from parlightning.envs.base import ActionSpec


class EmptyTasks:
    observation_shape = (3,)
    action_spec = ActionSpec("discrete", nvec=(2,))
    tasks = []
    def __init__(self, **kw): pass
    def reset(self, task): return [0.0, 0.0, 0.0]
    def step(self, action): return [0.0, 0.0, 0.0], 0.0, True, False, {}


class StringShape(EmptyTasks):
    observation_shape = ("a", "b")
    tasks = ["t0"]


class GeneratorStep(EmptyTasks):
    tasks = ["t0"]
    def step(self, action):
        yield [0.0, 0.0, 0.0]


class NeedsArg(EmptyTasks):
    tasks = ["t0"]
    def __init__(self, endpoint):
        pass


class BadParts(EmptyTasks):
    tasks = ["t0"]
    def step(self, action):
        return [0.0, 0.0, 0.0], 0.0, True, False, {"outcome": "great", "n_subagents": -4}


class HugeReward(EmptyTasks):
    tasks = ["t0"]
    def step(self, action):
        return [0.0, 0.0, 0.0], 1e300 * 1e300, True, False, {}
'''

MY_SUBAGENTS = '''
import time


def wrong_sig():
    return {"success": True, "steps": 1}


def returns_none(instruction):
    return None


def returns_string_success(instruction):
    return {"success": "yes", "steps": "three"}


def raises(instruction):
    raise RuntimeError("subagent tool is down")


def sleeps(instruction):
    time.sleep(3600)
'''


def with_code(d: Path) -> None:
    (d / "myworlds.py").write_text(MY_WORLDS)
    (d / "myplugins.py").write_text(MY_PLUGINS)
    (d / "brokenimport.py").write_text(BROKEN_IMPORT)
    (d / "syntaxerr.py").write_text(SYNTAX_ERROR)
    (d / "myx.py").write_text(MY_XWORLDS)
    (d / "mysub.py").write_text(MY_SUBAGENTS)


def deep_set(d: dict, dotted: str, value) -> None:
    keys = dotted.split(".")
    for k in keys[:-1]:
        if not isinstance(d.get(k), dict):
            d[k] = {}
        d = d[k]
    d[keys[-1]] = value


def merged(a: dict, b: dict) -> dict:
    out = copy.deepcopy(a)
    for k, v in b.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def tiny(**dotted) -> dict:
    cfg = copy.deepcopy(TINY)
    for k, v in dotted.items():
        deep_set(cfg, k.replace("__", "."), v)
    return cfg


def cfg(name, category, config: dict, expect=(), extra=(), **kw) -> Case:
    return Case(name, category, "fit", ["--config", "c.yaml", *extra],
                both(with_code, write("c.yaml", dump(config))), expect=expect, **kw)


def env(name, env_spec, expect=(), **kw) -> Case:
    return cfg(name, "user-class", tiny(**{"data.env": env_spec}), expect=expect, **kw)


def raw(name, category, text: str | bytes, expect=(), extra=(), **kw) -> Case:
    return Case(name, category, "fit", ["--config", "c.yaml", *extra], both(with_code, write("c.yaml", text)),
                expect=expect, **kw)


def args(name, argv, expect=(), category="cli-fit", **kw) -> Case:
    return Case(name, category, "fit", ["--config", "c.yaml", *argv], write("c.yaml", dump(TINY)), expect=expect, **kw)


# ---------------------------------------------------------------- local servers (127.0.0.1 only)

SERVERS: dict[str, int] = {}


def _serve(kind: str) -> int:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    held = []

    def loop():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            if kind == "blackhole":  # accepts, reads, never answers
                held.append(conn)
                continue
            try:
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                except OSError:
                    pass
                if kind == "garbage":
                    body = b"this is not json"
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                                 + str(len(body)).encode() + b"\r\n\r\n" + body)
                elif kind == "404":
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found")
                elif kind == "reset":
                    pass  # closes without a byte
            finally:
                if kind != "blackhole":
                    conn.close()
    threading.Thread(target=loop, daemon=True).start()
    return sock.getsockname()[1]


def start_servers() -> None:
    for kind in ("blackhole", "garbage", "404", "reset"):
        SERVERS[kind] = _serve(kind)


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---------------------------------------------------------------- the cases

def compose_cases() -> list[Case]:
    """Several --config files layered: the later one breaks what the first set up."""
    swarm = str(ROOT / "configs/swarm.yaml")
    ext = str(ROOT / "configs/external.yaml")
    out = []

    def two(name, second, expect=(), first=None, **kw):
        first_argv = ["--config", first] if first else ["--config", "c.yaml"]
        return Case(name, "compose", "fit", [*first_argv, "--config", "d.yaml"],
                    both(with_code, write("c.yaml", dump(TINY)), write("d.yaml", second if isinstance(second, str)
                                                                       else dump(second))),
                    expect=expect, **kw)
    out += [
        two("second-num_envs-string", {"data": {"num_envs": "four"}}, ("num_envs",)),
        two("second-model-null", "model: null\n", ("model",)),
        two("second-data-list", "data: [1, 2]\n", ("data",)),
        two("second-top-level-list", "- trainer\n- model\n", ("d.yaml", "config", "mapping")),
        two("second-env-typo-class", {"data": {"env": {"class_path": "parlightning.envs.CartPoleEnvv"}}}, ("data.env",)),
        two("second-env-init_args-unknown", {"data": {"env": {"init_args": {"max_episode_stepz": 5}}}},
            ("max_episode_stepz",)),
        two("swarm-then-reward-max_subagents-disagrees", merged(bif.TINY_SWARM, {"data": {"reward": {"init_args": {"max_subagents": 64}}}}), ("max_subagents",), first=swarm),
        two("swarm-then-env-max_subagents-disagrees",
            merged(bif.TINY_SWARM, {"data": {"env": {"init_args": {"max_subagents": 32}}}}), ("max_subagents",), first=swarm),
        two("swarm-then-cartpole-env-keeps-parl-reward",
            merged(bif.TINY_SWARM, {"data": {"env": {"class_path": "parlightning.envs.CartPoleEnv", "init_args": {}}}}),
            ("reward", "PARL", "n_subagents", "init_args"), first=swarm),
        two("external-then-pool-typo", {"data": {"env": {"init_args": {"shared": {"pool": {
            "class_path": "parlightning.subagents.SimulatedPol"}}}}}}, ("pool", "SimulatedPol"), first=ext),
        two("second-callbacks-string", {"trainer": {"callbacks": "PARLAnnealing"}}, ("callbacks",)),
        two("second-trainer-scalar", "trainer: 5\n", ("trainer",)),
        Case("second-config-missing", "compose", "fit", ["--config", "c.yaml", "--config", "nope.yaml"],
             write("c.yaml", dump(TINY)), expect=("nope.yaml",)),
        Case("second-config-is-dir", "compose", "fit", ["--config", "c.yaml", "--config", "sub"],
             both(write("c.yaml", dump(TINY)), lambda d: (d / "sub").mkdir()), expect=("sub", "config")),
        Case("packaged-name-typo", "compose", "fit", ["--config", "parallel/dpp", "--config", "c.yaml"],
             write("c.yaml", dump(TINY)), expect=("parallel/dpp", "config")),
        Case("config-empty-string", "compose", "fit", ["--config", "", "--config", "c.yaml"],
             write("c.yaml", dump(TINY)), expect=("config",)),
        two("second-unknown-top-key", {"optimizer": {"class_path": "torch.optim.SGD"}}, ("optimizer",)),
    ]
    return out


def user_class_cases() -> list[Case]:
    def e(cls, **ia):
        spec = {"class_path": f"myworlds.{cls}"}
        if ia:
            spec["init_args"] = ia
        return spec
    return [
        env("missing-required-kwarg", e("NeedsSize"), ("size",)),
        env("init-takes-no-num_envs", e("NoArgs"), ("data.env", "num_envs")),
        env("abstract-class", e("Abstract"), ("Abstract", "abstract", "data.env")),
        env("property-raises", e("ShapeRaises"), ("observation_shape", "shape not ready")),
        env("reset-returns-list", e("ResetList"), ("reset",)),
        env("step-returns-3-tuple", e("ThreeTuple"), ("step",)),
        env("inf-in-reset", e("InfReset"), ("reset", "inf", "finite")),
        env("zero-categories", e("ZeroNvec"), ("nvec", "action_spec")),
        env("negative-nvec", e("NegNvec"), ("nvec", "action_spec")),
        env("scalar-observation", e("ScalarObs"), ("observation_shape",)),
        env("observation-10e10-wide", e("HugeObs"), ("memory", "observation", "data.env", "GiB", "GB")),
        env("wrong-num_envs", e("WrongNumEnvs"), ("num_envs",)),
        env("cuda-device-on-cpu", e("CudaDevice"), ("device", "cuda")),
        env("observation-shape-strings", e("ListShape"), ("observation_shape",)),
        env("exit-0-in-init", e("ExitInInit"), ("data.env", "ExitInInit", "exit")),
        env("keyerror-in-reset", e("KeyErrorReset"), ("reset", "KeyErrorReset")),
        env("not-a-class-int", {"class_path": "myworlds.NOT_A_CLASS"}, ("data.env", "NOT_A_CLASS")),
        env("factory-no-annotation", {"class_path": "myworlds.factory_no_annotation"}, ("data.env", "annotation")),
        env("module-missing-dependency", {"class_path": "brokenimport.World"}, ("module_that_is_not_installed_xyz",)),
        env("module-syntax-error", {"class_path": "syntaxerr.World"}, ("syntaxerr", "syntax")),
        env("class-path-trailing-dot", {"class_path": "parlightning.envs."}, ("data.env",)),
        env("class-path-empty", {"class_path": ""}, ("data.env",)),
        env("class-path-file-path", {"class_path": "myworlds.py:NeedsSize"}, ("data.env",)),
        env("init_args-list", {"class_path": "parlightning.envs.CartPoleEnv", "init_args": [500]}, ("init_args", "data.env")),
        env("init_args-num_envs-conflict", {"class_path": "parlightning.envs.CartPoleEnv", "init_args": {"num_envs": 7}},
            ("num_envs",)),
        cfg("sampler-init-raises", "user-class", tiny(**{"data.sampler": {"class_path": "myplugins.SamplerInitRaises"}}),
            ("sampler", "database")),
        cfg("sampler-wrong-signature", "user-class", tiny(**{"data.sampler": {"class_path": "myplugins.SamplerWrongSig"}}),
            ("sampler", "tasks_file")),
        cfg("reward-wrong-class", "user-class", tiny(**{"data.reward": {"class_path": "myplugins.RewardWrong",
                                                                          "init_args": {"alpha": 1}}}), ("reward",)),
        cfg("callback-not-a-callback", "user-class", tiny(**{"trainer.callbacks": [{"class_path": "parlightning.envs.CartPoleEnv"}]}),
            ("callbacks",)),
        cfg("callback-raises-on-fit-start", "user-class",
            tiny(**{"trainer.callbacks": [{"class_path": "myplugins.CallbackFitStartRaises"}]}),
            ("CallbackFitStartRaises", "callback broke"), runtime=True),
        cfg("logger-raises", "user-class", tiny(**{"trainer.logger": {"class_path": "myplugins.LoggerRaises"}}),
            ("logger", "logging service")),
        cfg("world-is-a-batchedenv", "user-class", tiny(**{"data.env": {
            "class_path": "parlightning.envs.external.ExternalBatchedEnv",
            "init_args": {"world": "parlightning.envs.CartPoleEnv"}}}), ("world",)),
    ]


def yaml_cases() -> list[Case]:
    t = dump(TINY)
    return [
        raw("duplicate-top-key", "yaml", t + "model:\n  lr: 0.5\n", ("duplicate", "model")),
        raw("duplicate-nested-key", "yaml", t.replace("  num_envs: 4\n", "  num_envs: 4\n  num_envs: 8\n"),
            ("duplicate", "num_envs")),
        raw("tab-indent", "yaml", t.replace("  num_envs: 4", "\tnum_envs: 4"), ("c.yaml", "tab", "line")),
        raw("two-documents", "yaml", t + "---\nmodel:\n  lr: 1.0\n", ("c.yaml", "document")),
        raw("bom-prefix", "yaml", b"\xef\xbb\xbf" + b"not: [valid\n", ("c.yaml",)),
        raw("lr-nan", "yaml", t.replace("model:\n", "model:\n  lr: .nan\n"), ("model.lr",)),
        raw("gamma-inf", "yaml", t.replace("  num_envs: 4\n", "  num_envs: 4\n  gamma: .inf\n"), ("gamma",)),
        raw("clip-minus-inf", "yaml", t.replace("model:\n", "model:\n  clip_coef: -.inf\n"), ("clip_coef",)),
        raw("num_envs-tilde", "yaml", t.replace("  num_envs: 4\n", "  num_envs: ~\n"), ("num_envs",)),
        raw("num_steps-true", "yaml", t.replace("  num_steps: 8\n", "  num_steps: true\n"), ("num_steps",)),
        raw("lr-yes", "yaml", t.replace("model:\n", "model:\n  lr: yes\n"), ("model.lr", "lr")),
        raw("lr-list", "yaml", t.replace("model:\n", "model:\n  lr: [0.001]\n"), ("lr",)),
        raw("gamma-dict", "yaml", t.replace("  num_envs: 4\n", "  num_envs: 4\n  gamma: {value: 0.99}\n"), ("gamma",)),
        raw("num_envs-huge", "yaml", t.replace("  num_envs: 4\n", "  num_envs: 1000000000000000000000000000000\n"),
            ("num_envs",)),
        raw("num_envs-float", "yaml", t.replace("  num_envs: 4\n", "  num_envs: 4.5\n"), ("num_envs",)),
        raw("unicode-key", "yaml", t.replace("model:\n", "model:\n  lé: 0.1\n"), ("lé",)),
        raw("key-trailing-space", "yaml", t.replace("model:\n", "model:\n  'lr ': 0.1\n"), ("lr",)),
        raw("anchor-to-list-in-scalar", "yaml", "x: &a [1, 2]\n" + t.replace("model:\n", "model:\n  lr: *a\n"),
            ("lr", "x")),
        raw("undefined-alias", "yaml", t.replace("model:\n", "model:\n  lr: *nowhere\n"), ("c.yaml", "alias")),
        raw("merge-key-scalar", "yaml", t.replace("model:\n", "model:\n  <<: 5\n"), ("c.yaml", "merge")),
        raw("hidden-sizes-string", "yaml", t.replace("hidden_sizes:\n  - 8\n", "hidden_sizes: '64,64'\n"),
            ("hidden_sizes",)),
        raw("hidden-sizes-zero", "yaml", t.replace("hidden_sizes:\n  - 8\n", "hidden_sizes: [64, 0]\n"), ("hidden_sizes",)),
        raw("hidden-sizes-float", "yaml", t.replace("hidden_sizes:\n  - 8\n", "hidden_sizes: [64.5]\n"), ("hidden_sizes",)),
        raw("activation-unknown", "yaml", t.replace("hidden_sizes:", "activation: swish2\n  hidden_sizes:"),
            ("activation",)),
        raw("policy-unknown", "yaml", t.replace("hidden_sizes:", "policy: transformer\n  hidden_sizes:"), ("policy",)),
        raw("seed-string", "yaml", t.replace("seed_everything: 0", "seed_everything: abc"), ("seed",)),
        raw("seed-2-pow-70", "yaml", t.replace("seed_everything: 0", f"seed_everything: {2 ** 70}"), ("seed",)),
        raw("torch_threads-zero", "yaml", t.replace("torch_threads: 1", "torch_threads: 0"), ("torch_threads",)),
        raw("torch_threads-negative", "yaml", t.replace("torch_threads: 1", "torch_threads: -2"), ("torch_threads",)),
        raw("heartbeat-negative", "yaml", t + "heartbeat_timeout: -5\n", ("heartbeat_timeout",)),
        raw("stall-zero", "yaml", t + "stall_timeout: 0\n", ("stall_timeout",)),
        raw("only-comments", "yaml", "# nothing here\n", ("c.yaml", "env", "data")),
        raw("latin1-bytes", "yaml", t.encode() + b"# caf\xe9\n", ("c.yaml",)),
        raw("json-unbalanced", "yaml", '{"model": {"lr": 0.1]}', ("c.yaml",)),
        raw("nul-byte", "yaml", t.encode() + b"\x00\n", ("c.yaml",)),
    ]


def targs(name, argv, expect=(), **kw) -> Case:
    return args(name, argv, expect, category="trainer", **kw)


def trainer_cases() -> list[Case]:
    return [
        targs("max_epochs-float-string", ["--trainer.max_epochs", "1e3"], ("max_epochs",)),
        targs("max_epochs-0", ["--trainer.max_epochs", "0"], ("max_epochs",)),
        targs("min-gt-max-epochs", ["--trainer.min_epochs", "5", "--trainer.max_epochs", "1"], ("min_epochs",)),
        targs("max_steps-0", ["--trainer.max_steps", "0"], ("max_steps",)),
        targs("max_time-garbage", ["--trainer.max_time", "forever"], ("max_time",)),
        targs("max_time-zero", ["--trainer.max_time", "00:00:00:00"], ("max_time",)),
        targs("precision-8", ["--trainer.precision", "8"], ("precision",)),
        targs("log_every-0", ["--trainer.log_every_n_steps", "0"], ("log_every_n_steps",)),
        targs("accumulate-0", ["--trainer.accumulate_grad_batches", "0"], ("accumulate_grad_batches",)),
        targs("limit_train_batches-0", ["--trainer.limit_train_batches", "0"], ("limit_train_batches",)),
        targs("fast_dev_run-negative", ["--trainer.fast_dev_run", "-1"], ("fast_dev_run",)),
        targs("num_nodes-0", ["--trainer.num_nodes", "0"], ("num_nodes",)),
        targs("num_nodes-2-no-cluster", ["--trainer.num_nodes", "2"], ("num_nodes",), timeout=90),
        targs("devices-0", ["--trainer.devices", "0"], ("devices",)),
        targs("devices-string-two", ["--trainer.devices", "two"], ("devices",)),
        targs("devices-1.5", ["--trainer.devices", "1.5"], ("devices",)),
        targs("devices-duplicate-index-list", ["--trainer.devices", "[0,0]"], ("devices",)),
        targs("devices-index-1-on-cpu", ["--trainer.devices", "[1]"], ("devices",)),
        targs("strategy-typo", ["--trainer.strategy", "dpp"], ("strategy", "dpp")),
        targs("strategy-fsdp-cpu", ["--trainer.strategy", "fsdp"], ("strategy", "fsdp")),
        targs("strategy-deepspeed", ["--trainer.strategy", "deepspeed"], ("strategy", "deepspeed")),
        targs("strategy-ddp-devices-1", ["--trainer.strategy", "ddp_spawn", "--trainer.devices", "2"],
             ("strategy", "ddp_spawn"), timeout=120),
        targs("accelerator-gpu", ["--trainer.accelerator", "gpu"], ("accelerator", "gpu", "cuda")),
        targs("accelerator-tpu", ["--trainer.accelerator", "tpu"], ("accelerator", "tpu")),
        targs("accelerator-typo", ["--trainer.accelerator", "cpuu"], ("accelerator",)),
        Case("default_root_dir-is-file", "trainer", "fit", ["--config", "c.yaml", "--trainer.default_root_dir", "afile"],
             both(write("c.yaml", dump(TINY)), write("afile", "x")), expect=("default_root_dir", "afile")),
        Case("default_root_dir-read-only", "trainer", "fit", ["--config", "c.yaml", "--trainer.default_root_dir", "ro/out"],
             both(write("c.yaml", dump(TINY)), bif.ro_dir("ro")), expect=("default_root_dir", "ro")),
        Case("csv-logger-read-only", "trainer", "fit",
             ["--config", "c.yaml", "--trainer.logger", json.dumps({"class_path": "lightning.pytorch.loggers.CSVLogger",
                                                                    "init_args": {"save_dir": "ro"}})],
             both(write("c.yaml", dump(TINY)), bif.ro_dir("ro")), expect=("logger", "ro", "save_dir")),
        targs("gradient-clip-algorithm-typo", ["--trainer.gradient_clip_algorithm", "nrom"], ("gradient_clip_algorithm",)),
        targs("deterministic-string", ["--trainer.deterministic", "sometimes"], ("deterministic",)),
    ]


def cli_cases() -> list[Case]:
    return [
        args("subcommand-habit", ["fit"], ("fit", "subcommand", "unrecognized")),
        args("optimizer-flag", ["--optimizer", "Adam"], ("optimizer",)),
        args("lr_scheduler-flag", ["--lr_scheduler", "StepLR"], ("lr_scheduler",)),
        args("lr-empty", ["--model.lr="], ("lr",)),
        args("dangling-flag", ["--data.num_envs"], ("num_envs",)),
        args("hidden-sizes-unclosed", ["--model.hidden_sizes", "[64,"], ("hidden_sizes",)),
        args("print-config-bad-value", ["--data.num_envs", "-3", "--print_config"], ("num_envs",)),
        args("env-short-name", ["--data.env", "CartPole"], ("data.env", "CartPole")),
        args("callbacks-plus-nonclass", ["--trainer.callbacks+", "NotAClass"], ("callbacks", "NotAClass")),
        args("ent-coef-string", ["--model.ent_coef", "0.01.0"], ("ent_coef",)),
        args("target-kl-negative", ["--model.target_kl", "-0.1"], ("target_kl",)),
        args("adam-eps-zero", ["--model.adam_eps", "0"], ("adam_eps",)),
        args("gae-lambda-2", ["--data.gae_lambda", "2"], ("gae_lambda",)),
        args("minibatches-gt-batch", ["--data.num_minibatches", "64"], ("num_minibatches",)),
        args("collect_in-typo", ["--data.collect_in", "proces"], ("collect_in",)),
        args("collect_in-process-lag-0", ["--data.collect_in", "process"], ("collect_in", "max_policy_lag")),
        args("max_policy_lag-negative", ["--data.max_policy_lag", "-1"], ("max_policy_lag",)),
        args("actors_in_flight-0", ["--data.actors_in_flight", "0"], ("actors_in_flight",)),
        args("bptt-with-mlp", ["--data.bptt_len", "4"], ("bptt_len",)),
        args("rnn_hidden-0-gru", ["--model.policy", "gru", "--model.rnn_hidden", "0"], ("rnn_hidden",)),
        args("init_from-missing", ["--model.init_from", "nope.ckpt"], ("init_from", "nope.ckpt")),
        Case("init_from-dir", "cli-fit", "fit", ["--config", "c.yaml", "--model.init_from", "sub"],
             both(write("c.yaml", dump(TINY)), lambda d: (d / "sub").mkdir()), expect=("init_from",)),
        args("prior-garbage", ["--model.prior", "uniform-ish"], ("prior",)),
        args("artifact_key-list", ["--data.artifact_key", "[1,2]"], ("artifact_key",)),
        args("data-seed-negative", ["--data.seed", "-4"], ("seed",)),
    ]


def ckpt_cases() -> list[Case]:
    def ck(name, setup, argv_extra=(), expect=("ckpt_path",), cfgname="c.yaml", **kw):
        more = () if any("max_" in x for x in argv_extra) else ("--trainer.max_epochs", "2")
        return Case(name, "checkpoint", "fit", ["--config", cfgname, "--ckpt_path", "in.ckpt", *argv_extra, *more],
                    setup, expect=expect, **kw)

    def symlink_loop(d):
        os.symlink("in.ckpt", d / "in.ckpt")

    def dangling(d):
        os.symlink("gone.ckpt", d / "in.ckpt")

    def as_dir(d):
        (d / "in.ckpt").mkdir()

    def bare_tensor(d):
        import torch
        torch.save(torch.zeros(3), d / "in.ckpt")

    def gz(data: bytes) -> bytes:
        import gzip
        return gzip.compress(data)
    swarm_ckpt = bif.copy_ckpt("swarm")
    cp = bif.copy_ckpt("cartpole")
    return [
        ck("swarm-ckpt-cartpole-config", swarm_ckpt, (), ("ckpt_path", "observation", "env")),
        ck("cartpole-ckpt-swarm-config", cp, ("--config", str(ROOT / "configs/swarm.yaml"), "--config", "s.yaml"),
           ("ckpt_path",), cfgname="s.yaml"),
        ck("different-width", cp, ("--model.hidden_sizes", "[16]"), ("hidden_sizes", "ckpt_path")),
        ck("different-depth", cp, ("--model.hidden_sizes", "[8, 8]"), ("hidden_sizes", "ckpt_path")),
        ck("different-activation-policy", cp, ("--model.policy", "gru"), ("policy", "ckpt_path")),
        ck("different-num_envs", cp, ("--data.num_envs", "6"), ("num_envs", "ckpt_path")),
        ck("truncated-half", bif.copy_ckpt(raw=lambda b: b[: len(b) // 2])),
        ck("zero-bytes", bif.copy_ckpt(raw=lambda b: b"")),
        ck("gzipped", bif.copy_ckpt(raw=gz)),
        ck("text-file", bif.copy_ckpt(raw=lambda b: b"model weights go here\n")),
        ck("is-a-directory", both(write("c.yaml", dump(TINY)), as_dir)),
        ck("symlink-loop", both(write("c.yaml", dump(TINY)), symlink_loop)),
        ck("dangling-symlink", both(write("c.yaml", dump(TINY)), dangling)),
        ck("plain-torch-dict", bif.copy_ckpt(edit=lambda c: {"weights": [1, 2, 3]})),
        ck("a-bare-tensor", both(bif.copy_ckpt(), bare_tensor)),
        ck("resume-max_epochs-already-reached", cp, ("--trainer.max_epochs", "1"), ("max_epochs", "ckpt_path")),
        ck("resume-max_epochs-minus-1", cp, ("--trainer.max_epochs", "-1"), ("max_epochs",), timeout=60),
        ck("resume-max_steps-1", cp, ("--trainer.max_steps", "1", "--trainer.max_epochs", "5"),
           ("max_steps", "ckpt_path")),
        Case("ckpt_path-last-no-runs", "checkpoint", "fit", ["--config", "c.yaml", "--ckpt_path", "last"],
             write("c.yaml", dump(TINY)), expect=("ckpt_path", "last")),
        Case("ckpt_path-empty", "checkpoint", "fit", ["--config", "c.yaml", "--ckpt_path", ""],
             write("c.yaml", dump(TINY)), expect=("ckpt_path",)),
        Case("ckpt_path-is-config", "checkpoint", "fit", ["--config", "c.yaml", "--ckpt_path", "c.yaml"],
             write("c.yaml", dump(TINY)), expect=("ckpt_path",)),
        Case("init_from-other-world", "checkpoint", "fit", ["--config", "c.yaml", "--model.init_from", "in.ckpt"],
             swarm_ckpt, expect=("init_from",)),
        Case("init_from-other-width", "checkpoint", "fit",
             ["--config", "c.yaml", "--model.init_from", "in.ckpt", "--model.hidden_sizes", "[32]"],
             cp, expect=("init_from", "hidden_sizes")),
        Case("init_from-truncated", "checkpoint", "fit", ["--config", "c.yaml", "--model.init_from", "in.ckpt"],
             bif.copy_ckpt(raw=lambda b: b[:1000]), expect=("init_from", "in.ckpt")),
    ]


def tool_cases() -> list[Case]:
    """evaluate / export / bc / plot with bad arguments and outputs."""
    cp = bif.copy_ckpt("cartpole")
    sw = bif.copy_ckpt("swarm")
    sw_cfg = str(ROOT / "configs/swarm.yaml")
    E = lambda name, argv, setup=cp, expect=(), **kw: Case(name, "evaluate", "evaluate", argv, setup, expect=expect, **kw)  # noqa: E731
    X = lambda name, argv, setup=cp, expect=(), **kw: Case(name, "export", "export", argv, setup, expect=expect, **kw)  # noqa: E731
    B = lambda name, argv, setup=cp, expect=(), **kw: Case(name, "bc", "bc", argv, setup, expect=expect, **kw)  # noqa: E731
    P = lambda name, argv, setup=bif.copy_run(), expect=(), **kw: Case(name, "plot", "plot", argv, setup, expect=expect, **kw)  # noqa: E731

    def events_empty(d):
        (d / "runs/version_0").mkdir(parents=True)
        (d / "runs/version_0/events.out.tfevents.0.host").write_bytes(b"")

    def events_garbage(d):
        (d / "runs/version_0").mkdir(parents=True)
        (d / "runs/version_0/events.out.tfevents.0.host").write_bytes(os.urandom(300))

    def ro(d):
        bif.ro_dir("ro")(d)
    evc = ["--config", "c.yaml", "--ckpt_path", "in.ckpt"]
    swc = ["--config", sw_cfg, "--config", "s.yaml", "--ckpt_path", "in.ckpt"]
    return [
        E("json-equals-ckpt", [*evc, "--json", "in.ckpt"], expect=("json", "in.ckpt")),
        E("json-read-only-dir", [*evc, "--json", "ro/out.json"], both(cp, ro), expect=("json", "ro")),
        E("episodes-0", [*evc, "--episodes", "0"], expect=("episodes",)),
        E("episodes-negative", [*evc, "--episodes", "-3"], expect=("episodes",)),
        E("seeds-empty", [*evc, "--seeds"], expect=("seeds",)),
        E("split-unknown", ["--config", sw_cfg, "--config", "s.yaml", "--ckpt_path", "in.ckpt", "--split", "validation"],
          sw, expect=("split",)),
        E("oracle-on-cartpole", ["--config", "c.yaml", "--policy", "oracle"], expect=("oracle", "policy")),
        E("device-banana", [*evc, "--device", "banana"], expect=("device",)),
        E("device-cuda-7", [*evc, "--device", "cuda:7"], expect=("device", "cuda")),
        E("gantt-to-directory", [*swc, "--gantt", "sub"], both(sw, lambda d: (d / "sub").mkdir()), expect=("gantt",)),
        E("trace-to-missing-dir", [*evc, "--trace", "no/such/dir/t.jsonl"], expect=("trace",)),
        E("swarm-ckpt-cartpole-config", evc, sw, expect=("ckpt_path",)),
        E("neither-config-nor-ckpt", [], expect=("config", "ckpt_path")),
        E("bank_seeds-string", [*swc, "--bank_seeds", "abc"], sw, expect=("bank_seeds",)),
        E("video-tensor-cartpole", [*evc, "--video", "v.mp4"], expect=("video",)),
        E("ckpt-truncated", evc, bif.copy_ckpt(raw=lambda b: b[:-2000]), expect=("ckpt_path", "in.ckpt")),
        X("out-equals-ckpt", ["--ckpt_path", "in.ckpt", "--out", "in.ckpt"], expect=("out", "in.ckpt")),
        X("out-missing-dir", ["--ckpt_path", "in.ckpt", "--out", "no/dir/p.pt2"], expect=("out",)),
        X("out-read-only", ["--ckpt_path", "in.ckpt", "--out", "ro/p.pt2"], both(cp, ro), expect=("out", "ro")),
        X("out-is-dir", ["--ckpt_path", "in.ckpt", "--out", "sub"], both(cp, lambda d: (d / "sub").mkdir()), expect=("out",)),
        X("format-conflicts-suffix", ["--ckpt_path", "in.ckpt", "--out", "p.pt2", "--format", "onnx"],
          expect=("format", "out")),
        X("out-unknown-suffix", ["--ckpt_path", "in.ckpt", "--out", "p.txt"], expect=("out", "format")),
        X("ckpt-dir", ["--ckpt_path", ".", "--out", "p.pt2"], expect=("ckpt_path",)),
        X("ckpt-symlink-loop", ["--ckpt_path", "loop.ckpt", "--out", "p.pt2"],
          both(cp, lambda d: os.symlink("loop.ckpt", d / "loop.ckpt")), expect=("ckpt_path",)),
        B("out-equals-config", ["--config", sw_cfg, "--config", "s.yaml", "--out", "s.yaml"], sw, expect=("out", "s.yaml")),
        B("teacher-missing-ckpt", ["--config", "c.yaml", "--teacher", "gone.ckpt", "--out", "b.ckpt"], expect=("teacher",)),
        B("teacher-oracle-cartpole", ["--config", "c.yaml", "--teacher", "oracle", "--out", "b.ckpt"],
          expect=("teacher", "oracle")),
        B("teacher-other-world", ["--config", "c.yaml", "--teacher", "in.ckpt", "--out", "b.ckpt"], sw,
          expect=("teacher",)),
        B("rounds-0", ["--config", sw_cfg, "--config", "s.yaml", "--rounds", "0", "--out", "b.ckpt"], sw,
          expect=("rounds",)),
        B("epochs-negative", ["--config", sw_cfg, "--config", "s.yaml", "--epochs", "-1", "--out", "b.ckpt"], sw,
          expect=("epochs",)),
        B("lr-nan", ["--config", sw_cfg, "--config", "s.yaml", "--lr", "nan", "--out", "b.ckpt"], sw, expect=("lr",)),
        B("minibatch-0", ["--config", sw_cfg, "--config", "s.yaml", "--minibatch", "0", "--out", "b.ckpt"], sw,
          expect=("minibatch",)),
        B("label-smoothing-1.5", ["--config", sw_cfg, "--config", "s.yaml", "--label_smoothing", "1.5", "--out", "b.ckpt"],
          sw, expect=("label_smoothing",)),
        B("num_envs-0", ["--config", sw_cfg, "--config", "s.yaml", "--num_envs", "0", "--out", "b.ckpt"], sw,
          expect=("num_envs",)),
        B("out-read-only", ["--config", sw_cfg, "--config", "s.yaml", "--out", "ro/b.ckpt"], both(sw, ro),
          expect=("out", "ro")),
        P("empty-dir", ["empty"], lambda d: (d / "empty").mkdir(), expect=("empty", "events", "runs")),
        P("empty-events-file", ["runs/version_0", "--out", "o.png"], events_empty, expect=("events", "runs")),
        P("garbage-events-file", ["runs/version_0", "--out", "o.png"], events_garbage, expect=("events", "runs")),
        P("out-equals-events", ["runs/version_0", "--out", "runs/version_0/hparams.yaml"], expect=("out",)),
        P("tag-unknown", ["runs/version_0", "--tag", "no/such_tag", "--out", "o.png"], expect=("tag",)),
        P("smooth-0", ["runs/version_0", "--smooth", "0", "--out", "o.png"], expect=("smooth",)),
        P("points-1", ["runs/version_0", "--points", "1", "--out", "o.png"], expect=("points",)),
        P("group-no-equals", ["--group", "mlp", "--out", "o.png"], expect=("group",)),
        P("group-empty-pattern", ["--group", "mlp=", "--out", "o.png"], expect=("group",)),
        P("csv-read-only", ["runs/version_0", "--out", "o.png", "--csv", "ro/c.csv"], both(bif.copy_run(), ro),
          expect=("csv", "ro")),
        P("out-txt-suffix", ["runs/version_0", "--out", "o.txt"], expect=("out",)),
        P("glob-matches-nothing", ["runs/nope_*", "--out", "o.png"], expect=("nope", "runs")),
    ]


def external_cases() -> list[Case]:
    ext = str(ROOT / "configs/external.yaml")
    small = {"trainer": {"max_epochs": 1, "enable_progress_bar": False, "enable_model_summary": False},
             "data": {"num_envs": 4, "num_steps": 4, "update_epochs": 1, "num_minibatches": 1, "max_policy_lag": 0}}

    def x(name, init_args=None, pool=None, expect=(), extra_data=None, **kw):
        over = copy.deepcopy(small)
        ia = dict(init_args or {})
        if pool is not None:
            ia["shared"] = {"pool": pool}
        over["data"]["env"] = {"init_args": ia}
        if extra_data:
            over["data"].update(extra_data)
        return Case(name, "external", "fit", ["--config", ext, "--config", "x.yaml"],
                    both(with_code, write("x.yaml", dump(over))), expect=expect, timeout=kw.pop("timeout", 90), **kw)

    def pp(**ia):
        return {"class_path": "parlightning.subagents.ProcessPool", "init_args": ia}

    def http(url, **ia):
        return {"class_path": "parlightning.subagents.HTTPPool", "init_args": {"base_url": url, **ia}}
    p = SERVERS
    return [
        x("http-closed-port", pool=http(f"http://127.0.0.1:{closed_port()}/v1"), expect=("base_url", "pool")),
        x("http-no-scheme", pool=http("127.0.0.1:8000/v1"), expect=("base_url",)),
        x("http-ftp-scheme", pool=http("ftp://127.0.0.1/v1"), expect=("base_url",)),
        x("http-port-out-of-range", pool=http("http://127.0.0.1:99999/v1"), expect=("base_url", "port")),
        x("http-timeout-0", pool=http(f"http://127.0.0.1:{p.get('404', 1)}/v1", timeout=0), expect=("timeout",)),
        x("http-workers-0", pool=http(f"http://127.0.0.1:{p.get('404', 1)}/v1", workers=0), expect=("workers",)),
        x("http-blackhole-server", pool=http(f"http://127.0.0.1:{p.get('blackhole', 1)}/v1", timeout=1),
          expect=("pool", "timeout", "base_url"), runtime=True, timeout=120),
        x("http-garbage-server", pool=http(f"http://127.0.0.1:{p.get('garbage', 1)}/v1", timeout=2),
          expect=("pool", "json", "base_url"), runtime=True),
        x("http-404-server", pool=http(f"http://127.0.0.1:{p.get('404', 1)}/v1", timeout=2),
          expect=("pool", "404", "base_url"), runtime=True),
        x("http-reset-server", pool=http(f"http://127.0.0.1:{p.get('reset', 1)}/v1", timeout=2),
          expect=("pool", "base_url", "connection"), runtime=True),
        x("process-fn-missing-module", pool=pp(fn="nosuchmodule:fn"), expect=("fn", "nosuchmodule")),
        x("process-fn-dotted-raises", pool=pp(fn="mysub.raises", workers=1, timeout=20), expect=("mysub.raises",),
          runtime=True, env={"PYTHONPATH": ""}),
        x("process-fn-wrong-signature", pool=pp(fn="mysub:wrong_sig", workers=1, timeout=20),
          expect=("wrong_sig", "fn"), runtime=True, env={"PYTHONPATH": ""}),
        x("process-fn-returns-none", pool=pp(fn="mysub:returns_none", workers=1, timeout=20),
          expect=("returns_none", "fn"), runtime=True, env={"PYTHONPATH": ""}),
        x("process-fn-string-fields", pool=pp(fn="mysub:returns_string_success", workers=1, timeout=20),
          expect=("returns_string_success", "success"), runtime=True, env={"PYTHONPATH": ""}),
        x("process-fn-raises", pool=pp(fn="mysub:raises", workers=1, timeout=20),
          expect=("raises", "tool is down"), runtime=True, env={"PYTHONPATH": ""}),
        x("process-workers-0", pool=pp(fn="parlightning.subagents.examples:skill_matcher", workers=0), expect=("workers",)),
        x("process-workers-negative", pool=pp(fn="parlightning.subagents.examples:skill_matcher", workers=-2),
          expect=("workers",)),
        x("process-timeout-0", pool=pp(fn="parlightning.subagents.examples:skill_matcher", timeout=0), expect=("timeout",)),
        x("process-timeout-string", pool=pp(fn="parlightning.subagents.examples:skill_matcher", timeout="ten"),
          expect=("timeout",)),
        x("sim-reliability-1.5", pool={"class_path": "parlightning.subagents.SimulatedPool",
                                       "init_args": {"reliability": 1.5}}, expect=("reliability",)),
        x("sim-seconds-negative", pool={"class_path": "parlightning.subagents.SimulatedPool",
                                        "init_args": {"seconds_per_step": -1}}, expect=("seconds_per_step",)),
        x("pool-not-a-pool", pool={"class_path": "parlightning.envs.CartPoleEnv"}, expect=("pool",)),
        x("step_timeout-0", {"step_timeout": 0}, expect=("step_timeout",)),
        x("step_timeout-negative", {"step_timeout": -1}, expect=("step_timeout",)),
        x("retries-negative", {"retries": -1}, expect=("retries",)),
        x("workers-negative", {"workers": -1}, expect=("workers",)),
        x("world-no-such-class", {"world": "parlightning.subagents.world:Nope"}, expect=("world", "Nope")),
        x("world-family-unknown", {"world_kwargs": {"families": ["solo", "spiral"]}}, expect=("families", "spiral")),
        x("world-tasks_per_family-0", {"world_kwargs": {"tasks_per_family": 0}}, expect=("tasks_per_family",)),
        x("world-n_skills-0", {"world_kwargs": {"n_skills": 0}}, expect=("n_skills",)),
        x("world-kwarg-unknown", {"world_kwargs": {"max_widht": 3}}, expect=("max_widht",)),
        x("user-world-empty-tasks", {"world": "myx:EmptyTasks", "world_kwargs": {}, "shared": {}},
          expect=("tasks",), extra_data={"reward": None}),
        x("user-world-string-shape", {"world": "myx:StringShape", "world_kwargs": {}, "shared": {}},
          expect=("observation_shape",), extra_data={"reward": None}),
        x("user-world-generator-step", {"world": "myx:GeneratorStep", "world_kwargs": {}, "shared": {}},
          expect=("step", "GeneratorStep"), extra_data={"reward": None}),
        x("user-world-needs-arg", {"world": "myx:NeedsArg", "world_kwargs": {}, "shared": {}},
          expect=("endpoint", "world_kwargs"), extra_data={"reward": None}),
        x("user-world-bad-parts", {"world": "myx:BadParts", "world_kwargs": {}, "shared": {}},
          expect=("outcome", "n_subagents"), runtime=True),
        x("user-world-overflow-reward", {"world": "myx:HugeReward", "world_kwargs": {}, "shared": {}},
          expect=("reward",), extra_data={"reward": None}, runtime=True),
    ]


def environment_cases() -> list[Case]:
    """The interpreter's environment: a fresh `python -m parlightning.fit` per case."""
    def py(name, envvars, expect=(), argv_extra=(), **kw):
        return Case(name, "environment", "python",
                    [sys.executable, "-m", "parlightning.fit", "--config", "c.yaml", *argv_extra],
                    write("c.yaml", dump(TINY)), expect=expect, env=envvars, timeout=kw.pop("timeout", 90), **kw)
    return [
        py("omp-threads-0", {"OMP_NUM_THREADS": "0"}, ("OMP_NUM_THREADS",)),
        py("omp-threads-abc", {"OMP_NUM_THREADS": "abc"}, ("OMP_NUM_THREADS",)),
        py("cuda-visible-empty-accel-gpu", {"CUDA_VISIBLE_DEVICES": ""}, ("accelerator", "gpu", "cuda"),
           ("--trainer.accelerator", "gpu")),
        py("cuda-visible-garbage-accel-cuda", {"CUDA_VISIBLE_DEVICES": "x,y"}, ("accelerator", "cuda", "gpu"),
           ("--trainer.accelerator", "cuda")),
        py("leaked-torchrun-env", {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": str(closed_port())}, ("WORLD_SIZE", "RANK", "LOCAL_RANK")),
        py("master-port-garbage-ddp", {"MASTER_PORT": "abc", "MASTER_ADDR": "127.0.0.1"}, ("MASTER_PORT",),
           ("--trainer.devices", "2", "--trainer.strategy", "ddp"), timeout=120),
        py("pl-global-seed-garbage", {"PL_GLOBAL_SEED": "abc"}, ("PL_GLOBAL_SEED", "seed"),
           ("--seed_everything", "true")),
    ]


API = '''
import sys
from parlightning.errors import ConfigError
try:
{body}
except (ConfigError, ValueError, TypeError, OSError) as e:
    msg = (str(e).strip().splitlines() or [""])[0]
    print(f"error: {{type(e).__name__}}: {{msg}}", file=sys.stderr)
    sys.exit(1)
'''


def api(name, body: str, expect=(), setup=None, **kw) -> Case:
    code = API.format(body="\n".join("    " + ln for ln in body.strip().splitlines()))
    setups = [write("api.py", code), write("c.yaml", dump(TINY))]
    if setup:
        setups.insert(0, setup)
    return Case(name, "api", "script", [], both(*setups), expect=expect, script="@api.py", **kw)


def api_cases() -> list[Case]:
    cp = bif.copy_ckpt("cartpole")
    lp = "import parlightning\np = parlightning.load_policy('in.ckpt')\n"
    return [
        api("fit-config-int", "import parlightning\nparlightning.fit(config=123)", ("config",)),
        api("fit-config-missing", "import parlightning\nparlightning.fit(config='nope.yaml')", ("nope.yaml",)),
        api("fit-overrides-string", "import parlightning\nparlightning.fit(config='c.yaml', overrides='trainer.max_epochs=1')",
            ("overrides",)),
        api("fit-override-no-value", "import parlightning\nparlightning.fit(config='c.yaml', overrides=['trainer.max_epochs'])",
            ("max_epochs", "overrides")),
        api("fit-override-empty-key", "import parlightning\nparlightning.fit(config='c.yaml', overrides=['=5'])",
            ("overrides",)),
        api("fit-override-bad-value", "import parlightning\nparlightning.fit(config='c.yaml', overrides=['model.lr=abc'])",
            ("lr",)),
        api("fit-config-list-with-none", "import parlightning\nparlightning.fit(config=['c.yaml', None])", ("config",)),
        api("fit-override-tuple", "import parlightning\nparlightning.fit(config='c.yaml', overrides=[('model.lr', 1)])",
            ("overrides",)),
        api("fit-config-dict", "import parlightning\nparlightning.fit(config={'model': {'lr': 'x'}})", ("config", "lr")),
        api("load_policy-int", "import parlightning\nparlightning.load_policy(123)", ("path", "ckpt", "123")),
        api("load_policy-none", "import parlightning\nparlightning.load_policy(None)", ("path", "ckpt", "None")),
        api("load_policy-dir", "import parlightning\nparlightning.load_policy('.')", ("ckpt", "directory", "'.'")),
        api("load_policy-text", "import parlightning\nparlightning.load_policy('c.yaml')", ("c.yaml",)),
        api("load_policy-device-banana", "import parlightning\nparlightning.load_policy('in.ckpt', device='banana')",
            ("device",), cp),
        api("load_policy-device-cuda", "import parlightning\nparlightning.load_policy('in.ckpt', device='cuda:3')",
            ("device", "cuda"), cp),
        api("predict-wrong-shape", lp + "import torch\np.predict(torch.zeros(2, 7))", ("observation", "shape"), cp),
        api("predict-string", lp + "p.predict('hello')", ("obs", "observation"), cp),
        api("predict-wrong-rank", lp + "import torch\np.predict(torch.zeros(2, 3, 4))", ("observation", "shape"), cp),
        api("predict-list-of-lists-ragged", lp + "p.predict([[0.0, 1.0], [0.0]])", ("obs", "observation"), cp),
        api("load_from_checkpoint-truncated",
            "from parlightning.ppo.module import PPOModule\nPPOModule.load_from_checkpoint('in.ckpt')",
            ("in.ckpt", "checkpoint"), bif.copy_ckpt(raw=lambda b: b[: len(b) // 3])),
        api("load_from_checkpoint-missing",
            "from parlightning.ppo.module import PPOModule\nPPOModule.load_from_checkpoint('gone.ckpt')", ("gone.ckpt",)),
        api("load_from_checkpoint-dir",
            "from parlightning.ppo.module import PPOModule\nPPOModule.load_from_checkpoint('.')", ("checkpoint", "'.'", "directory")),
    ]


def all_cases() -> list[Case]:
    return (compose_cases() + user_class_cases() + yaml_cases() + trainer_cases() + cli_cases() + ckpt_cases()
            + tool_cases() + external_cases() + environment_cases() + api_cases())


QUICK = ["compose:second-model-null", "user-class:missing-required-kwarg", "user-class:property-raises",
         "yaml:duplicate-nested-key", "yaml:num_envs-huge", "trainer:max_steps-0", "trainer:devices-string-two",
         "checkpoint:symlink-loop", "checkpoint:resume-max_steps-1", "evaluate:json-equals-ckpt",
         "export:out-equals-ckpt", "api:fit-overrides-string", "external:world-n_skills-0"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a representative dozen (the fast test runs this)")
    ap.add_argument("--only", default=None, help="cases whose name or category contains one of these (comma-separated)")
    ap.add_argument("--verbose", action="store_true", help="print every case's error line")
    ap.add_argument("--json", default=None, help="write every case's outcome here")
    ap.add_argument("--keep", action="store_true", help="keep the case folders")
    a = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    torch.set_num_threads(1)
    for m in bif.MODULES.values():
        __import__(m)
    import parlightning.api  # noqa: F401
    import parlightning.inference  # noqa: F401
    start_servers()
    cases = all_cases()
    names = [f"{c.category}:{c.name}" for c in cases]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise SystemExit(f"duplicate case names: {sorted(dupes)}")
    if a.quick:
        cases = [c for c in cases if f"{c.category}:{c.name}" in QUICK]
    if a.only:
        wanted = a.only.split(",")
        cases = [c for c in cases if any(w in c.name or w in c.category for w in wanted)]
    needs = {"cartpole", "swarm"} if not a.quick else {"cartpole"}
    base = Path(tempfile.mkdtemp(prefix="bad_inputs_round4_"))
    t0 = time.monotonic()
    results = []
    try:
        make_fixtures(base / "fixtures", needs)
        for i, case in enumerate(cases):
            d = base / f"case{i:03d}"
            d.mkdir()
            try:
                if case.setup:
                    case.setup(d)
            except SkipCase as e:
                results.append((case, "skipped", str(e), 0.0))
                continue
            except Exception as e:  # the corpus' own bug: say so, run the rest
                print(f"[setup-error] {case.category}:{case.name}: {type(e).__name__}: {e}", flush=True)
                results.append((case, "skipped", f"setup raised {e!r}", 0.0))
                continue
            if case.script.startswith("@"):
                case.script = str(d / case.script[1:])
            before = bif.snapshot(d)
            rc, out, err, secs = bif.run_in_fork(case, d)
            new = {q for q in bif.snapshot(d) - before if not q.endswith((".out", ".err"))}
            outcome, line = bif.classify(case, rc, err, new)
            results.append((case, outcome, line, secs))
            if a.verbose or outcome != "clean":
                print(f"[{outcome:>10}] {case.category:>12} {case.name}: {line[:220]} ({secs:.1f}s)", flush=True)
            bif.unmount_under(d)
    finally:
        bif.unmount_under(base)
        if not a.keep:
            for root, dirs, _files in os.walk(base):
                for q in dirs:
                    try:
                        os.chmod(os.path.join(root, q), 0o755)
                    except OSError:
                        pass
            shutil.rmtree(base, ignore_errors=True)
    counted = [r for r in results if r[1] != "skipped"]
    clean, n = bif.summarize(results, counted, t0, width=14)
    if a.json:
        Path(a.json).write_text(json.dumps([
            {"name": c.name, "category": c.category, "outcome": o, "line": ln, "seconds": round(s, 2)}
            for c, o, ln, s in results], indent=1))
    return 0 if clean == n else 1


def make_fixtures(base: Path, needs: set) -> None:
    """bad_inputs_fresh's fixtures (a tiny CartPole and a tiny SwarmEnv run), only those needed."""
    for name, argv in (("cartpole", ["--config", "c.yaml"]),
                       ("swarm", ["--config", str(ROOT / "configs/swarm.yaml"), "--config", "s.yaml"])):
        if name not in needs:
            continue
        d = base / f"fixture_{name}"
        d.mkdir(parents=True)
        (d / "c.yaml").write_text(dump(TINY))
        (d / "s.yaml").write_text(dump(bif.TINY_SWARM))
        rc, out, err, _ = bif.run_in_fork(Case(name, "fixture", "fit", argv), d)
        if rc != 0 or not (d / "lightning_logs/version_0/checkpoints/last.ckpt").exists():
            raise SystemExit(f"fixture {name} failed (rc {rc}):\n{err[-3000:]}")
        bif.FIXTURES[name] = d


if __name__ == "__main__":
    sys.exit(main())
