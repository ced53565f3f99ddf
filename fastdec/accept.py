"""Acceptance rules of speculative decoding on float64 laws of shape (V,) (docs/design.md section 4).

Notation (docs/design.md section 4): [mu - nu]_+ is the positive part, mu (-) nu is it normalised to 1.

- One proposal x ~ q is accepted with probability min(1, rho(x)/q(x)); on rejection the token
  is drawn from rho (-) q. The emitted token then has law rho exactly.
- LoopSpec (gated residual second proposal): x1 ~ q1 = p_d1; at depth d2, if the gate is open,
  x2 ~ q2 = p_d2 (-) p_d1; verification at depth R is the cascade over (x1, q1), (x2, q2)
  against p_R (Algorithm 1: running residual rho = p_R; for each proposal accept if
  u < rho(xj)/qj(xj), else rho <- rho (-) qj; if all fail, sample rho).
  Whatever the gate does, the step is lossless: given x1 and its rejection, the rest of the
  step emits a token of law rho1 = p_R (-) q1, either straight away (gate closed) or through a
  cascade over an x2 drawn independently of x1 (gate open). So the gate is free to choose
  efficiency, and an inverted gate is a lossless (if wasteful) control.

RNG consumption (fixed, so runs are reproducible and comparable): `cascade` draws exactly one
uniform per proposal it tests (even when acceptance is certain) and stops at the first
acceptance; if every proposal is rejected it draws one more uniform for the residual draw
(inverse CDF, `refdec.sampling.sample_from`). `loopspec_step` draws x1, then x2 only if the
gate is open, then the cascade's uniforms. Greedy rules consume nothing.

Zero residual mass: `residual` returns None when the mass of [p - q]_+ is at most RESIDUAL_TOL.
Exactly zero means p <= q pointwise, i.e. p == q for laws, and rejection is impossible; a
positive mass at that scale is float64 rounding of two laws that agree. Dropping it is safe:
a rejection can then only happen with probability about that mass, and the rules fall back to
the current rho (which equals q up to that mass), so the emitted law moves by at most
~RESIDUAL_TOL. `cascade_law` and `loopspec_law` apply exactly the same fallback.

Each `*_law` function computes the exact law of the matching sampling function by summing
over x1 (and x2) in closed vector form; the tests check both ways: law == target, and the
sampling functions' empirical law == the law functions.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator, Sequence
from enum import IntEnum
from typing import NamedTuple

import torch

from refdec.errors import LoopcertError
from refdec.sampling import draw_uniform, sample, sample_from
from refdec.validate import is_number

RESIDUAL_TOL = 1e-15  # a residual of mass <= this is treated as empty (see module docstring)
# Catches a gross error (logits, an unnormalised vector) only. The rules are exact for laws
# normalised in float64, as refdec.sampling.transform makes them; a law off by s in its sum
# moves the emitted law by about s.
SUM_TOL = 1e-6
GATES = ("on", "off", "inverted", "none")


class Source(IntEnum):
    """Where a committed token came from (docs/design.md section 4, token sources)."""

    FIRST = 0  # first proposal x1 accepted
    SECOND = 1  # second proposal x2 accepted
    RESTART = 2  # every proposal rejected: drawn from the residual (greedy: argmax p_R)


class LoopSpecLaw(NamedTuple):
    emitted: torch.Tensor  # (V,) exact law of the emitted token
    p_both_rejected: float  # P(no proposal accepted): the restart probability of Theorem 1
    p_gate_open: float  # P(a second proposal is drawn), over x1 ~ p_d1


# -- validation -------------------------------------------------------------------------------


def _law(name: str, p: torch.Tensor, vocab: int | None = None) -> torch.Tensor:
    if not isinstance(p, torch.Tensor):
        raise LoopcertError(f"{name} must be a torch.Tensor, got {type(p).__name__}")
    if p.dim() != 1 or p.numel() == 0:
        raise LoopcertError(f"{name} must have shape (V,), got {tuple(p.shape)}")
    if vocab is not None and p.numel() != vocab:
        raise LoopcertError(f"{name} has V={p.numel()}, expected V={vocab}")
    p = p.to(torch.float64)
    total, lowest = float(p.sum()), float(p.min())
    if not (math.isfinite(total) and lowest >= 0.0):  # a NaN or inf entry makes the sum non-finite
        raise LoopcertError(f"{name} must be finite and >= 0, got sum {total}, min {lowest}")
    if abs(total - 1.0) > SUM_TOL:
        raise LoopcertError(f"{name} must sum to 1 (within {SUM_TOL}), sums to {total!r}")
    return p


def _token(name: str, x: int, vocab: int | None = None) -> int:
    """A token id as a Python int; accepts numpy / 0-d torch integers (anything with __index__)."""
    try:
        t = operator.index(x) if not isinstance(x, bool) else None
    except TypeError:
        t = None
    if t is None or t < 0 or (vocab is not None and t >= vocab):
        where = "a non-negative token id" if vocab is None else f"a token id in [0, {vocab})"
        raise LoopcertError(f"{name} must be {where}, got {x!r}")
    return t


def _gate_name(gate: bool | str) -> str:
    if gate is True:
        return "on"
    if gate is False:
        return "off"
    if gate not in GATES:
        raise LoopcertError(f"gate must be True, False or one of {GATES}, got {gate!r}")
    return gate


def _uniforms(rng: torch.Generator | Sequence[float]) -> Iterator[float]:
    if isinstance(rng, torch.Generator):
        while True:
            yield draw_uniform(rng)
    used = 0
    for u in rng:
        if not is_number(u, 0, 1, high_open=True):
            raise LoopcertError(f"uniforms[{used}] must be a float in [0, 1), got {u!r}")
        used += 1
        yield float(u)
    raise LoopcertError(f"ran out of uniforms after {used}; pass more, or a Generator")


# -- primitives -------------------------------------------------------------------------------


def positive_part(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """[p - q]_+ elementwise in float64, (V,) or any shape p and q share."""
    return (p.to(torch.float64) - q.to(torch.float64)).clamp_min(0.0)


def residual(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor | None, float]:
    """(p (-) q, mass of [p - q]_+); the law is None when the mass is <= RESIDUAL_TOL."""
    pos = positive_part(p, q)
    mass = float(pos.sum())
    if mass <= RESIDUAL_TOL:
        return None, mass
    return pos / mass, mass


def total_variations(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """TV of each pair of laws along the last dim: (..., V), (..., V) -> (...) float64.

    TV(p, q) = sum [p - q]_+, the one TV of the project: for laws it equals 0.5 sum |p - q|, and
    each term is exact, so small TVs keep their relative accuracy.
    """
    return positive_part(p, q).sum(-1)


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    """TV(p, q) of two laws of shape (V,) (total_variations for a batch of them)."""
    return float(total_variations(p, q))


def _stage(rho: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One cascade stage, x ~ q tested against rho, enumerated over x.

    Returns (accepted, rejected, next_rho): accepted[x] = q(x) min(1, rho(x)/q(x)) = min(q, rho)(x)
    is the mass of drawing x and emitting it; rejected[x] = [q - rho]_+(x) the mass of drawing x
    and rejecting it; next_rho = rho (-) q, or rho itself when that residual is empty.
    """
    nxt, _ = residual(rho, q)
    return torch.minimum(q, rho), positive_part(q, rho), rho if nxt is None else nxt


# -- gates --------------------------------------------------------------------------------------


def gate_mask(p_d2: torch.Tensor, q1: torch.Tensor, gate: bool | str = "on") -> torch.Tensor:
    """(V,) bool over x1: is a second proposal drawn when the first proposal is x1?

    "on" (LoopSpec, docs/design.md section 4): p_d2(x1) < q1(x1) and q2 = p_d2 (-) q1 has positive mass.
    "off" (ungated, Theorem 1's baseline): whenever q2 has positive mass. "inverted" (a lossless
    control): exactly when "on" is closed and q2 has positive mass. "none": never.
    True means "on", False means "off".
    """
    q1 = _law("q1", q1)
    return _gate_mask(_law("p_d2", p_d2, q1.numel()), q1, _gate_name(gate))


def _gate_mask(p_d2: torch.Tensor, q1: torch.Tensor, gate: str) -> torch.Tensor:
    q2, _ = residual(p_d2, q1)
    if q2 is None or gate == "none":
        return torch.zeros(q1.shape, dtype=torch.bool)
    if gate == "off":
        return torch.ones(q1.shape, dtype=torch.bool)
    shrinks = p_d2 < q1  # depth d2 moved mass off x1
    return shrinks if gate == "on" else ~shrinks


def gate_open(
    p_d2: torch.Tensor, q1: torch.Tensor, x1: int, gate: bool | str = "on", *, check: bool = True
) -> bool:
    """Sampling gate for the drawn x1 (see `gate_mask`). check=False: the caller vouches that
    p_d2 and q1 are float64 laws from refdec.sampling.transform and x1 a token of q1 (the
    decoder's hot path; the same result, without the validation's ~10 small ops)."""
    if not check:
        return bool(_gate_mask(p_d2, q1, _gate_name(gate))[x1])
    return bool(gate_mask(p_d2, q1, gate)[_token("x1", x1, q1.numel())])


def gated_residual(
    p_d2: torch.Tensor, q1: torch.Tensor, x1: int, gate: bool | str = "on"
) -> torch.Tensor | None:
    """The second proposal's law q2 = p_d2 (-) q1 if the gate opens at the drawn x1, else None:
    `gate_open(..., check=False)` and `residual` in one (the decoder's hot path: one residual,
    and the gate's comparison at x1 only, p_d2(x1) < q1(x1) on the same float64 values; the
    caller vouches as for check=False)."""
    gate = _gate_name(gate)
    if gate == "none":
        return None
    q2, _ = residual(p_d2, q1)
    if q2 is None or gate == "off":
        return q2
    shrinks = p_d2[x1].item() < q1[x1].item()
    return q2 if shrinks == (gate == "on") else None


def gate_open_greedy(p_d2_argmax: int, x1: int) -> bool:
    """Greedy gate (docs/design.md section 4): open iff argmax p_d2 != x1.

    With one-hot laws this is `gate_open`: p_d2(x1) < q1(x1) = 1 iff the argmaxes differ, and
    then q2 = p_d2 (-) q1 is the one-hot at argmax p_d2, so x2 = argmax p_d2.
    """
    return _token("p_d2_argmax", p_d2_argmax) != _token("x1", x1)


# -- sampling rules -------------------------------------------------------------------------------


def cascade(
    target: torch.Tensor,
    proposals: Sequence[tuple[int, torch.Tensor]],
    rng: torch.Generator | Sequence[float],
) -> tuple[int, int]:
    """Algorithm 1 (docs/design.md section 4): verify proposals (x_j, q_j), each x_j ~ q_j, against target.

    Returns (token, source): source is j for an accepted x_j, len(proposals) for a draw from
    the final residual. `rng` is a Generator or a sequence of U[0, 1) floats, consumed as the
    module docstring says. Raises LoopcertError if some q_j(x_j) == 0: x_j was not drawn from q_j.
    """
    rho = _law("target", target)
    checked = []
    for j, (x, q) in enumerate(proposals):
        q = _law(f"proposal law q[{j}]", q, rho.numel())
        x = _token(f"proposal token x[{j}]", x, rho.numel())
        if float(q[x]) <= 0.0:
            raise LoopcertError(f"proposal token x[{j}]={x} has q[{j}](x)=0: not drawn from q[{j}]")
        checked.append((x, q))
    return _cascade(rho, checked, _uniforms(rng))


def _cascade(
    rho: torch.Tensor, proposals: list[tuple[int, torch.Tensor]], us: Iterator[float]
) -> tuple[int, int]:
    for j, (x, q) in enumerate(proposals):
        if next(us) < float(rho[x] / q[x]):  # accept with probability min(1, rho(x)/q(x))
            return x, j
        nxt, _ = residual(rho, q)
        if nxt is not None:  # else rho == q up to RESIDUAL_TOL; keep rho (module docstring)
            rho = nxt
    return sample_from(rho, next(us)), len(proposals)


def accept_one(
    target: torch.Tensor, x1: int, q1: torch.Tensor, rng: torch.Generator | Sequence[float]
) -> tuple[int, Source]:
    """Standard speculative sampling with one draft x1 ~ q1: Source.FIRST or Source.RESTART."""
    token, j = cascade(target, [(x1, q1)], rng)
    return token, Source.FIRST if j == 0 else Source.RESTART


def loopspec_verify(
    p_R: torch.Tensor,
    x1: int,
    q1: torch.Tensor,
    x2: int | None = None,
    q2: torch.Tensor | None = None,
    *,
    rng: torch.Generator | Sequence[float],
    check: bool = True,
) -> tuple[int, Source]:
    """LoopSpec cascade verification at depth R: x1 ~ q1, then x2 ~ q2 = p_d2 (-) q1 if drawn.

    The caller passes x2/q2 only when the gate was open (docs/design.md section 4). check=False: the
    caller vouches that the laws are float64 laws from refdec.sampling.transform and each x_j
    was drawn from its q_j (the decoder's hot path: the same draws and result, unvalidated).
    """
    if (x2 is None) != (q2 is None):
        got = f"x2={x2!r}, q2={'None' if q2 is None else 'a tensor'}"
        raise LoopcertError(f"pass both x2 and q2 or neither, got {got}")
    proposals = [(x1, q1)] if x2 is None else [(x1, q1), (x2, q2)]
    if check:
        token, j = cascade(p_R, proposals, rng)
    else:
        token, j = _cascade(p_R, proposals, _uniforms(rng))
    return token, Source(j) if j < len(proposals) else Source.RESTART


def loopspec_step(
    p_R: torch.Tensor,
    p_d1: torch.Tensor,
    p_d2: torch.Tensor,
    rng: torch.Generator,
    gate: bool | str = "on",
) -> tuple[int, Source]:
    """One whole LoopSpec step: x1 ~ p_d1, the gate, x2 ~ p_d2 (-) p_d1 if open, verification.

    Its exact law is `loopspec_law(p_R, p_d1, p_d2, gate)`.
    """
    q1 = _law("p_d1", p_d1)
    p_R = _law("p_R", p_R, q1.numel())
    p_d2 = _law("p_d2", p_d2, q1.numel())
    x1 = sample(q1, rng)
    proposals = [(x1, q1)]
    if _gate_mask(p_d2, q1, _gate_name(gate))[x1]:
        q2, _ = residual(p_d2, q1)  # not None: the gate is closed when q2 is empty
        proposals.append((sample(q2, rng), q2))
    token, j = _cascade(p_R, proposals, _uniforms(rng))
    return token, Source(j) if j < len(proposals) else Source.RESTART


def greedy_verify(target_argmax: int, proposals_tokens: Sequence[int]) -> tuple[int, Source]:
    """Greedy cascade (docs/design.md section 4): accept x1 if it is argmax p_R, else x2 if it is,
    else argmax.

    `proposals_tokens` is (x1,) or (x1, x2); `target_argmax` follows refdec's tie rule.
    """
    target_argmax = _token("target_argmax", target_argmax)
    if not 1 <= len(proposals_tokens) <= 2:
        raise LoopcertError(f"greedy_verify takes 1 or 2 proposals, got {len(proposals_tokens)}")
    for j, x in enumerate(proposals_tokens):
        if _token(f"proposal token x[{j}]", x) == target_argmax:
            return target_argmax, Source(j)
    return target_argmax, Source.RESTART


# -- exact laws -----------------------------------------------------------------------------------


def cascade_law(target: torch.Tensor, proposal_laws: Sequence[torch.Tensor]) -> torch.Tensor:
    """(V,) exact law of `cascade`'s token when each x_j ~ q_j independently."""
    rho = _law("target", target)
    law = torch.zeros_like(rho)
    running = 1.0  # P(every proposal so far rejected)
    for j, q in enumerate(proposal_laws):
        accepted, rejected, rho = _stage(rho, _law(f"proposal law q[{j}]", q, rho.numel()))
        law += running * accepted
        running *= float(rejected.sum())
    return law + running * rho


def loopspec_law(
    p_R: torch.Tensor, p_d1: torch.Tensor, p_d2: torch.Tensor, gate: bool | str = "on"
) -> LoopSpecLaw:
    """Exact law of `loopspec_step`, summed over x1 ~ p_d1 and x2 ~ q2 = p_d2 (-) p_d1.

    emitted = sum_x1 q1(x1) [ a(x1) delta_x1 + (1 - a(x1)) L(x1) ], a(x1) = min(1, p_R(x1)/q1(x1)),
    L(x1) = cascade_law(rho1, [q2]) where the gate opens at x1, else rho1 = p_R (-) q1.
    """
    joint, p_both, p_open = _loopspec(p_R, p_d1, p_d2, gate)
    return LoopSpecLaw(joint.sum(0), p_both, p_open)


def loopspec_joint_law(
    p_R: torch.Tensor, p_d1: torch.Tensor, p_d2: torch.Tensor, gate: bool | str = "on"
) -> torch.Tensor:
    """(3, V) exact joint law of (Source, token) of `loopspec_step`; row s is Source(s)."""
    return _loopspec(p_R, p_d1, p_d2, gate)[0]


def _loopspec(
    p_R: torch.Tensor, p_d1: torch.Tensor, p_d2: torch.Tensor, gate: bool | str
) -> tuple[torch.Tensor, float, float]:
    gate = _gate_name(gate)
    q1 = _law("p_d1", p_d1)
    p_R = _law("p_R", p_R, q1.numel())
    p_d2 = _law("p_d2", p_d2, q1.numel())
    joint = torch.zeros(len(Source), q1.numel(), dtype=torch.float64)  # (3, V)
    accepted1, rejected1, rho1 = _stage(p_R, q1)  # (V,) each, indexed by x1
    opens = _gate_mask(p_d2, q1, gate)  # (V,) bool, indexed by x1
    rej_open = float(rejected1[opens].sum())
    rej_closed = float(rejected1[~opens].sum())
    joint[Source.FIRST] = accepted1
    joint[Source.RESTART] = rej_closed * rho1
    p_both = rej_closed  # summed as scalars so a small P(both) keeps its relative accuracy
    if bool(opens.any()):
        q2, _ = residual(p_d2, q1)
        accepted2, rejected2, rho2 = _stage(rho1, q2)  # (V,) each, indexed by x2
        p2_rejected = float(rejected2.sum())
        joint[Source.SECOND] = rej_open * accepted2
        joint[Source.RESTART] += rej_open * p2_rejected * rho2
        p_both += rej_open * p2_rejected
    return joint, p_both, float(q1[opens].sum())
