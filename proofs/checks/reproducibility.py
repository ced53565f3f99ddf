"""Reproducibility: the same (prompt, sampling, seed) twice must give the same tokens.

A decoder's seed is what makes a sampled certificate replayable and a user's output
debuggable. A decoder that ignores it (a server that reseeds every request, say) may still
sample the right law, so the distribution checks pass; this check is where it fails, and
certify then calls the candidate NON-REPRODUCIBLE rather than wrong in law. Requests are
sent one after another, so a batching server decodes each alone and a legitimate batch
effect (float32 rows at different widths) is not mistaken for ignoring the seed. A decoder may
declare `seed_hint`, the server flag that makes its seeds reproducible (the HTTP decoder of an
SGLang server: --enable-deterministic-inference); a failure names it in the check's power line.
"""

from __future__ import annotations

from collections.abc import Sequence

from proofs.decoder_attributes import declared_seed_hint
from proofs.decoders.candidates import Candidate
from proofs.decoders.protocol import run_generate
from proofs.details import ReproducedRun, ReproducibilityDetails, SeedDifference
from proofs.result import CheckResult
from refdec.progress import Progress
from refdec.sampling import SamplingParams

SAMPLING = SamplingParams(temperature=1.0)  # spread: two different seeds almost surely differ


def check_reproducible(
    name: str,
    candidates: Sequence[Candidate],
    model,
    prompt: Sequence[int],
    n_tokens: int,
    seeds: Sequence[int],
    progress: Progress | None = None,
) -> CheckResult:
    """measured = (setting, seed) pairs whose two runs differ; bound 0.

    Negative control in the details: two different seeds must give different outputs for at
    least one pair, else this model and prompt cannot show a decoder ignoring its seed."""
    rows, differ, distinct, hints = [], [], 0, []
    for c in candidates:
        dec = c.build(model)
        hint = declared_seed_hint(dec)  # the server flag that pins seeds, if it names one
        equal, outs = 0, []
        for s in seeds:
            a = run_generate(dec, prompt, n_tokens, SAMPLING, s)
            b = run_generate(dec, prompt, n_tokens, SAMPLING, s)
            outs.append(tuple(a))
            if a == b:
                equal += 1
            else:
                differ.append(SeedDifference(c.label, s, tuple(a), tuple(b)))
        distinct = max(distinct, len(set(outs)))
        if hint and equal < len(seeds):
            hints.append(f"{c.label}: {hint}")
        rows.append(ReproducedRun(c.label, len(seeds), equal))
        if progress:
            progress(f"  {name} {c.label}: {equal}/{len(seeds)} seeds reproduced")
    sensitive = distinct > 1
    details = ReproducibilityDetails(
        prompt=tuple(prompt),
        tokens=n_tokens,
        temperature=SAMPLING.temperature,
        seeds=tuple(seeds),
        runs=tuple(rows),
        differences=tuple(differ),
        seed_sensitive=sensitive,
    )
    error = None
    if not sensitive:
        error = (
            "every seed gave the same output: this prompt cannot show a decoder ignoring its seed (no power)"
        )
    return CheckResult(
        name,
        len(differ),
        0,
        not differ and sensitive,
        details,
        f"{len(seeds)} seeds x 2 runs per setting at T={SAMPLING.temperature:g}"
        + "".join(f"; {h}" for h in hints),
        error=error,
    )
