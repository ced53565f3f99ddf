"""The one extrapolation from cuts of a model to the model (docs/scale.md, "From cuts to the
model"): each cut's time scaled by the work of the model over the cut's, the cuts' estimates'
geometric mean. The layer-cut estimate (proofs/cost/estimate.py) and the scale table's parts from
cuts (benchmarks/scale_report.py) both extrapolate so; building weights scales with the
parameters instead (refdec.sizes.parameters).

Why scaling and not a line through the two cuts: the cuts differ by one layer, 10-30% of a
forward at the sweep's widths, so a difference of two timings is mostly noise, and multiplied by
the layers beyond it reads that noise 20-fold. Forwards of ouro-w2048 cut to 1, 2, 4 and 6 layers
(docs/measurements.md, "Linearity check") took 1.194, 1.298, 2.322 and 2.912 s: the line through
the 1- and 2-layer cuts says 1.51 and 1.71 s at 4 and 6 layers (-35%, -41%), the cuts scaled by
their multiply-adds 2.17 and 2.90 s (-7%, -0.6%).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from refdec.checkpoints import meta_model
from refdec.config import ModelConfig


def work(cfg: ModelConfig) -> int:
    """Multiply-adds of one position at one depth of a model of `cfg`: every weight matrix but the
    embedding table (a lookup), and the head where it is the embedding's (tied)."""
    model = meta_model(cfg)
    n = sum(
        p.numel() for name, p in model.named_parameters() if p.dim() >= 2 and not name.startswith("embed_")
    )
    return n + (model.embed_tokens.weight.numel() if cfg.tie_embeddings else 0)


def scaled(times: Mapping[int, float], sizes: Mapping[int, float], size: float) -> float:
    """The time at `size` from each cut's time (`times`) at its size (`sizes`, the same keys): each
    scaled by size / its size, their geometric mean; 0 where a cut timed nothing measurable."""
    est = [t * size / sizes[k] for k, t in times.items()]
    if min(est) <= 0.0:
        return 0.0
    return math.exp(sum(math.log(e) for e in est) / len(est))
