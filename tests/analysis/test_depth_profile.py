"""analysis.depth_profile: batched, padded profile == the same figures from refdec's uncached
depth_logits, sequence by sequence; buckets, starts, exit histogram; bad input."""

import math

import pytest
import torch

from analysis import depth_profile as dp
from analysis.depth_profile import NEVER, depth_profile, window_profile
from refdec.config import TINY_LOOPCODER, get_preset
from refdec.errors import LoopcertError
from refdec.layers import causal_attention
from refdec.model import LoopedLM, PassAttendFor


@pytest.fixture(
    scope="module", params=["tiny-raven", "tiny-raven-llama", "tiny-raven-olmo", "tiny-ouro", TINY_LOOPCODER]
)
def model(request):
    return LoopedLM(get_preset(request.param)).init_weights(3).double().eval()


def seqs_and_labels(V, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(0, V, (n,), generator=g).tolist() for n in lengths]
    labels = [torch.randint(0, V, (n,), generator=g).tolist() for n in lengths]
    return seqs, labels


def naive(model, seqs, labels, starts, depths, ref):
    """Per sequence through depth_logits: lists of (position, tv, agree, bits) per depth."""
    out = {r: [] for r in depths}
    for s, y, a in zip(seqs, labels, starts):
        lg = model.depth_logits(s, list(depths) + [ref])  # (D + 1, T, V)
        lp = torch.log_softmax(lg.double(), -1)
        for i, r in enumerate(depths):
            for t in range(a, len(s)):
                tv = 0.5 * float((lp[i, t].exp() - lp[-1, t].exp()).abs().sum())
                agree = float(lp[i, t].argmax() == lp[-1, t].argmax())
                out[r].append((t, tv, agree, -float(lp[i, t, y[t]]) / math.log(2)))
    return out


def test_profile_equals_the_oracle_sequence_by_sequence(model):
    R = model.cfg.recurrence
    V = model.cfg.vocab_size
    seqs, labels = seqs_and_labels(V, [7, 12, 3, 12, 9])
    starts = [0, 4, 1, 11, 2]
    depths = sorted({1, 2, R - 1, R + 2})  # R = 2 (LoopCoder) repeats a depth
    prof = depth_profile(
        model, seqs, depths, labels=labels, starts=starts, buckets=[(0, 4), (4, 100)], batch=3
    )
    ref = naive(model, seqs, labels, starts, depths, R)
    assert prof.n_positions == sum(len(s) - a for s, a in zip(seqs, starts))
    for r in depths:
        rows = ref[r]
        assert prof.tv[r] == pytest.approx(sum(x[1] for x in rows) / len(rows), abs=1e-10)
        assert prof.max_tv[r] == pytest.approx(max(x[1] for x in rows), abs=1e-10)
        assert prof.agree[r] == pytest.approx(sum(x[2] for x in rows) / len(rows), abs=1e-12)
        assert prof.bpb[r] == pytest.approx(sum(x[3] for x in rows) / len(rows), abs=1e-10)
        for a, b in [(0, 4), (4, 100)]:
            sel = [x for x in rows if a <= x[0] < b]
            assert prof.by_bucket[(a, b)]["n"] == len(sel)
            got = prof.by_bucket[(a, b)]
            assert got["tv"][r] == pytest.approx(sum(x[1] for x in sel) / len(sel), abs=1e-10)
            assert got["bpb"][r] == pytest.approx(sum(x[3] for x in sel) / len(sel), abs=1e-10)
    # batching and padding change nothing: one sequence per batch gives the same figures
    one = depth_profile(model, seqs, depths, labels=labels, starts=starts, batch=1)
    for r in depths:
        assert one.tv[r] == pytest.approx(prof.tv[r], abs=1e-12)
        assert one.bpb[r] == pytest.approx(prof.bpb[r], abs=1e-12)
    assert (prof.tv.get(R) is None) == (R not in depths) and prof.ref_depth == R


def test_padding_would_be_caught():
    """Control: a profile of sequences truncated to a shorter length differs (the comparison above
    sees the padded tail if it leaked into real positions)."""
    m = LoopedLM(get_preset("tiny-raven")).init_weights(3).double().eval()
    seqs, labels = seqs_and_labels(m.cfg.vocab_size, [12, 12])
    full = depth_profile(m, seqs, [1], labels=labels)
    cut = depth_profile(m, [s[:6] for s in seqs], [1], labels=[y[:6] for y in labels])
    assert abs(full.tv[1] - cut.tv[1]) > 1e-6


def test_exit_histogram_and_laws(model):
    R = model.cfg.recurrence
    seqs, labels = seqs_and_labels(model.cfg.vocab_size, [10, 6])
    thr = 1e-2
    prof, laws = depth_profile(model, seqs, list(range(1, R + 1)), exit_kl=thr, keep_laws=True)
    assert laws.shape == (R, 16, model.cfg.vocab_size) and laws.dtype == torch.float64
    lp = torch.cat(
        [torch.log_softmax(model.depth_logits(s, list(range(1, R + 1))).double(), -1) for s in seqs], 1
    )
    assert torch.allclose(laws, lp.exp(), atol=1e-12)
    kl = (lp[1:].exp() * (lp[1:] - lp[:-1])).sum(-1)  # (R-1, P): KL(p_r || p_{r-1}), r = 2..R
    first = []
    for t in range(kl.shape[1]):
        below = [r + 2 for r in range(R - 1) if kl[r, t] < thr]
        first.append(below[0] if below else NEVER)
    want = {r: first.count(r) for r in set(first)}
    assert prof.exit_hist == want
    assert sum(prof.exit_hist.values()) == prof.n_positions
    assert prof.bpb is None


def loopcoder_laws_error(m, seqs, depths):
    """Largest |law - depth_logits' law| over the profile's laws of `seqs` at `depths`, per depth."""
    _, laws = depth_profile(m, seqs, depths, keep_laws=True, batch=2)
    want = torch.cat([torch.softmax(m.depth_logits(s, depths).double(), -1) for s in seqs], 1)
    return [float((laws[i] - want[i]).abs().max()) for i in range(len(depths))]


def test_loopcoder_laws_are_the_oracles_past_the_window():
    """LoopCoder's pass r >= 2 mixes pass 1's keys (all earlier rows) with its own (the last W):
    on sequences longer than W = 8, padded in batches, the laws are depth_logits' at every depth,
    R = 2 and past it."""
    m = LoopedLM(get_preset(TINY_LOOPCODER)).init_weights(3).double().eval()
    W = m.cfg.loop_window_size
    seqs, _ = seqs_and_labels(m.cfg.vocab_size, [3 * W, W + 3, 5])
    worst = loopcoder_laws_error(m, seqs, [1, 2, 3])
    assert max(worst) <= 1e-10, worst


def test_loopcoder_with_plain_causal_passes_would_be_caught(monkeypatch):
    """Control: running every pass as plain causal attention (another model: what the profile did
    before it knew LoopCoder) leaves pass 1 right and every later pass's laws measurably wrong."""
    m = LoopedLM(get_preset(TINY_LOOPCODER)).init_weights(3).double().eval()
    seqs, _ = seqs_and_labels(m.cfg.vocab_size, [20, 13])
    plain = PassAttendFor(lambda layer: causal_attention)
    monkeypatch.setattr(dp, "pass_attention", lambda net: lambda r: plain)
    first, second, third = loopcoder_laws_error(m, seqs, [1, 2, 3])
    assert first <= 1e-10 and second > 1e-3 and third > 1e-3, (first, second, third)


def test_window_profile_and_bad_input():
    m = LoopedLM(get_preset("tiny-raven")).init_weights(3).eval()
    w = torch.randint(0, 13, (3, 9), generator=torch.Generator().manual_seed(1))
    prof = window_profile(m, w, [1, 2], buckets=[(0, 4), (4, 8)])
    assert prof.n_positions == 24 and prof.by_bucket[(0, 4)]["n"] == 12
    assert set(prof.to_dict()["by_bucket"]) == {"0-4", "4-8"}
    with pytest.raises(LoopcertError, match="windows"):
        window_profile(m, w[:, :1])
    with pytest.raises(LoopcertError, match="outside"):
        depth_profile(m, [[1, 99]])
    with pytest.raises(LoopcertError, match="depths"):
        depth_profile(m, [[1, 2]], [0])
    with pytest.raises(LoopcertError, match="empty"):
        depth_profile(m, [[]])
    with pytest.raises(LoopcertError, match="labels"):
        depth_profile(m, [[1, 2]], labels=[[1]])
    with pytest.raises(LoopcertError, match="starts"):
        depth_profile(m, [[1, 2]], starts=[2])
    with pytest.raises(LoopcertError, match="exit_kl"):
        depth_profile(m, [[1, 2]], exit_kl=0.0)
    with pytest.raises(LoopcertError, match="max_seq_len"):
        depth_profile(m, [[1] * (m.cfg.max_seq_len + 1)])
