"""Old module paths keep resolving after the subpackage layout (tools/relayout.py, issue 22):
`parlightning._moved`'s finder gives the moved module itself under its old name, and jsonargparse's
`class_path` through an old path builds the very same class. These run before the layout is applied
(the finder on a synthetic table; the old modules still in place) and after it (every old path of
the table resolves to the new module's classes)."""

import importlib
import inspect
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

import parlightning
from parlightning._moved import MOVED, MovedFinder

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "relayout.py"


@pytest.fixture
def finder(monkeypatch):
    """A finder for a synthetic old name (a module that does not exist) of parlightning.sampling."""
    old = "parlightning._old_sampling_for_test"
    f = MovedFinder({old: "parlightning.sampling"})
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, f])
    yield old
    sys.modules.pop(old, None)
    if hasattr(parlightning, old.rpartition(".")[2]):
        delattr(parlightning, old.rpartition(".")[2])


def test_an_old_name_is_the_new_module_itself(finder):
    new = importlib.import_module("parlightning.sampling")
    old = importlib.import_module(finder)
    assert old is new and old.PosteriorSignal is new.PosteriorSignal
    assert new.__spec__.name == new.__name__ != finder  # it still knows its own name
    exec(f"from {finder} import DifficultyWeighted as D", ns := {})
    assert ns["D"] is new.DifficultyWeighted


def test_a_class_path_through_an_old_name_builds_the_same_class(finder):
    from jsonargparse import ArgumentParser

    from parlightning.sampling import PosteriorSignal, TaskSampler

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--sampler", type=TaskSampler)
    cfg = parser.parse_args(["--sampler", f'{{"class_path": "{finder}.PosteriorSignal", '
                                          '"init_args": {"sharpness": 2.0}}'])
    sampler = parser.instantiate(cfg).sampler
    assert type(sampler) is PosteriorSignal and sampler.sharpness == 2.0


def test_the_finder_answers_only_its_names_and_is_installed_once():
    assert MovedFinder(MOVED).find_spec("parlightning.nothing_like_this") is None
    parlightning._moved.install()
    assert sum(isinstance(f, MovedFinder) for f in sys.meta_path) == 1


def test_every_old_path_in_the_table_resolves_to_the_same_classes():
    for old, new in MOVED.items():
        try:
            moved = importlib.import_module(new)
        except ModuleNotFoundError:  # the layout is not applied here: the old module is still itself
            assert importlib.import_module(old).__name__ == old
            continue
        module = importlib.import_module(old)
        assert module is moved, old
        for name, obj in vars(moved).items():
            if inspect.isclass(obj) and obj.__module__ == new:
                assert getattr(importlib.import_module(old), name) is obj


def test_the_old_sampler_class_path_still_works_with_jsonargparse():
    from jsonargparse import ArgumentParser

    from parlightning.sampling import PosteriorSignal, TaskSampler  # an old path once the layout is applied

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--sampler", type=TaskSampler)
    cfg = parser.parse_args(["--sampler", '{"class_path": "parlightning.sampling.PosteriorSignal"}'])
    assert type(parser.instantiate(cfg).sampler) is PosteriorSignal


def test_the_alias_table_is_the_tools_table():
    tool = runpy.run_path(str(TOOL))
    want = {o: n for o, n in tool["MOVES"].items() if o not in tool["ENTRY"] and o not in tool["FACADES"]}
    assert MOVED == want


def test_the_tool_rewrites_dotted_names_once():
    tool = runpy.run_path(str(TOOL))
    text = ("from parlightning.policies import ActorCritic\nimport parlightning.sampling as s\n"
            "class_path: parlightning.parallel.DataParallel  # parlightning/sampling.py\n"
            "from parlightning import preflight\nfrom parlightning.fit import main\n"
            "python -m parlightning.fit --config swarm\n")
    once = tool["rewrite"](text, True)
    assert once == ("from parlightning.policies.actor_critic import ActorCritic\n"
                    "import parlightning.distribution.samplers as s\n"
                    "class_path: parlightning.distribution.strategies.DataParallel  "
                    "# parlightning/distribution/samplers.py\n"
                    "from parlightning.runtime import preflight\nfrom parlightning.cli.fit import main\n"
                    "python -m parlightning.fit --config swarm\n")
    assert tool["rewrite"](once, True) == once  # idempotent
    assert tool["rewrite"](tool["LAYOUT"], False) == tool["LAYOUT"]  # the new Layout section survives a rerun


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the git checkout")
def test_the_tool_on_a_clone_moves_everything_once_and_the_old_paths_still_import(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "-B", "relayout-test"], check=True)
    # the clone has the committed tree; bring the tool and the alias module as they are in this checkout
    for rel in ("tools/relayout.py", "parlightning/_moved.py", "parlightning/__init__.py"):
        (clone / rel).write_text((ROOT / rel).read_text())
    first = subprocess.run([sys.executable, "tools/relayout.py"], cwd=clone, capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stderr
    again = subprocess.run([sys.executable, "tools/relayout.py"], cwd=clone, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0 and again.stdout.strip().splitlines() == ["0 files rewritten"], again.stdout
    for old, new in MOVED.items():
        assert (clone / Path(*new.split("."))).with_suffix(".py").is_file() and \
            not (clone / Path(*old.split("."))).with_suffix(".py").exists(), old
    probe = ("import parlightning.fit as f, parlightning.cli.fit as g, parlightning.sampling as s, "
             "parlightning.distribution.samplers as t, parlightning.policies as p, "
             "parlightning.policies.actor_critic as m; "
             "assert f is g and s is t and p.ActorCritic is m.ActorCritic and callable(f)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=clone, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(clone), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    cycles = subprocess.run([sys.executable, "tools/relayout.py", "--upward"], cwd=clone, capture_output=True,
                            text=True, timeout=120)
    assert cycles.returncode == 0 and cycles.stdout.strip() == "no upward imports", cycles.stdout
