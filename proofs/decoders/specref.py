"""The reference speculative decoder: one LoopSpec step per token over refdec, with bug switches.

Each step drafts x1 ~ q1 = p_d1, optionally a gated second proposal x2 ~ q2 = p_d2 (-) p_d1,
and verifies the cascade against p_R (docs/design.md section 4, LoopSpec Algorithm 1). Logits come
from `proofs.stats.exact_laws.Oracle` (refdec's uncached `depth_logits`, float64), so the decoder is
independent of fastdec's engine; with no bug switched on it consumes the RNG exactly like
`fastdec.accept.loopspec_step` and emits the same tokens.

`Bugs` switches on the wrong decoders of the mutant library (proofs/checks/mutation.py), one field per
bug that real speculative decoders have shipped with. The lossless knobs (d1, d2, gate,
draft_filter) are the controls: they change efficiency, never the law.

`step_law` is the exact law of one sampling step, bugs included, as a (V, V) joint law of
(emitted token, token the context continues with): the two differ only under `stale_kv`, where
a rejected draft stays in the context after rollback. `sequence_law` chains it over n tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from fastdec.accept import GATES, RESIDUAL_TOL, gate_mask, gate_open_greedy, greedy_verify, positive_part
from proofs.decoders.protocol import SeededDecoder
from proofs.stats.exact_laws import Oracle
from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams, draw_uniform, sample, sample_from
from refdec.validate import check_number, is_int

TARGET_FILTERS = ("temperature", "top_k", "top_p", "min_p", "logit_bias", "penalties")
NEUTRAL = {  # what a filter or processor missing on the target side leaves (its default)
    "top_k": {"top_k": None},
    "top_p": {"top_p": None},
    "min_p": {"min_p": 0.0},
    "logit_bias": {"logit_bias": ()},
    "penalties": {"repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0},
}
ROUNDINGS = ("bfloat16", "int8")


def rounded(law: torch.Tensor, how: str) -> torch.Tensor:
    """A (V,) law as a low-precision draft path holds it, renormalised: bf16, or int8 with one
    scale per row (max p / 127: every token below half a step drops out)."""
    if how == "bfloat16":
        q = law.to(torch.bfloat16).to(torch.float64)
    else:
        scale = float(law.max()) / 127.0
        q = torch.round(law / scale) * scale
    return q / q.sum()


@dataclass(frozen=True)
class Bugs:
    """One switch per known speculative-decoding bug; all off is the lossless decoder."""

    always_accept: bool = False  # u = 0: a first proposal with p_R(x1) > 0 is always accepted
    resample_target: bool = False  # after every rejection draw from p_R, not from the residual
    target_missing: str | None = None  # this filter is applied to the draft but not to p_R
    score_depth: int | None = None  # x1 ~ p_d1 but min(1, p_R/q) and the residual use p_score_depth
    second_scored_as_p_d2: bool = False  # x2 ~ p_d2 (-) p_d1 but scored with p_d2: the wrong base
    unnormalised_residual: bool = False  # rho1 = [p_R - q1]_+ left unnormalised in x2's ratio
    stale_kv: bool = False  # after rejecting x1 the context keeps x1 (stale KV after rollback)
    greedy_near_miss: float = 0.0  # greedy accepts x1 whose p_R logit is within this of the max
    # -- bugs from serving stacks' speculative samplers --------------------------------------
    draft_rounding: str | None = None  # x1 drawn from a bf16 / int8-rounded q1, scored with the exact q1
    scored_unfiltered: bool = False  # x1 drawn from the filtered q1, reported (scored) before top-k/p
    accept_if_equal: bool = False  # accept x1 iff it equals an independent y ~ p_R; residual otherwise
    first_unverified: int = 0  # rounds of this many tokens: each round's first draft is committed as is
    stale_second: bool = False  # after rejecting x2 the context keeps x2 (its lane not rolled back)
    target_top_k_default: int | None = None  # p_R carries this top_k when the user asked for none
    # -- bugs of the engines' other parameters and of the recovery draw -------------------------
    residual_same_uniform: bool = False  # the residual drawn with the uniform that rejected x1
    recovery_draft_noise: bool = False  # the residual drawn with the uniform x1 was drawn with
    coarse_uniform: int = 0  # accept iff u <= ratio, u on a grid of this many steps (u may be 0)
    stale_penalty: int = 0  # rounds of this many tokens: penalties and min_tokens see the output
    #                         up to the round's start (state updated once per step, not per token)
    verify_joint_filters: bool = False  # p_R's top-k and top-p both judged on the tempered law
    commit_past_stop: bool = False  # a stop token does not end the sequence: the rest is committed
    argmax_recovery: bool = False  # after a rejection the argmax of the residual, at T > 0
    # -- the field's newer classes (bugs found in released engines) -----------------------------
    ratio_previous_token: bool = False  # x1's ratio gathered at the context's last token (the
    #                                     verify row's input id), not at x1 (its output id)
    late_rejection: bool = False  # a rejected x1 dropped one step late: the token committed in its
    #                               place is the target's draw after x1 (ctx + x1), not the residual

    def __post_init__(self):
        if self.target_missing not in (None, *TARGET_FILTERS):
            raise LoopcertError(
                f"Bugs.target_missing must be None or one of {TARGET_FILTERS}, got {self.target_missing!r}"
            )
        if self.score_depth is not None and not is_int(self.score_depth, 1):
            raise LoopcertError(f"Bugs.score_depth must be a depth >= 1, got {self.score_depth!r}")
        check_number("Bugs.greedy_near_miss", self.greedy_near_miss, 0)
        if self.draft_rounding not in (None, *ROUNDINGS):
            raise LoopcertError(
                f"Bugs.draft_rounding must be None or one of {ROUNDINGS}, got {self.draft_rounding!r}"
            )
        for name in ("first_unverified", "target_top_k_default", "coarse_uniform", "stale_penalty"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise LoopcertError(f"Bugs.{name} must be an integer >= 0, got {v!r}")
        if self.first_unverified == 1:
            raise LoopcertError("Bugs.first_unverified=1 would commit every token unverified; use >= 2")

    @property
    def lossless(self) -> bool:
        return self == Bugs()


def _ratio(rho: torch.Tensor, q: torch.Tensor, x: int) -> float:
    """rho(x)/q(x), +inf when q(x) = 0 (only a bug scores a proposal where its law is 0)."""
    return float(rho[x] / q[x]) if float(q[x]) > 0 else math.inf


def _shrink(rho: torch.Tensor, q: torch.Tensor, normalise: bool) -> torch.Tensor:
    """rho (-) q, or the unnormalised [rho - q]_+ under the bug; rho itself when it is empty
    (the same fallback as fastdec.accept.residual / cascade)."""
    pos = positive_part(rho, q)
    mass = float(pos.sum())
    if mass <= RESIDUAL_TOL:
        return rho
    return pos / mass if normalise else pos


def joint_filters(tempered: torch.Tensor, s: SamplingParams) -> torch.Tensor:
    """(V,) law at the temperature -> its top-k and top-p both judged on it (not top-p on the
    top-k law renormalised), renormalised: the order of the verify-side mutant."""
    ranked = sorted(range(tempered.numel()), key=lambda t: (-float(tempered[t]), t))
    keep, before = torch.zeros_like(tempered, dtype=torch.bool), 0.0
    for i, t in enumerate(ranked):
        if (s.top_k is None or i < s.top_k) and (s.top_p is None or before < s.top_p):
            keep[t] = True
        before += float(tempered[t])
    out = torch.where(keep, tempered, 0.0)
    return out / out.sum()


def _intervals(law: torch.Tensor) -> list[tuple[float, float]]:
    """[lo, hi) of each token under an inverse-CDF draw (refdec.sampling.sample_from) of a law."""
    cdf = torch.cumsum(law / law.sum(), 0).tolist()
    return [(0.0 if t == 0 else cdf[t - 1], cdf[t]) for t in range(len(cdf))]


def _recovery_law(b: Bugs, q1: torch.Tensor, a1: torch.Tensor, rho1: torch.Tensor) -> torch.Tensor:
    """(V,) mass of each recovery token y after x1 ~ q1 was rejected (prob 1 - a1(x1)), under the
    recovery-draw bugs: argmax rho1; inverse CDF of rho1 at the rejecting u, uniform on
    [a1(x1), 1); or at the u x1 was drawn with (its interval under q1)."""
    V = q1.numel()
    rejected = (q1 * (1.0 - a1)).tolist()
    out = torch.zeros(V, dtype=torch.float64)
    if b.argmax_recovery:
        out[int(torch.argmax(rho1))] = sum(rejected)
        return out
    rho_iv, q_iv = _intervals(rho1), _intervals(q1)
    for x in range(V):
        if rejected[x] <= 0:
            continue
        if b.residual_same_uniform:
            lo, hi, w = float(a1[x]), 1.0, rejected[x] / (1.0 - float(a1[x]))
        else:
            lo, hi = q_iv[x]
            w = (1.0 - float(a1[x])) if hi > lo else 0.0
        for y, (a, c) in enumerate(rho_iv):
            out[y] += w * max(0.0, min(hi, c) - max(lo, a))
    return out


class SpecRef(SeededDecoder):
    """Uncached LoopSpec decoder over refdec (docs/design.md section 4), bugs optional; it
    decodes at the model's R (SeededDecoder.depth None)."""

    def __init__(
        self,
        model_or_oracle,
        d1: int,
        d2: int | None = None,
        gate: bool | str = "on",
        draft_filter: bool = True,
        bugs: Bugs = Bugs(),
    ):
        self.oracle = model_or_oracle if isinstance(model_or_oracle, Oracle) else Oracle(model_or_oracle)
        R = self.oracle.R
        if not 1 <= d1 <= R:
            raise LoopcertError(f"d1={d1} must be in 1..R={R}")
        if d2 is not None and not d1 < d2 <= R:
            raise LoopcertError(f"d2={d2} must satisfy d1={d1} < d2 <= R={R}")
        if not (gate is True or gate is False or (isinstance(gate, str) and gate in GATES)):
            raise LoopcertError(f"gate must be True, False or one of {GATES}, got {gate!r}")
        if bugs.score_depth is not None and bugs.score_depth > R:
            raise LoopcertError(f"Bugs.score_depth={bugs.score_depth} exceeds R={R}")
        self.d1, self.d2, self.gate, self.draft_filter, self.bugs = d1, d2, gate, draft_filter, bugs
        self._laws: dict[tuple, dict[str, torch.Tensor]] = {}

    # -- the laws one step works with --------------------------------------------------------
    def _target_params(self, s: SamplingParams) -> SamplingParams:
        if self.bugs.target_top_k_default and s.top_k is None:
            s = replace(s, top_k=self.bugs.target_top_k_default)
        missing = self.bugs.target_missing
        if missing == "temperature":
            return replace(s, temperature=1.0)
        return replace(s, **NEUTRAL[missing]) if missing else s

    def _draft_params(self, s: SamplingParams) -> SamplingParams:
        return s if self.draft_filter else SamplingParams(temperature=s.temperature)

    def laws(self, context: Sequence[int], s: SamplingParams, position: int = 0) -> dict[str, torch.Tensor]:
        """target, q1 (drawn), q1s (scored), and when d2 is set: p_d2, the gate mask over x1,
        q2 (drawn) and q2s (scored). All (V,) float64; remembered per (context, sampling, what
        the processors see). `position`: tokens generated so far (the prompt is the rest)."""
        seen = position
        if self.bugs.stale_penalty and s.needs_context:
            seen = position - position % self.bugs.stale_penalty
        key = (tuple(context), s, len(context) - position, seen)
        if key not in self._laws:
            self._laws[key] = self._compute_laws(key[0], s, key[2], seen)
        return self._laws[key]

    def _compute_laws(
        self, context: tuple[int, ...], s: SamplingParams, prompt_len: int, seen: int
    ) -> dict[str, torch.Tensor]:
        o, b = self.oracle, self.bugs

        def law(depth, params):
            if not params.needs_context:
                return o.law(context, depth, params)
            return o.law(context, depth, params, prompt_len, seen)

        draft = self._draft_params(s)
        target = self._target_params(s)
        out = {"target": law(o.R, target), "q1": law(self.d1, draft)}
        if b.verify_joint_filters:
            out["target"] = joint_filters(law(o.R, replace(target, top_k=None, top_p=None)), target)
        out["q1s"] = out["q1"] if b.score_depth is None else law(b.score_depth, draft)
        if b.scored_unfiltered:
            out["q1s"] = law(self.d1, SamplingParams(temperature=s.temperature))
        if b.draft_rounding:
            out["q1"] = rounded(out["q1"], b.draft_rounding)
        if self.d2 is not None:
            p_d2 = law(self.d2, draft)
            out["opens"] = gate_mask(p_d2, out["q1"], self.gate)
            out["q2"] = _shrink(p_d2, out["q1"], normalise=True)  # only drawn where the gate opens
            out["q2s"] = p_d2 if b.second_scored_as_p_d2 else out["q2"]
        return out

    # -- decoding ----------------------------------------------------------------------------
    def unverified(self, position: int) -> bool:
        """Under `first_unverified`, the first token of each round is committed as drafted."""
        k = self.bugs.first_unverified
        return bool(k) and position % k == 0

    def step(
        self, context: Sequence[int], s: SamplingParams, gen: torch.Generator, position: int = 0
    ) -> tuple[int, int]:
        """One committed token: (emitted token, token the context continues with)."""
        if s.greedy:
            return self._greedy_step(context, position)
        b, L = self.bugs, self.laws(context, s, position)
        u0 = draw_uniform(gen)
        x1 = sample_from(L["q1"], u0)
        if self.unverified(position):
            return x1, x1
        proposals = [(x1, L["q1s"])]
        if self.d2 is not None and bool(L["opens"][x1]):
            proposals.append((sample(L["q2"], gen), L["q2s"]))
        rho = L["target"]
        for j, (x, q) in enumerate(proposals):  # Algorithm 1: accept if u < rho(x)/q(x)
            if j == 0 and b.accept_if_equal:
                accepted = sample(L["target"], gen) == x
            else:
                u = 0.0 if (b.always_accept and j == 0) else draw_uniform(gen)
                at = context[-1] if (b.ratio_previous_token and j == 0) else x
                if b.coarse_uniform:
                    g = b.coarse_uniform
                    accepted = math.floor(u * g) / g <= _ratio(rho, q, at)
                else:
                    accepted = u < _ratio(rho, q, at)
            if accepted:
                return x, x
            rho = _shrink(rho, q, normalise=not b.unnormalised_residual)
        if b.late_rejection:  # the draw after x1 is kept, x1 itself dropped
            z = sample_from(self.laws([*context, x1], s, position + 1)["target"], draw_uniform(gen))
            return z, z
        if b.argmax_recovery:
            y = int(torch.argmax(rho))
        elif b.residual_same_uniform or b.recovery_draft_noise:
            y = sample_from(rho, u if b.residual_same_uniform else u0)
        else:
            y = sample_from(L["target"] if b.resample_target else rho, draw_uniform(gen))
        if b.stale_kv:
            return y, x1
        return y, (proposals[1][0] if b.stale_second and len(proposals) == 2 else y)

    def _greedy_step(self, context: Sequence[int], position: int = 0) -> tuple[int, int]:
        logits = self.oracle.logits(context)  # (R, V)
        target = logits[-1]
        x1 = int(torch.argmax(logits[self.d1 - 1]))
        if self.unverified(position):
            return x1, x1
        proposals = [x1]
        if self.d2 is not None:
            x2 = int(torch.argmax(logits[self.d2 - 1]))
            gate = {True: "on", False: "off"}.get(self.gate, self.gate)
            closed_on = not gate_open_greedy(x2, x1)  # LoopSpec's gate is closed: argmax p_d2 == x1
            if {"on": not closed_on, "off": True, "inverted": closed_on, "none": False}[gate]:
                proposals.append(x2)
        near = self.bugs.greedy_near_miss
        if near > 0 and float(target[x1]) >= float(target.max()) - near:
            return x1, x1
        y, _ = greedy_verify(int(torch.argmax(target)), proposals)
        if self.bugs.late_rejection and y != x1:  # the verify row after x1 decides instead
            y = int(torch.argmax(self.oracle.logits([*context, x1])[-1]))
            return y, y
        return y, (x1 if self.bugs.stale_kv and y != x1 else y)

    model = property(lambda self: self.oracle.model)

    def decode(self, ids, depth, max_new_tokens, sampling, gen, eos_token_id) -> list[int]:
        context, new = list(ids), []
        stops = set() if self.bugs.commit_past_stop else sampling.stop_ids(eos_token_id)
        for i in range(max_new_tokens):
            y, c = self.step(context, sampling, gen, i)
            new.append(y)
            context.append(c)
            if y in stops:
                break
        return new

    # -- the exact law -----------------------------------------------------------------------
    def step_law(self, context: Sequence[int], s: SamplingParams, position: int = 0) -> torch.Tensor:
        """(V, V) float64 joint law J[y, c] of one sampling `step` (emitted y, context c).

        Summed over x1 ~ q1 in closed form, exactly as `step` draws: a1(x1) = min(1, rho0/q1s)
        (1 where that ratio is > 0 under always_accept, p_R(x1) under accept_if_equal); after a
        rejection the token has law F1 (gate closed) or, gate open, x2 ~ q2 is accepted with
        a2 = min(1, rho1/q2s), else F2 (F: the residual, or p_R under resample_target).
        Under ratio_previous_token every x1's ratio is the context's last token's; under
        late_rejection a rejected x1 leaves the law p_R(. | context + x1).
        """
        if s.greedy:
            raise LoopcertError("step_law is for sampling; greedy steps are deterministic")
        b, L = self.bugs, self.laws(context, s, position)
        target, q1, q1s = L["target"], L["q1"], L["q1s"]
        V = target.numel()
        idx = torch.arange(V)
        joint = torch.zeros(V, V, dtype=torch.float64)
        if self.unverified(position):
            joint[idx, idx] = q1
            return joint
        at = [int(context[-1])] * V if b.ratio_previous_token else range(V)  # where x1's ratio is read
        ratio1 = torch.tensor([_ratio(target, q1s, a) for a in at], dtype=torch.float64)
        if b.accept_if_equal:
            a1 = target.clone()
        elif b.always_accept:
            a1 = (ratio1 > 0).to(torch.float64)
        elif b.coarse_uniform:  # P(floor(U g)/g <= r) = (floor(r g) + 1)/g, capped at 1
            g = b.coarse_uniform
            a1 = torch.tensor(
                [
                    1.0 if not math.isfinite(r) else min(1.0, (math.floor(r * g) + 1) / g)
                    for r in ratio1.tolist()
                ],
                dtype=torch.float64,
            )
        else:
            a1 = ratio1.clamp(max=1.0)
        rho1 = _shrink(target, q1s, normalise=not b.unnormalised_residual)
        recovery = b.residual_same_uniform or b.recovery_draft_noise or b.argmax_recovery
        if recovery:  # one proposal: the recovery draw given x1 rejected, enumerated exactly
            if self.d2 is not None:
                raise LoopcertError("the recovery-draw bugs are enumerated for one proposal (no d2)")
            joint[idx, idx] = q1 * a1
            joint[idx, idx] += _recovery_law(b, q1, a1, rho1)
            return joint

        if b.late_rejection:  # a rejected x1 leaves the target's token after it: law p_R(. | ctx + x1)
            if self.d2 is not None:
                raise LoopcertError("late_rejection is enumerated for one proposal (no d2)")
            joint[idx, idx] = q1 * a1
            for x, r in enumerate((q1 * (1.0 - a1)).tolist()):
                if r > 0:
                    joint[idx, idx] += r * self.laws([*context, x], s, position + 1)["target"]
            return joint

        def final(rho: torch.Tensor) -> torch.Tensor:
            law = target if b.resample_target else rho
            return law / law.sum()  # sample_from draws in proportion to the mass

        joint[idx, idx] = q1 * a1
        rejected = q1 * (1.0 - a1)  # (V,) over x1
        opens = L["opens"] if self.d2 is not None else torch.zeros(V, dtype=torch.bool)
        closed = rejected * (~opens)
        f1 = final(rho1)
        if b.stale_kv:
            joint += f1[:, None] * closed[None, :]  # y ~ F1, the context keeps x1
        else:
            joint[idx, idx] += f1 * float(closed.sum())
        if bool(opens.any()):
            q2, q2s = L["q2"], L["q2s"]
            a2 = torch.tensor([min(1.0, _ratio(rho1, q2s, x)) for x in range(V)], dtype=torch.float64)
            f2 = final(_shrink(rho1, q2s, normalise=not b.unnormalised_residual))
            acc2, rej2 = q2 * a2, q2 * (1.0 - a2)  # (V,) over x2
            opened = rejected * opens
            if b.stale_kv:
                joint += (acc2 + float(rej2.sum()) * f2)[:, None] * opened[None, :]
            else:
                mass = float(opened.sum())
                joint[idx, idx] += acc2 * mass
                if b.stale_second:
                    joint += f2[:, None] * rej2[None, :] * mass  # y ~ F2, the context keeps x2
                else:
                    joint[idx, idx] += f2 * float(rej2.sum()) * mass
        return joint

    def sequence_law(self, prompt: Sequence[int], n: int, s: SamplingParams) -> dict[tuple[int, ...], float]:
        """Exact law of the first n emitted tokens, summed over the contexts they leave behind; a
        sequence ends at its first stop token (s.stop_ids(): shorter), unless commit_past_stop."""
        states: dict[tuple[tuple[int, ...], tuple[int, ...]], float] = {((), ()): 1.0}
        prompt = tuple(prompt)
        stops = set() if self.bugs.commit_past_stop else s.stop_ids()
        for _ in range(n):
            nxt: dict = {}
            for (emitted, ctx), p in states.items():
                if emitted and emitted[-1] in stops:  # ended: carried as it is
                    nxt[emitted, ctx] = nxt.get((emitted, ctx), 0.0) + p
                    continue
                joint = self.step_law(prompt + ctx, s, len(ctx))
                for y, c in torch.nonzero(joint > 0).tolist():
                    key = (emitted + (y,), ctx + (c,))
                    nxt[key] = nxt.get(key, 0.0) + p * float(joint[y, c])
            states = nxt
        law: dict[tuple[int, ...], float] = {}
        for (emitted, _), p in states.items():
            law[emitted] = law.get(emitted, 0.0) + p
        return law
