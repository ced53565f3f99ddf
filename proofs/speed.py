"""Speed of each setting relative to the autoregressive baseline, measured in one run
(DESIGN.md section 6, check 6). Ratios only: absolute tokens/s depend on the machine.

Each decoder is warmed up once (allocation, CUDA-graph capture), then timed on the same
greedy prompts `repeats` times; the median wall time gives tokens/s. The check fails only if
a setting cannot run; how fast it is is reported, never asserted.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch

from proofs.candidates import Candidate
from proofs.progress import Progress
from proofs.protocol import tokens_of
from proofs.result import CheckResult
from refdec.sampling import SamplingParams


def _sync(model) -> None:
    p = next(model.parameters())
    if p.is_cuda:
        torch.cuda.synchronize(p.device)


def time_decoder(decoder, model, prompts: Sequence[Sequence[int]], n_tokens: int, repeats: int) -> dict:
    greedy = SamplingParams()
    decoder.generate(list(prompts[0]), n_tokens, greedy, 0)  # warm-up
    walls, stats, tokens = [], None, 0
    for _ in range(repeats):
        _sync(model)
        t0 = time.perf_counter()
        tokens = 0
        for p in prompts:
            result = decoder.generate(list(p), n_tokens, greedy, 0)
            tokens += len(tokens_of(result))
        _sync(model)
        walls.append(time.perf_counter() - t0)
        stats = getattr(result, "stats", None)
    wall = statistics.median(walls)
    out = {"tokens": tokens, "seconds": wall, "tokens_per_s": tokens / wall if wall > 0 else float("inf")}
    if stats is not None and hasattr(stats, "as_dict"):  # fastdec telemetry of the last prompt
        s = stats.as_dict()
        out.update({k: s.get(k) for k in ("acceptance_rate", "gamma", "mean_live_lanes")})
    return out


def check_speed(name: str, candidates: Sequence[Candidate], baseline: Candidate, model,
                prompts: Sequence[Sequence[int]], n_tokens: int, repeats: int,
                progress: Progress | None = None) -> CheckResult:
    """measured = the best speedup over the baseline (reported, not bounded); passes iff all ran."""
    rows, errors = [], []
    base = time_decoder(baseline.build(model), model, prompts, n_tokens, repeats)
    rows.append({"setting": baseline.label + " (baseline)", **base, "speedup": 1.0})
    for c in candidates:
        if c.label == baseline.label and c.settings == baseline.settings:
            continue
        try:
            r = time_decoder(c.build(model), model, prompts, n_tokens, repeats)
        except Exception as e:  # noqa: BLE001 - a setting that cannot run is the finding
            errors.append({"setting": c.label, "error": f"{type(e).__name__}: {e}"})
            continue
        rows.append({"setting": c.label, **r, "speedup": r["tokens_per_s"] / base["tokens_per_s"]})
        if progress:
            progress(f"  {name} {c.label}: {r['tokens_per_s']:.1f} tok/s, x{rows[-1]['speedup']:.2f}")
    best = max(r["speedup"] for r in rows)
    dev = next(model.parameters())
    details = {"rows": rows, "errors": errors, "prompts": len(prompts), "tokens_per_prompt": n_tokens,
               "repeats": repeats, "device": str(dev.device), "dtype": str(dev.dtype).replace("torch.", ""),
               "baseline": baseline.label, "informational": True}
    return CheckResult(name, best, 1.0, not errors, details)
