"""Theorem 1 by guided search: hypothesis steers (p_R, p_d1, p_d2) towards counterexamples.

`proofs.theorem1.check_theorem1_random` samples fixed random and adversarial families; here
hypothesis' `target()` climbs P(both rejected)/eps2 (gated and ungated) and the Lemma's ratio,
so the certificate reports the largest ratios a search aimed at breaking the bounds found.
Hypothesis is a runtime dependency (pyproject.toml): without it the check fails, saying why.
"""

from __future__ import annotations

import math

import torch

from proofs.result import CheckResult
from proofs.theorem1 import check_theorem1_pair

KEYS = ("ratio_gated", "ratio_ungated", "lemma_ratio")
BOUNDS = {"ratio_gated": 2.0, "ratio_ungated": 1.0, "lemma_ratio": 1.0}


def _laws(weights: list[float], vocab: int) -> tuple[torch.Tensor, ...] | None:
    w = torch.tensor(weights, dtype=torch.float64).reshape(3, vocab)
    if bool((w.sum(-1) <= 0).any()):
        return None
    return tuple(w / w.sum(-1, keepdim=True))


def check_theorem1_search(max_examples: int, seed: int, vocab: int = 5) -> CheckResult:
    try:
        from hypothesis import HealthCheck, Phase, given, settings, target
        from hypothesis import seed as hyp_seed
        from hypothesis import strategies as st
    except ImportError as e:  # a runtime dependency (pyproject.toml): a broken install fails the check
        return CheckResult(
            "theorem1_search",
            math.nan,
            2.0,
            False,
            {
                "error": f"hypothesis, a runtime dependency of loopcert, cannot be imported "
                f"({e}); reinstall loopcert"
            },
        )
    best = {k: -math.inf for k in KEYS}
    worst_rows: dict[str, dict] = {}
    failures: list[dict] = []
    # Sparse weights (exact zeros) reach disjoint supports and one-hot drafts, where bounds are tight.
    weight = st.one_of(st.just(0.0), st.floats(1e-6, 1.0), st.floats(0.0, 1e-3))

    @hyp_seed(seed)
    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=False,
        phases=[Phase.generate, Phase.target],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(weight, min_size=3 * vocab, max_size=3 * vocab))
    def search(weights):
        laws = _laws(weights, vocab)
        if laws is None:
            return
        row = check_theorem1_pair(*laws)
        for k in KEYS:
            if not math.isnan(row[k]):
                target(min(row[k], 1e6), label=k)
                if row[k] > best[k]:
                    best[k] = row[k]
                    worst_rows[k] = {"laws": [law.tolist() for law in laws], **row}
        if not (row["passed_gated"] and row["passed_ungated"] and row["passed_lemma"]):
            failures.append({"laws": [law.tolist() for law in laws], **row})

    search()
    maxima = {k: (v if v > -math.inf else math.nan) for k, v in best.items()}
    details = {
        "examples": max_examples,
        "seed": seed,
        "vocab": vocab,
        "max_ratio_ungated": maxima["ratio_ungated"],
        "max_lemma_ratio": maxima["lemma_ratio"],
        "bounds": BOUNDS,
        "worst": worst_rows,
        "failures": failures[:5],
        "n_failures": len(failures),
        "search": "hypothesis target() on each ratio",
    }
    return CheckResult("theorem1_search", maxima["ratio_gated"], 2.0, not failures, details)
