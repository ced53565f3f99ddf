"""How a Raven-style recurrence moves its state: step sizes, the gain of the iteration map, and
how long the initial state is remembered (a core that contracts to a fixed point within a few
iterations makes depth not matter; Huginn's does not contract).

    step_sizes      ||h(r) - h(r-1)|| / ||h(r-1)||, r = 2..r_max (mean over sequences)
    iteration_gain  dominant |eigenvalue| of the Jacobian of h -> recur(h, e) at h(depth),
                    by power iteration on finite differences (float64): < 1 contracts
    init_sensitivity  mean TV(p_r from the model's own h(0), p_r from another h(0)) per depth r:
                    another draw of the seeded law, and noise 3x larger (forgetting the state)

Computed with refdec's own maths (refdec.model.Net: embed / recur / readout), whole sequences at once.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch

from analysis.depth_profile import fused_attention_for
from fastdec.accept import total_variations
from refdec.errors import LoopcertError
from refdec.layers import rope_tables, seeded_state


def _prepare(model, ids: torch.Tensor):
    if ids.dim() != 2 or ids.numel() == 0:
        raise LoopcertError(f"ids must be a non-empty (N, T) tensor, got shape {tuple(ids.shape)}")
    if model.cfg.family != "raven":
        raise LoopcertError("state dynamics need a Raven-family model (a recurrent state with injection)")
    pos = torch.arange(ids.shape[1])
    cos, sin = rope_tables(model.cfg, pos)
    net = model.net()
    return net, pos, cos, sin, net.embed(ids, cos, sin, fused_attention_for)


def _run(net, h, e, cos, sin, depths: Sequence[int]) -> dict[int, torch.Tensor]:
    """{r: log-probs (N, T, V) float64} from the initial state h."""
    out = {}
    for r in range(1, max(depths) + 1):
        h = net.recur(h, e, cos, sin, fused_attention_for)
        if r in depths:
            out[r] = torch.log_softmax(net.readout(h, cos, sin, fused_attention_for).double(), -1)
    return out


@torch.no_grad()
def step_sizes(model, ids: torch.Tensor, r_max: int) -> list[float]:
    """[relative state change at r = 2..r_max], averaged over the N sequences (norm over (T, d))."""
    net, pos, cos, sin, e = _prepare(model, ids)
    h = net.initial_state(e, pos)
    prev, out = None, []
    for _ in range(r_max):
        h = net.recur(h, e, cos, sin, fused_attention_for)
        if prev is not None:
            num = (h - prev).double().flatten(1).norm(dim=1)
            out.append(float((num / prev.double().flatten(1).norm(dim=1)).mean()))
        prev = h
    return out


@torch.no_grad()
def iteration_gain(
    model, ids: torch.Tensor, depth: int, iters: int = 12, eps: float = 1e-4, seed: int = 0
) -> float:
    """Dominant |eigenvalue| of d recur(h, e) / dh at h(depth), for the first sequence
    (power iteration, central finite differences in float64 at relative step eps)."""
    m64 = copy.deepcopy(model).double()  # the caller's model keeps its dtype
    net, pos, cos, sin, e = _prepare(m64, ids[:1])
    h = net.initial_state(e, pos)
    for _ in range(depth):
        h = net.recur(h, e, cos, sin, fused_attention_for)
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(h.shape, generator=g, dtype=torch.float64)
    v = v / v.norm()
    step = eps * float(h.norm())
    lam = float("nan")
    for _ in range(iters):
        up = net.recur(h + step * v, e, cos, sin, fused_attention_for)
        down = net.recur(h - step * v, e, cos, sin, fused_attention_for)
        jv = (up - down) / (2 * step)
        lam = float(jv.norm())
        if lam == 0.0:
            return 0.0
        v = jv / lam
    return lam


@torch.no_grad()
def init_sensitivity(
    model, ids: torch.Tensor, depths: Sequence[int], other_seed: int = 1, scale: float = 3.0
) -> dict[str, dict[int, float]]:
    """Per depth r: mean TV between p_r from the model's h(0) and p_r from (a) the seeded state of
    another state_seed, (b) that draw times `scale` (Huginn's law has std sqrt(2/5))."""
    if not depths or min(depths) < 1:
        raise LoopcertError(f"depths must be >= 1, got {depths!r}")
    net, pos, cos, sin, e = _prepare(model, ids)
    base = _run(net, net.initial_state(e, pos), e, cos, sin, depths)
    other = seeded_state(other_seed, pos, model.cfg.d_model, model.cfg.init_scale or 1.0)
    other = other.to(e.dtype).unsqueeze(0).expand_as(e).contiguous()
    out = {}
    for name, h0 in (("other seed", other), (f"noise x{scale:g}", other * scale)):
        lps = _run(net, h0, e, cos, sin, depths)
        out[name] = {r: float(total_variations(lps[r].exp(), base[r].exp()).mean()) for r in depths}
    return out


def summarize_steps(steps: list[float], floor: float = 1e-5) -> dict:
    """Geometric-mean ratio of successive step sizes over the first 8 iterations and over the
    later ones whose step is still above `floor` (below it, float32 rounding: ~1e-7 relative)."""

    def ratio(idx):
        xs = [steps[i + 1] / steps[i] for i in idx if i + 1 < len(steps) and steps[i + 1] > floor]
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")

    return {"ratio_first_8": ratio(range(8)), "ratio_tail": ratio(range(8, len(steps)))}
