"""A unit's result depends on (plan, seed, unit id) alone, never on what its worker ran before:
theorem1_search run twice through the --jobs executor, once in a worker that has just imported
a module full of float constants (Hypothesis mixes the constants of every loaded local module
into its draws), gives the same result. Negative control: with that pool left on, it does not."""

from __future__ import annotations

import contextlib
import importlib
import sys

import proofs.checks.theorem1 as theorem1
from proofs.run.jobs import run_units

EXAMPLES, SEED = 60, 0


class NoBudget:
    def reserve(self, uid):
        return None

    def settle(self, uid, used):
        pass


def twice(tmp_path) -> tuple[dict, dict]:
    folder = tmp_path / "mods"
    folder.mkdir(exist_ok=True)
    (folder / "consts_mod.py").write_text(
        "WEIGHTS = [" + ", ".join(f"{0.37 + k / 97:.6f}" for k in range(40)) + "]\n"
    )

    def bare(share=None):
        return theorem1.check_theorem1_search(EXAMPLES, SEED).to_dict()

    def after_import(share=None):
        sys.path.insert(0, str(folder))
        importlib.import_module("consts_mod")
        return bare()

    got = run_units([("bare", bare), ("after-import", after_import)], 2, NoBudget())
    return got["bare"], got["after-import"]


def plain(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "seconds"}


def test_theorem1_search_does_not_depend_on_what_its_worker_imported(tmp_path):
    a, b = twice(tmp_path)
    assert a["passed"] and plain(a) == plain(b)


def test_with_hypothesis_constant_pool_left_on_it_does(tmp_path, monkeypatch):
    monkeypatch.setattr(theorem1, "_without_local_constants", contextlib.nullcontext)
    a, b = twice(tmp_path)
    assert plain(a) != plain(b)
