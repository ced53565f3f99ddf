"""Greedy exactness against refdec (docs/design.md section 6, check 1; "Greedy by one
teacher-forced pass").

The candidate's greedy tokens x_1..x_n are judged by one teacher-forced float64 forward of refdec
over prompt + x_1..x_n (refdec.score.continuation_logits): x_t must be the reference's argmax given
prompt + x_<t. By induction on t that is token-for-token equality with `refdec.generate` (tested
as a property), at one forward instead of n. Where x_t is not the argmax, the reference's logits
classify it: within the dtype's tolerance of the maximum, a numerical tie (a float32 decoder may
legitimately break it the other way), and the evidence goes on: every later token is still judged
on the candidate's own prefix; otherwise a real bug, the run's first and last finding. Every
divergence is listed, ties included: classified, never hidden. A decoder that raises or returns
the wrong number of tokens is a real bug too; a decoder factory that fails is its run's failure,
named as the factory's (no tokens, so no divergence).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from proofs.decoder_attributes import declared_compute_dtype
from proofs.decoders.candidates import Candidate, DecoderFactoryError, build_or_failure
from proofs.decoders.protocol import Decoder, NotApplicable, length_note, run_generate
from proofs.details import Divergence, GreedyDetails, GreedyRun
from proofs.result import CheckResult
from proofs.stats.exact_laws import Oracle
from refdec.progress import Progress
from refdec.sampling import SamplingParams
from refdec.score import continuation_logits
from refdec.values import dtype_name

# Logit gap (reference max minus the candidate's token, in nats) below which a divergence is
# a numerical tie, by the candidate's compute dtype: about the logit error a depth-32 looped
# forward accumulates in that precision (xformers-style table; grows as precision falls).
TIE_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-3, torch.float16: 5e-2, torch.bfloat16: 2.5e-1}
GREEDY = SamplingParams()


Mismatch = tuple[int, int, int, float, float]  # (position, reference, candidate, top2 margin, gap)


def reference_scores(
    model64, prompt: Sequence[int], tokens: Sequence[int], with_next: bool = False
) -> tuple[list[Mismatch], int | None]:
    """One teacher-forced float64 forward of refdec over prompt + tokens (refdec.score): every
    position t where tokens[t] is not the reference's argmax given prompt + tokens[:t], with the
    reference's token, the top-2 margin and the gap to the candidate's logit; and, with
    `with_next`, the reference's argmax after the last token (None when no room is left).

    tokens == refdec.generate(prompt, n) iff no position mismatches (induction on t, the lowest
    index winning ties as refdec.sampling's greedy does): one forward instead of n, and a
    position after a tie is still judged, on the candidate's own prefix."""
    room = with_next and len(prompt) + len(tokens) + 1 <= model64.cfg.max_seq_len
    logits = continuation_logits(model64, prompt, list(tokens) + ([0] if room else []))  # (n[+1], V)
    logits = logits.to(torch.float64)
    best = logits.argmax(dim=-1)  # the first maximum: refdec's tie rule
    out: list[Mismatch] = []
    for t in (best[: len(tokens)] != torch.tensor(tokens, dtype=torch.long)).nonzero().flatten().tolist():
        row = logits[t]
        top2 = torch.topk(row, 2).values
        out.append(
            (t, int(best[t]), int(tokens[t]), float(top2[0] - top2[1]), float(row.max() - row[tokens[t]]))
        )
    return out, (int(best[len(tokens)]) if room else None)


def judge(
    oracle: Oracle,
    prompt: Sequence[int],
    got: list[int],
    n: int,
    tol: float,
    cache: dict | None = None,
) -> list[dict]:
    """The candidate's n greedy tokens after `prompt`, judged by one teacher-forced pass: every
    numerical tie (a token that is not the argmax but within `tol` of the maximum logit) and the
    first real bug (a token further off, a token outside the vocabulary, a wrong count), as
    Divergence fields without the run's model, setting, prompt and dtype. [] when every token is
    the reference's argmax given the candidate's own prefix. `cache` keeps the scores by
    (oracle, prompt, tokens) across calls."""
    valid = []
    for tok in got[:n]:
        if not 0 <= tok < oracle.V:
            break
        valid.append(tok)
    key = (id(oracle), tuple(prompt), tuple(valid), len(got) < n)
    scores = None if cache is None else cache.get(key)
    if scores is None:
        scores = reference_scores(oracle.model, prompt, valid, with_next=len(got) < n)
        if cache is not None:
            cache[key] = scores
    mismatches, after = scores
    # a wrong count said beside the first real bug it explains (a decoder that returns the prompt
    # too diverges at its first token)
    wrong_length = length_note(len(got), n) if len(got) != n else None
    out = []
    for t, ref, cand, margin, gap in mismatches:
        tie = gap < tol
        out.append(
            {
                "position": t,
                "reference": ref,
                "candidate": cand,
                "top2_margin": margin,
                "candidate_gap": gap,
                "classified": "numerical tie" if tie else "real bug",
                **({} if tie or wrong_length is None else {"why": wrong_length}),
            }
        )
        if not tie:
            return out
    t = len(valid)
    if t < min(n, len(got)):  # a token outside the vocabulary
        why = "token id outside the vocabulary"
        out.append(unjudged(t, None, got[t], why))
    elif len(got) != n:
        why = length_note(len(got), n)
        out.append(unjudged(min(n, len(got)), after, got[n] if len(got) > n else None, why))
    return out


def unjudged(position: int, reference: int | None, candidate: int | None, why: str) -> dict:
    return {
        "position": position,
        "reference": reference,
        "candidate": candidate,
        "top2_margin": None,
        "candidate_gap": None,
        "classified": "real bug",
        "why": why,
    }


def check_greedy(
    name: str,
    runs: Sequence[tuple[str, str, Decoder, Oracle, torch.dtype]],
    prompts: Callable[[Oracle], Sequence[Sequence[int]]],
    n_tokens: int,
    progress: Progress | None = None,
    references: dict | None = None,
) -> CheckResult:
    """runs: (model label, setting label, decoder, oracle of that model, decoder dtype); the
    decoder is a DecoderFactoryError when its factory failed: that run is listed with the error
    and fails, with no divergence (nothing was decoded).

    measured = real bugs found plus runs whose factory failed, bound = 0; ties are counted and
    listed but pass. `references` keeps the reference's scores of each (oracle, prompt, tokens)
    across calls that share oracles (the mutation check's many runs, greedy_<dtype> after
    greedy_float64).
    """
    refs: dict[tuple, tuple] = {} if references is None else references
    rows: list[GreedyRun] = []
    divergences: list[Divergence] = []
    failed_builds = 0
    for model_label, setting, decoder, oracle, dtype in runs:
        if isinstance(decoder, DecoderFactoryError):  # no decoder: the run failed, nothing decoded
            failed_builds += 1
            n_prompts = len(prompts(oracle))
            rows.append(
                GreedyRun(model_label, setting, dtype_name(dtype), n_prompts, n_tokens, 0, str(decoder))
            )
            if progress:
                progress(f"  {name} {model_label} / {setting}: {decoder}")
            continue
        dtype = declared_compute_dtype(decoder) or dtype  # the tie tolerance's dtype
        tol = TIE_TOLERANCE.get(dtype, TIE_TOLERANCE[torch.float32])
        agree = 0
        for prompt in prompts(oracle):
            try:
                got = run_generate(decoder, prompt, n_tokens, GREEDY, 0)
            except Exception as e:  # noqa: BLE001 - a decoder failure is a finding
                found = [unjudged(0, None, None, f"{type(e).__name__}: {e}")]
            else:
                found = judge(oracle, prompt, got, n_tokens, tol, refs)
            agree += not found
            divergences += [
                Divergence(model_label, setting, tuple(prompt), dtype_name(dtype), **d) for d in found
            ]
        n_prompts = len(prompts(oracle))
        rows.append(GreedyRun(model_label, setting, dtype_name(dtype), n_prompts, n_tokens, agree))
        if progress:
            progress(f"  {name} {model_label} / {setting}: {agree}/{n_prompts} prompts equal")
    bugs = sum(d.classified == "real bug" for d in divergences)
    details = GreedyDetails(
        runs=tuple(rows),
        divergences=tuple(divergences),
        real_bugs=bugs,
        numerical_ties=len(divergences) - bugs,
        tie_tolerance={dtype_name(k): v for k, v in TIE_TOLERANCE.items()},
        tokens_per_prompt=n_tokens,
    )
    failures = bugs + failed_builds
    return CheckResult(name, failures, 0, failures == 0, details)


GreedyRunSpec = (
    tuple  # (model name, setting, decoder or DecoderFactoryError, oracle, dtype): check_greedy's runs
)


def float64_runs(
    certified: str,
    model64,
    oracle: Oracle,
    presets: Sequence[str],
    grid: Callable[[int], list[Candidate]],
    load: Callable[[str], object],
) -> tuple[list[GreedyRunSpec], list[str]]:
    """greedy_float64's runs: every setting of `grid(R)` on the certified model (float64) and on
    each tiny preset (`load(name)`: its float64 model), and the "not applicable" lines. The
    certified model must take every setting (its NotApplicable propagates); a preset the factory
    declines, or a decoder bound to its own model, is listed as not applicable; a factory that
    raises anything else, on any model, is that run's failure ("the decoder factory failed on
    MODEL: ..."), never a divergence of tokens it did not decode."""
    runs, not_applicable = [], []
    for name in [certified] + [p for p in presets if p != certified]:
        ours = name == certified
        m = model64 if ours else load(name)
        o = oracle if ours else Oracle(m)
        for c in grid(m.cfg.recurrence):
            if c.own_model and not ours:
                not_applicable.append(f"{c.label} on {name}: serves only its own model")
                continue
            try:
                dec = build_or_failure(c, m, name)
            except NotApplicable as e:  # the factory serves only its own checkpoint
                if ours:
                    raise
                not_applicable.append(f"{c.label} on {name}: {e or 'declined by the factory'}")
                continue
            runs.append((name, c.label, dec, o, torch.float64))
    return runs, not_applicable
