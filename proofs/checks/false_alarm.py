"""False-alarm rate of the sampling check (docs/design.md section 6; the full plan).

Each lossless control of the mutant library (proofs/checks/mutation.py) is put through the planned
sampling check (every view of the three tiny-ouro cases, N per case from the plan's target TV,
Holm at the plan's alpha) K times with independent samples. The chi-square test is asymptotic,
so its real level is measured, not assumed: the rejection count should be about
Binomial(K, alpha). Replicates are cheap because each draws the control's counts from its exact
law in one multinomial (the control's law is enumerated: SpecRef.sequence_law), which is what
its samples would be. Reported: rejections, the rate with a Clopper-Pearson 95% interval against
alpha, and the same at level 0.05 (where a miscalibrated test shows with 200 replicates). The
check fails when a count is implausibly high for its binomial (one-sided p < `plausibility`).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats

import refdec
from proofs.checks.distribution import Target, alpha_per_test, evaluate, planned_samples
from proofs.details import AlarmRate, ControlAlarms, FalseAlarmDetails
from proofs.result import CheckResult
from proofs.stats.chisquare import holm
from proofs.stats.exact_laws import Oracle
from proofs.stats.views import CaseLaw, case_law
from refdec.progress import Progress

MODEL = "tiny-ouro"
SECOND_LEVEL = 0.05


def view_maps(law: CaseLaw, seqs: list[tuple[int, ...]]) -> tuple[list[np.ndarray], np.ndarray]:
    """Per view, cell -> bin (-1: not counted); and the cells that are impossible under the law."""
    maps = []
    for v in law.views:
        m = np.full(len(seqs), -1, dtype=np.int64)
        for i, s in enumerate(seqs):
            if v.seq_bins is not None:
                b = v.seq_bins.get(s, v.rest)
                m[i] = -1 if b is None else b
            elif s[: v.position] == v.prefix:
                m[i] = v.token_bins[s[v.position]]
        maps.append(m)
    bad = np.array(
        [any(s[:j] in law.nodes and law.nodes[s[:j]][s[j]] <= 0 for j in range(len(s))) for s in seqs]
    )
    return maps, bad


def replicate_tally(
    counts: np.ndarray, maps: list[np.ndarray], bad: np.ndarray, law: CaseLaw, n: int
) -> dict:
    k = [v.probs.size for v in law.views]
    return {
        "samples": n,
        "impossible": int(counts[bad].sum()),
        "planned": n,
        "seconds": 0.0,
        "samples_per_s": None,
        "batched": True,
        "error": None,
        "stopped_by_deadline": False,
        "seeds": None,
        "counts": [
            np.bincount(m[m >= 0], weights=counts[m >= 0], minlength=kk)[:kk].astype(np.int64).tolist()
            for m, kk in zip(maps, k, strict=True)
        ],
    }


def check_false_alarm(
    replicates: int,
    target: Target,
    base_seed: int,
    plausibility: float = 1e-3,
    model=None,
    decoders: dict | None = None,
    progress: Progress | None = None,
) -> CheckResult:
    """`decoders` ({label: SpecRef}, default: the library's lossless controls) is a parameter so that
    tests can show the check failing on a wrong one."""
    from proofs.checks.mutation import CASES, LIBRARY

    model = refdec.load_model(MODEL, dtype=torch.float64) if model is None else model
    oracle = Oracle(model)
    if decoders is None:
        decoders = {m.id: m.build(oracle) for m in LIBRARY if m.control and m.edge is None}  # sampled
    laws = [case_law(oracle, c) for c in CASES[:3]]
    a = alpha_per_test(laws, target)
    ns = [planned_samples(law, target, a) for law in laws]
    rng = np.random.default_rng([base_seed, replicates])
    rows, min_ps, rej_alpha, rej_second = [], [], 0, 0
    for label, dec in decoders.items():
        tables = []
        for law in laws:
            c = law.case
            seq_law = dec.sequence_law(c.prompt, c.n, c.sampling)
            seqs = sorted(seq_law)
            p = np.array([seq_law[s] for s in seqs])
            tables.append((seqs, p / p.sum(), *view_maps(law, seqs)))
        mine = [0, 0]
        for _ in range(replicates):
            tallies = [
                replicate_tally(rng.multinomial(n, p), maps, bad, law, n)
                for law, n, (seqs, p, maps, bad) in zip(laws, ns, tables, strict=True)
            ]
            r = evaluate("false_alarm", laws, tallies, target)
            ps = [v.p_value for c in r.details.cases for v in c.views]
            min_ps.append(min(ps))
            mine[0] += any(holm(ps, target.alpha))
            mine[1] += any(holm(ps, SECOND_LEVEL))
        rej_alpha += mine[0]
        rej_second += mine[1]
        rows.append(ControlAlarms(label, replicates, rejections=mine[0], rejections_second_level=mine[1]))
        if progress:
            progress(
                f"  false_alarm {label}: {mine[0]}/{replicates} rejected at {target.alpha:g}, "
                f"{mine[1]} at {SECOND_LEVEL:g}"
            )
    k = replicates * len(decoders)
    at_alpha, second = (
        _rate(level, rej, k) for level, rej in ((target.alpha, rej_alpha), (SECOND_LEVEL, rej_second))
    )
    passed = at_alpha.binomial_tail_p >= plausibility and second.binomial_tail_p >= plausibility
    details = FalseAlarmDetails(
        model=model.cfg.name,
        decoder=", ".join(decoders),
        case=", ".join(law.case.name for law in laws),
        replicates=k,
        per_control=tuple(rows),
        n_samples=tuple(ns),
        target_tv=target.tv,
        alpha=target.alpha,
        at_alpha=at_alpha,
        second_level=second,
        plausibility=plausibility,
        how="counts drawn from each control's exact law (multinomial)",
        seeds=f"numpy default_rng([{base_seed}, {replicates}])",
        p_value_deciles=tuple(np.quantile(min_ps, np.linspace(0, 1, 11)).tolist()),
    )
    return CheckResult("false_alarm", rej_alpha / k, target.alpha, passed, details)


def _rate(level: float, rejections: int, k: int) -> AlarmRate:
    """Rejections of k checks at `level`: the rate, its Clopper-Pearson interval, and how likely
    that many are if the test holds its level."""
    ci = stats.binomtest(rejections, k).proportion_ci(0.95)
    tail = float(stats.binom.sf(rejections - 1, k, level))
    return AlarmRate(level, rejections, rejections / k, (ci.low, ci.high), tail)
