"""The reader's walk of a run's config from ``train_run`` (issue 42 asks ≤ 25 stays and ≤ 6 climbs), as
:mod:`cfg_walk` measures it: the walk on a small package of known shape, and the project's own walk
held from growing while that goal is not met."""

from __future__ import annotations

from pathlib import Path

from cfg_walk import walk_config
from source_tree import write_package

SRC = Path(__file__).resolve().parents[1] / "src"
LIMIT_STAYS, LIMIT_CLIMBS = 16, 6
"""Today's walk (2026-11-29; 33 / 14 that morning), within the issue's goal of 25 and 6: ``train_run``
hands the config to a task the config names (``configured_task``, ``Task.run``), else builds the
experiment (``Experiment.build`` reads the config once — plug-ins, ``RunSettings.read``, the dataset, the
task, the model — each of those files a climb back into experiment.py). :func:`standard_run` receives the
built experiment, which the walk does not follow (it is what the config built); followed through the
experiment's own ``exp.cfg`` (the run folder's config.yaml, the curves' title) the walk is 23 / 9."""


def test_the_walk_follows_the_config_into_functions_and_counts_the_returns(tmp_path):
    root = write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/runner.py": """
            from . import settings
            from .build import Builder, build
            from .errors import Refused, locate

            def train_run(cfg, run_dir):
                options = cfg.data.get("train") or {}
                if not options:
                    raise Refused(cfg)  # quoted in an error: not followed
                locate(cfg.where("train"))  # a key's file and line, not a setting: not followed
                model = build(cfg.model)  # into build.py, which follows into settings.py, then back here
                builder = Builder(options)
                builder.fit(run_dir)  # no config handed over: not followed
                builder.write(options)  # build.py again: a method found from the constructor's class
                settings.record(cfg)  # settings.py: the walk ends there, nothing more to return to
                return model

            def unused(cfg):
                build(cfg)
        """,
        "pkg/build.py": """
            from .settings import parse

            def build(section):
                parsed = parse(section["type"])
                return parsed

            class Builder:
                def __init__(self, options):
                    self.options = options

                def fit(self, run_dir):
                    pass

                def write(self, options):
                    return dict(options)
        """,
        "pkg/settings.py": """
            def parse(name):
                return name

            def record(cfg):
                return parse(cfg)  # already read: not read again
        """,
        "pkg/errors.py": """
            class Refused(Exception):
                def __init__(self, cfg):
                    super().__init__(str(cfg))

            def locate(where):
                return where
        """,
    })  # fmt: skip
    walk = walk_config(root, "pkg", start=("pkg.runner", "train_run", "cfg"))
    assert walk.stays == ["pkg/runner.py", "pkg/build.py", "pkg/settings.py", "pkg/runner.py", "pkg/build.py",
                          "pkg/runner.py", "pkg/build.py", "pkg/runner.py", "pkg/settings.py"]  # fmt: skip
    assert walk.climbs == 3  # runner.py reopened after each callee; build.py never (parse was its last call)
    assert walk.read == ["pkg.runner:train_run", "pkg.build:build", "pkg.settings:parse", "pkg.build:Builder.__init__",
                         "pkg.build:Builder.write", "pkg.settings:record"]  # fmt: skip
    assert walk.visits("pkg/runner.py") == 4


def test_the_walk_follows_a_method_of_an_annotated_field_of_a_built_object(tmp_path):
    root = write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/runner.py": """
            from .built import Built

            def train_run(cfg):
                exp = Built.make(cfg)  # the return annotation says what exp is
                exp.task.run(cfg)  # Built.task: Task, annotated in the class body
                exp.other.run(cfg)  # not annotated: not known, not followed
        """,
        "pkg/built.py": """
            from .tasks import Task

            class Built:
                task: Task
                other = None

                @classmethod
                def make(cls, cfg) -> "Built":
                    return cls()
        """,
        "pkg/tasks.py": """
            class Task:
                def run(self, cfg):
                    return cfg
        """,
    })  # fmt: skip
    walk = walk_config(root, "pkg", start=("pkg.runner", "train_run", "cfg"))
    assert walk.read == ["pkg.runner:train_run", "pkg.built:Built.make", "pkg.tasks:Task.run"]
    assert walk.stays == ["pkg/runner.py", "pkg/built.py", "pkg/runner.py", "pkg/tasks.py"] and walk.climbs == 1


def test_the_config_walk_from_train_run_does_not_grow():
    walk = walk_config(SRC)
    assert walk.read[0] == "modforge.experiment.runner:train_run" and len(walk.read) > 10, walk.read
    assert len(walk.stays) <= LIMIT_STAYS and walk.climbs <= LIMIT_CLIMBS, (
        f"{len(walk.stays)} stays, {walk.climbs} climbs (at most {LIMIT_STAYS} and {LIMIT_CLIMBS}): {walk.describe()}"
    )
