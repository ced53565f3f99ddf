"""The depth profile of a looped model: how its next-token law changes with the depth r.

One implementation, used by the model card (trainer.card), the trainer's held-out figures, the
bench's depth spectrum and Theorem 2's traces. Per depth r, over the scored positions:

    tv(r)     mean TV(p_r, p_ref), temperature 1, full vocabulary (ref = R by default)
    agree(r)  share of positions with argmax p_r == argmax p_ref (greedy drafts accepted)
    bpb(r)    mean -log2 p_r(label), where labels are given
    max_tv(r) largest TV(p_r, p_ref) over the positions

each also by context-position bucket [a, b) (position t predicts byte t + 1 from t + 1 bytes of
context). Optionally Huginn's exit rule (Geiping et al. 2025, section 6: stop at the first r
with KL(p_r || p_{r-1}) below a threshold): the histogram of that first depth.

The computation is refdec's own (refdec.model.Net: embed / initial_state / recur / readout, the
block maths of the uncached oracle `depth_logits`), batched over sequences: sequences of unequal
length are right-padded, which under causal attention changes nothing at the real positions
(and the seeded initial state is a function of the absolute position only). Attention is
torch's fused causal SDPA, the same maths as refdec.layers.causal_attention; LoopCoder's passes
are refdec's own `LoopPasses` (pass 1 causal, pass r >= 2 mixing pass 1's keys with its own in
the window, docs/design.md section 2), whose reads are causal too, so padding is harmless there
as well. The tests check the laws against `depth_logits`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from fastdec.accept import total_variations
from refdec.errors import LoopcertError
from refdec.layers import rope_tables
from refdec.model import LoopPasses, Net

LN2 = math.log(2.0)
NEVER = 0  # exit histogram key: KL never fell below the threshold within the depths run


def fused_causal_attention(q, k, v):
    """Causal attention with the maths of refdec.layers.causal_attention, fused and GQA-aware."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def fused_attention_for(_layer: int):
    """refdec.model.Net's attention hook for whole sequences: every layer, no cache."""
    return fused_causal_attention


def pass_attention(net: Net) -> Callable[[int], Callable]:
    """r -> the attend_for of pass r over whole sequences, for one forward (docs/design.md section 2):
    the fused causal attention at every depth, or LoopCoder's passes (a fresh LoopPasses, which
    keeps pass 1's keys for the passes after it)."""
    if net.cfg.family != "loopcoder":
        return lambda r: fused_attention_for
    return LoopPasses(net).for_pass


@dataclass(frozen=True)
class DepthProfile:
    depths: tuple[int, ...]
    ref_depth: int
    n_positions: int
    tv: dict[int, float]
    max_tv: dict[int, float]
    agree: dict[int, float]
    bpb: dict[int, float] | None  # None without labels
    buckets: tuple[tuple[int, int], ...] = ()
    # (a, b) -> {"n": positions, "tv": {r: .}, "agree": {r: .}, "bpb": {r: .} | None}
    by_bucket: dict = field(default_factory=dict)
    exit_kl: float | None = None
    exit_hist: dict[int, int] | None = None  # first depth r >= 2 with KL(p_r || p_{r-1}) < exit_kl

    def to_dict(self) -> dict:
        return {
            "depths": list(self.depths),
            "ref_depth": self.ref_depth,
            "n_positions": self.n_positions,
            "tv": {str(r): v for r, v in self.tv.items()},
            "max_tv": {str(r): v for r, v in self.max_tv.items()},
            "agree": {str(r): v for r, v in self.agree.items()},
            "bpb": None if self.bpb is None else {str(r): v for r, v in self.bpb.items()},
            "by_bucket": {
                f"{a}-{b}": {
                    "n": d["n"],
                    **{
                        k: None if d[k] is None else {str(r): v for r, v in d[k].items()}
                        for k in ("tv", "agree", "bpb")
                    },
                }
                for (a, b), d in self.by_bucket.items()
            },
            "exit_kl": self.exit_kl,
            "exit_hist": None if self.exit_hist is None else {str(r): n for r, n in self.exit_hist.items()},
        }


def _check(model, seqs, labels, starts, depths, ref_depth, buckets, exit_kl):
    if not seqs:
        raise LoopcertError("depth profile: no sequences")
    V, L = model.cfg.vocab_size, model.cfg.max_seq_len
    for i, s in enumerate(seqs):
        if not len(s):
            raise LoopcertError(f"depth profile: sequence {i} is empty")
        if len(s) > L:
            raise LoopcertError(f"depth profile: sequence {i} has {len(s)} tokens > max_seq_len={L}")
        if min(s) < 0 or max(s) >= V:
            raise LoopcertError(f"depth profile: sequence {i} has a token outside [0, {V})")
    if labels is not None:
        if len(labels) != len(seqs) or any(len(a) != len(b) for a, b in zip(labels, seqs)):
            raise LoopcertError("depth profile: labels must match the sequences' lengths")
        if any(len(a) and (min(a) < 0 or max(a) >= V) for a in labels):
            raise LoopcertError(f"depth profile: a label is outside [0, {V})")
    if starts is not None and (
        len(starts) != len(seqs) or any(not 0 <= a < len(s) for a, s in zip(starts, seqs))
    ):
        raise LoopcertError("depth profile: starts must give one position inside each sequence")
    if not depths or any(isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in depths):
        raise LoopcertError(f"depth profile: depths must be integers >= 1, got {depths!r}")
    if isinstance(ref_depth, bool) or not isinstance(ref_depth, int) or ref_depth < 1:
        raise LoopcertError(f"depth profile: ref_depth must be an integer >= 1, got {ref_depth!r}")
    for a, b in buckets:
        if not 0 <= a < b:
            raise LoopcertError(f"depth profile: bucket ({a}, {b}) must have 0 <= a < b")
    if exit_kl is not None and not exit_kl > 0:
        raise LoopcertError(f"depth profile: exit_kl must be > 0, got {exit_kl!r}")


@torch.no_grad()
def depth_profile(
    model,
    seqs: Sequence[Sequence[int]] | torch.Tensor,
    depths: Sequence[int] | None = None,
    ref_depth: int | None = None,
    *,
    labels: Sequence[Sequence[int]] | torch.Tensor | None = None,
    starts: Sequence[int] | None = None,
    buckets: Sequence[tuple[int, int]] = (),
    exit_kl: float | None = None,
    batch: int = 8,
    keep_laws: bool = False,
):
    """Depth profile over `seqs` (token-id sequences, or an (N, T) tensor).

    labels: per sequence, the next token at each position (bpb is reported when given).
    starts: per sequence, the first scored position (default 0: every position).
    depths: default 1..R; ref_depth: default R (always computed). exit_kl: threshold of the exit
    histogram (all depths 1..max are then read out). keep_laws: also return the float64 laws
    (len(depths), n_positions, V) at temperature 1, positions in sequence order (Theorem 2's traces).
    Returns a DepthProfile (and the laws tensor when keep_laws).
    """
    R = model.cfg.recurrence
    depths = sorted(set(depths if depths is not None else range(1, R + 1)))
    ref_depth = R if ref_depth is None else ref_depth
    seqs = [list(map(int, s)) for s in (seqs.tolist() if isinstance(seqs, torch.Tensor) else seqs)]
    if labels is not None:
        rows = labels.tolist() if isinstance(labels, torch.Tensor) else labels
        labels = [list(map(int, s)) for s in rows]
    buckets = tuple((int(a), int(b)) for a, b in buckets)
    _check(model, seqs, labels, starts, depths, ref_depth, buckets, exit_kl)
    starts = list(starts) if starts is not None else [0] * len(seqs)
    run = sorted(set(depths) | {ref_depth})
    r_max = max(run)
    dev = model.embed_tokens.weight.device
    net = model.net()
    # per depth, per scored position: tv, agree, nll; positions in sequence order
    per: dict[int, dict[str, list[torch.Tensor]]] = {r: {"tv": [], "agree": [], "nll": []} for r in depths}
    pos_all: list[torch.Tensor] = []
    laws_out: dict[int, list[torch.Tensor]] = {r: [] for r in depths} if keep_laws else {}
    exit_first: list[torch.Tensor] = []
    for i in range(0, len(seqs), batch):
        chunk = seqs[i : i + batch]
        T = max(len(s) for s in chunk)
        ids = torch.zeros(len(chunk), T, dtype=torch.long)
        mask = torch.zeros(len(chunk), T, dtype=torch.bool)  # scored positions
        for j, s in enumerate(chunk):
            ids[j, : len(s)] = torch.tensor(s)
            mask[j, starts[i + j] : len(s)] = True
        lab = None
        if labels is not None:
            lab = torch.zeros(len(chunk), T, dtype=torch.long)
            for j, s in enumerate(labels[i : i + batch]):
                lab[j, : len(s)] = torch.tensor(s)
        ids, mask = ids.to(dev), mask.to(dev)
        positions = torch.arange(T, device=dev)
        cos, sin = rope_tables(model.cfg, positions)
        e = net.embed(ids, cos, sin, fused_attention_for)  # (B, T, d)
        h = net.initial_state(e, positions)
        attend_for = pass_attention(net)
        lps: dict[int, torch.Tensor] = {}  # r -> (n, V) float64 log-probs at the scored positions
        prev = None
        first = torch.full((int(mask.sum()),), NEVER, dtype=torch.long)
        for r in range(1, r_max + 1):
            h = net.recur(h, e, cos, sin, attend_for(r))
            if r in run or exit_kl is not None:
                logits = net.readout(h, cos, sin, fused_attention_for)[mask]  # (n, V) at the scored positions
                lp = F.log_softmax(logits.double().cpu(), -1)
                if r in run:
                    lps[r] = lp
                if exit_kl is not None:
                    if prev is not None:
                        kl = (lp.exp() * (lp - prev)).sum(-1)
                        hit = (first == NEVER) & (kl < exit_kl)
                        first = torch.where(hit, torch.full_like(first, r), first)
                    prev = lp
        ref = lps[ref_depth]
        p_ref, g_ref = ref.exp(), ref.argmax(-1)
        y = lab[mask.cpu()] if lab is not None else None
        for r in depths:
            lp = lps[r]
            per[r]["tv"].append(total_variations(lp.exp(), p_ref))
            per[r]["agree"].append((lp.argmax(-1) == g_ref).double())
            if y is not None:
                per[r]["nll"].append(-lp.gather(-1, y[:, None])[:, 0] / LN2)
            if keep_laws:
                laws_out[r].append(lp.exp())
        pos_all.append(positions.expand(mask.shape)[mask].cpu())
        exit_first.append(first)
    pos = torch.cat(pos_all)
    n = int(pos.numel())
    if n == 0:
        raise LoopcertError("depth profile: no scored positions")
    cat = {r: {k: torch.cat(v) if v else None for k, v in d.items()} for r, d in per.items()}

    def reduce(sel):
        out = {"n": int(sel.sum()), "tv": {}, "agree": {}, "bpb": {} if labels is not None else None}
        for r in depths:
            out["tv"][r] = float(cat[r]["tv"][sel].mean()) if out["n"] else float("nan")
            out["agree"][r] = float(cat[r]["agree"][sel].mean()) if out["n"] else float("nan")
            if labels is not None:
                out["bpb"][r] = float(cat[r]["nll"][sel].mean()) if out["n"] else float("nan")
        return out

    whole = reduce(torch.ones(n, dtype=torch.bool))
    hist = None
    if exit_kl is not None:
        firsts = torch.cat(exit_first)
        hist = {int(k): int(c) for k, c in zip(*torch.unique(firsts, return_counts=True))}
    prof = DepthProfile(
        depths=tuple(depths),
        ref_depth=ref_depth,
        n_positions=n,
        tv=whole["tv"],
        max_tv={r: float(cat[r]["tv"].max()) for r in depths},
        agree=whole["agree"],
        bpb=whole["bpb"],
        buckets=buckets,
        by_bucket={(a, b): reduce((pos >= a) & (pos < b)) for a, b in buckets},
        exit_kl=exit_kl,
        exit_hist=hist,
    )
    if keep_laws:
        return prof, torch.stack([torch.cat(laws_out[r]) for r in depths])
    return prof


def window_profile(
    model, windows: torch.Tensor, depths: Sequence[int] | None = None, ref_depth: int | None = None, **kw
) -> DepthProfile:
    """Profile over (N, T + 1) byte windows: inputs windows[:, :-1], labels windows[:, 1:]
    (predictions from contexts of 1..T bytes; bucket [a, b) holds positions a..b-1)."""
    if windows.dim() != 2 or windows.shape[1] < 2:
        raise LoopcertError(f"windows must be (N, T + 1) with T >= 1, got {tuple(windows.shape)}")
    return depth_profile(model, windows[:, :-1], depths, ref_depth, labels=windows[:, 1:], **kw)
