"""The engine-relative check: a speculative decoder's samples against the same engine's plain
decoder, for engines whose law refdec cannot reproduce exactly (docs/certify.md#the-engine-relative-check).

Each case of the sampling check (same prompt, sampling parameters, n and views) is drawn N times
from both decoders: the candidate with seeds base .. base+N-1, the reference (`--relative-to`)
with seeds base+N .. base+2N-1 (disjoint: two modes of one engine fed one seed may share their
first draws, which would hide a difference). Each view counts both samples over its bins, fixed
from refdec's exact law, plus one cell for tokens outside that law's support (neither engine's
law is refdec's to judge: no sample is impossible here, only malformed); a chi-square test of
homogeneity per view (proofs/stats/two_sample.py), Holm across every view of every case.

Power is planned as for the one-sample check: every view must detect a binned TV >= target
between the two decoders' laws with probability >= power at its Holm level, which takes twice
the one-sample N per decoder (n_eff = N/2); a view that ends below it fails as "no power". The
power is stated at refdec's law over the bins (the law both decoders claim).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from proofs.checks.distribution import Target, alpha_per_test, case_spec, judged, judged_result, view_needs
from proofs.decoders.draw import draw
from proofs.decoders.protocol import Decoder
from proofs.details import RelativeCase, RelativeDetails, RelativeView
from proofs.result import CheckResult
from proofs.stats.chisquare import holm
from proofs.stats.two_sample import homogeneity, two_sample_bins, two_sample_detectable_tv
from proofs.stats.views import CaseLaw, View

SIDES = ("candidate", "reference")


def reference_seed(base_seed: int, n_samples: int) -> int:
    """The reference decoder's first seed: right after the candidate's N."""
    return base_seed + n_samples


def relative_tally(
    candidate: Decoder,
    reference: Decoder,
    law: CaseLaw,
    n_samples: int,
    base_seed: int,
    deadlines: tuple[float | None, float | None] = (None, None),
) -> dict:
    """Sample one case from both decoders and count each through every view (a work unit's raw
    result): {"planned": N, "candidate": tally, "reference": tally}, each tally CaseLaw.open_tally's
    with the draw's seconds, error, deadline stop and seeds."""
    c = law.case
    out: dict = {"planned": n_samples}
    for side, dec, seed, deadline in zip(
        SIDES,
        (candidate, reference),
        (base_seed, reference_seed(base_seed, n_samples)),
        deadlines,
        strict=True,
    ):
        d = draw(dec, c.prompt, c.n, c.sampling, seed, n_samples, deadline)
        out[side] = {
            **law.open_tally(d.samples),
            "seconds": d.seconds,
            # requests that raised fail the case as the decoder's error (draw skipped them); the
            # one-sample checks judge the completed samples within a bias bound, this one not yet
            "error": d.error
            or (
                f"{d.failed} of {d.requests} requests raised (first seed {d.first_failed_seed}: "
                f"{d.first_failure})"
                if d.failed
                else None
            ),
            "stopped_by_deadline": d.stopped_by_deadline,
            "seeds": [seed, seed + n_samples - 1],
        }
    return out


def view_row(
    case: str, view: View, counts_a, counts_b, target: Target, alpha_test: float, fatal: bool
) -> RelativeView:
    """One view's homogeneity test; Holm has not judged it yet (holm_rejected False)."""
    a, b = np.asarray(counts_a, dtype=np.int64), np.asarray(counts_b, dtype=np.int64)
    n_a, n_b = int(a.sum()), int(b.sum())
    bins = two_sample_bins(view.probs, n_a, n_b)
    law = np.append(view.probs, 0.0)
    bin_probs = [float(law[c].sum()) for c in bins]
    labels = [
        " + ".join(view.labels[i] if i < view.probs.size else "outside the law" for i in c) for c in bins
    ]
    h = homogeneity(a, b, bins)
    usable = view.bins >= 2 and n_a > 0 and n_b > 0 and sum(p > 0 for p in bin_probs) >= 2
    tv = two_sample_detectable_tv(n_a, n_b, bin_probs, alpha_test, target.power) if usable else math.inf
    return RelativeView(
        case=case,
        view=view.name,
        counted=(n_a, n_b),
        needed_n=view_needs(view, target, alpha_test, 2),
        bin_labels=tuple(labels),
        bin_probs=tuple(bin_probs),
        counts=(tuple(h["observed_a"]), tuple(h["observed_b"])),
        dof=h["dof"],
        stat=h["stat"] if usable else None,
        p_value=0.0 if fatal else (h["p_value"] if usable else 1.0),
        detectable_tv=tv,
        empirical_tv=h["empirical_tv"],
        has_power=tv <= target.tv,
        holm_rejected=False,
    )


def evaluate_relative(
    name: str,
    laws: Sequence[CaseLaw],
    tallies: Sequence[dict],
    target: Target,
    candidate: str,
    reference: str,
) -> CheckResult:
    """The check from the work units' tallies (pure: shards combine here). measured = the
    smallest p-value, bound = alpha/m; passes iff Holm rejects nothing, neither decoder failed
    or broke the protocol, and every view reached the target TV."""
    alpha_test = alpha_per_test(laws, target)
    cases = []
    for law, t in zip(laws, tallies, strict=True):
        ta, tb = t["candidate"], t["reference"]
        fatal = bool(ta["error"] or tb["error"] or ta["malformed"] or tb["malformed"])
        views = [
            view_row(law.case.name, v, ca, cb, target, alpha_test, fatal)
            for v, ca, cb in zip(law.views, ta["counts"], tb["counts"], strict=True)
        ]
        cases.append((law, t, views))
    p_values = [v.p_value for _, _, views in cases for v in views]
    rejected = iter(holm(p_values, target.alpha) if p_values else [])
    rows = []
    for law, t, views in cases:
        views = [replace(v, holm_rejected=bool(next(rejected))) for v in views]
        ta, tb = t["candidate"], t["reference"]
        rows.append(
            RelativeCase(
                **vars(case_spec(law.case)),
                order=law.case.sampling.order,
                planned=t["planned"],
                samples=(ta["samples"], tb["samples"]),
                seconds=(ta["seconds"], tb["seconds"]),
                seeds=(ta["seeds"], tb["seeds"]),
                errors=(ta["error"], tb["error"]),
                malformed=(ta["malformed"], tb["malformed"]),
                stopped_by_deadline=bool(ta["stopped_by_deadline"] or tb["stopped_by_deadline"]),
                detectable_tv=max((v.detectable_tv for v in views), default=math.inf),
                needed_n=max((v.needed_n or 0 for v in views), default=0) or None,
                has_power=bool(views) and all(v.has_power for v in views),
                views=views,
            )
        )
    views = [v for c in rows for v in c.views]
    verdict = judged(rows, [c.case for c in rows if any(c.errors) or any(c.malformed)], target, alpha_test)
    worst = verdict["detectable_tv"]
    power = (
        f"every view must detect a binned TV >= {target.tv:g} between the two decoders' laws with "
        f"probability >= {target.power:g} at alpha {alpha_test:.3g} (= {target.alpha:g}/{max(1, len(views))} "
        f"Holm); reached: {worst:.3g} (worst case); two-sample chi-square, n_eff = n_a n_b / (n_a + n_b), "
        "non-central chi-square at refdec's law over the bins"
    )
    details = RelativeDetails(
        candidate=candidate,
        reference=reference,
        **verdict,
        samples=sum(sum(c.samples) for c in rows),
        sampling_seconds=sum(sum(c.seconds) for c in rows),
        cases=tuple(rows),
    )
    return judged_result(name, details, power)


def check_relative(
    name: str,
    candidate: Decoder,
    reference: Decoder,
    laws: Sequence[CaseLaw],
    target: Target,
    base_seed: int,
    samples: Sequence[int],
    labels: tuple[str, str] = ("candidate", "reference"),
) -> CheckResult:
    """Sample every case from both decoders (N per decoder: `samples`, e.g.
    proofs.run.cases.relative_plan) and evaluate; what a certify run does unit by unit."""
    tallies = [
        relative_tally(candidate, reference, law, n, base_seed) for law, n in zip(laws, samples, strict=True)
    ]
    return evaluate_relative(name, laws, tallies, target, *labels)
