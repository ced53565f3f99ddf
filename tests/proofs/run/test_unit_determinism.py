"""A unit's result depends on (plan, seed, unit id) alone, never on what its worker ran before:
theorem1_search run twice through the --jobs executor, once in a worker that has just imported
a module full of float constants (Hypothesis mixes the constants of every loaded local module
into its draws), gives the same result. Negative control: with that pool left on, it does not."""

from __future__ import annotations

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


def test_with_a_pool_of_constants_the_search_draws_otherwise(monkeypatch):
    """Negative control: a pool of constants changes the search's result, so emptying it is what
    makes the result independent of the imports. The pool (the constants of loopcert's own modules,
    what an editable install puts in it) is installed here, not left to what this process happens
    to have loaded, which depends on the install and on the tests that ran before."""
    from hypothesis.internal.conjecture import providers
    from hypothesis.internal.constants_ast import constants_from_module

    import fastdec.engine
    import proofs.checks.greedy
    import proofs.run.plan
    import refdec.config

    pool = providers.Constants()
    for module in (proofs.run.plan, proofs.checks.greedy, refdec.config, fastdec.engine, theorem1):
        pool |= constants_from_module(module, limit=False)

    real = theorem1.local_constants
    examples = 200  # the quick plan's; at 60 the draws of constants happen not to move the maximum
    seeds = (SEED, SEED + 1, SEED + 2)  # one seed's maximum can land on the same value by chance
    empty = [theorem1.check_theorem1_search(examples, s).measured for s in seeds]
    monkeypatch.setattr(theorem1, "local_constants", lambda: real(pool))
    assert [theorem1.check_theorem1_search(examples, s).measured for s in seeds] != empty
