"""refdec's exact law of short sequences, for the engine tests that sample one
(tests/proofs/engines/test_mlx_decoder.py, test_openvino_decoder.py): every sequence of up to n
tokens, ending early at a stop token, with its probability, by enumerating the support
(refdec.score.continuation_laws at every prefix); and a chi-square of sampled counts against it."""

from __future__ import annotations

from collections import Counter

import torch

from proofs.stats.chisquare import chisquare_gof
from refdec.score import continuation_laws


def sequence_law(model, prompt, n, sampling) -> dict[tuple[int, ...], float]:
    """refdec's exact law of the sequences of up to n tokens after `prompt` (ending early at a stop token)."""
    stops, out = sampling.stop_ids(), {}

    def walk(prefix: tuple[int, ...], p: float) -> None:
        if len(prefix) == n or (prefix and prefix[-1] in stops):
            out[prefix] = p
            return
        law = continuation_laws(model, prompt, prefix + (0,), sampling)[-1]
        for t in torch.nonzero(law > 0).flatten().tolist():
            walk(prefix + (t,), p * float(law[t]))

    walk((), 1.0)
    return out


def gof_p(counts: Counter, law: dict) -> float:
    """The chi-square p-value of sampled sequence counts against `law` (a sequence outside it: p 0)."""
    cells = sorted(set(law) | set(counts))
    return chisquare_gof([counts[c] for c in cells], [law.get(c, 0.0) for c in cells])["p_value"]
