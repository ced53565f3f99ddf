"""How far the two sampler conventions' laws lie apart on the certificate's cases
(docs/certify.md#sampler-conventions): a finding, never a failure.

A decoder that declares a convention (refdec.sampling.SAMPLER_ORDERS) is certified against the
law of that convention; this check states, for every sampling case, the exact distance between
that law and the other convention's, as each view of the case sees it: the TV of the two
next-token laws at the view's prefix (exact, over the whole vocabulary), and the TV of the two
laws over the view's bins (what the sampling check would have had to detect had the decoder
been judged against the other convention). A case without top-p gives the same law under both
(refdec.sampling: top-k and temperature keep the same tokens): its rows show a TV at rounding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from proofs.details import ConventionCase, ConventionDetails, ConventionView
from proofs.result import CheckResult
from proofs.stats.exact_laws import Oracle
from proofs.stats.views import CaseLaw, View, law_at
from refdec.sampling import SAMPLER_ORDERS


def other_order(order: str) -> str:
    return next(o for o in SAMPLER_ORDERS if o != order)


def view_distance(oracle: Oracle, law: CaseLaw, view: View, order: str) -> ConventionView:
    """One view: the other convention's law (`order`) against the case's, exactly."""
    case = law.case
    other = case.sampling.with_order(order)
    k = view.probs.size
    binned = np.zeros(k + 1)  # the other law over the view's bins; the last cell: outside them
    token_tv = None
    if view.seq_bins is None:
        mine = law_at(oracle, case, view.prefix, case.sampling).numpy()
        theirs = law_at(oracle, case, view.prefix, other).numpy()
        token_tv = 0.5 * float(np.abs(mine - theirs).sum())
        b = view.token_bins
        np.add.at(binned, np.where(b >= 0, b, k), theirs)
    else:
        for seq, i in view.seq_bins.items():
            p = 1.0
            for j in range(len(seq)):  # a stopped sequence is shorter
                p *= float(law_at(oracle, case, seq[:j], other)[seq[j]])
            binned[i] += p
        rest = max(0.0, 1.0 - float(binned.sum()))
        binned[k if view.rest is None else view.rest] += rest
    binned_tv = 0.5 * float(np.abs(binned - np.append(view.probs, 0.0)).sum())
    return ConventionView(case.name, view.name, token_tv, binned_tv)


def check_convention(name: str, laws: Mapping[str, tuple[Oracle, Sequence[CaseLaw]]]) -> CheckResult:
    """The finding over every sampled model's cases ({model: (its oracle, its case laws)}), whose
    laws are all of one convention (the decoder's). measured = the largest binned TV; informational:
    it passes whatever it finds (bound nan)."""
    rows, claimed = [], None
    for model, (oracle, case_laws) in laws.items():
        for law in case_laws:
            claimed = law.case.sampling.order
            other = other_order(claimed)
            views = [view_distance(oracle, law, v, other) for v in law.views]
            s = law.case.sampling
            rows.append(
                ConventionCase(
                    model=model,
                    case=law.case.name,
                    temperature=s.temperature,
                    top_k=s.top_k,
                    top_p=s.top_p,
                    order_matters=s.order_matters,
                    binned_tv=max((v.binned_tv for v in views), default=0.0),
                    views=tuple(views),
                )
            )
    claimed = claimed or SAMPLER_ORDERS[0]
    other = other_order(claimed)
    how = (
        f"the decoder declares {claimed}: every sampling case is judged against that law. Per view, "
        f"the exact TV between it and the {other} law of the same parameters (the next token's law "
        "at the view's prefix over the whole vocabulary; and over the view's bins, the deviation the "
        "sampling check sees). Information, not a test: a difference here is the conventions', not "
        "a decoder's loss"
    )
    details = ConventionDetails(claimed=claimed, other=other, cases=tuple(rows), how=how)
    measured = max((r.binned_tv for r in rows), default=0.0)
    return CheckResult(name, measured, math.nan, True, details)
