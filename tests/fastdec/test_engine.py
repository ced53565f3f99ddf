"""fastdec engine and cache, piece by piece: widths, runs, attention batch invariance, cache
views vs gathers, promotion, poisoning, and an engine-level rollback / re-decode."""

import pytest
import torch

from fastdec.cache import Timeline
from fastdec.decoder import capacity_for
from fastdec.engine import (
    CALL_LANES,
    LAW_BATCH_ELEMS,
    WIDTHS,
    Engine,
    Lane,
    LaneLogits,
    Readout,
    attention,
    fused_chunks,
    split_runs,
    width_for,
)
from fastdec.telemetry import Stats
from refdec import LoopedLM, get_preset
from refdec.sampling import SamplingParams, greedy_token, transform


def test_width_for_pads_to_the_next_width():
    assert [width_for(n) for n in (1, 2, 3, 5, 8, 9, 33, 64)] == [1, 2, 4, 8, 8, 16, 64, 64]
    assert width_for(3, fixed=16) == 16
    with pytest.raises(ValueError):
        width_for(WIDTHS[-1] + 1)


def test_capacity_is_a_power_of_two_at_least_64():
    assert [capacity_for(n) for n in (1, 64, 65, 200)] == [64, 64, 128, 256]


@pytest.mark.parametrize(
    "levels, runs",
    [
        ([], []),
        ([3], [(0, 1, 3, 0)]),
        ([0, 0, 0], [(0, 3, 0, 0)]),  # prefill / verify batch: one level, stride 0
        ([1, 3, 5, 7], [(0, 4, 1, 2)]),  # a LoopSpec wavefront with d1 = 2
        ([1, 2, 4, 6, 9], [(0, 2, 1, 1), (2, 2, 4, 2), (4, 1, 9, 0)]),
    ],
)
def test_split_runs(levels, runs):
    assert split_runs(levels) == runs


def test_attention_rows_do_not_depend_on_their_batch():
    """A lane's attention row is bitwise the same alone, in a batch, or at another index."""
    g = torch.Generator().manual_seed(0)
    n, h, kv, s, d = 8, 4, 2, 64, 8
    q = torch.randn(n, h, 1, d, generator=g)
    k = torch.randn(n, kv, s, d, generator=g)
    v = torch.randn(n, kv, s, d, generator=g)
    hidden = torch.arange(s)[None, :] > torch.randint(0, s, (n,), generator=g)[:, None]
    full = attention(q, k, v, hidden)
    perm = torch.randperm(n, generator=g)
    shuffled = attention(q[perm], k[perm], v[perm], hidden[perm])
    assert torch.equal(shuffled, full[perm])
    for i in (0, 5):
        assert torch.equal(attention(q[i : i + 1], k[i : i + 1], v[i : i + 1], hidden[i : i + 1])[0], full[i])


def test_masked_garbage_is_never_seen():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 1, 8, generator=g)
    k = torch.randn(2, 2, 64, 8, generator=g)
    v = torch.randn(2, 2, 64, 8, generator=g)
    hidden = torch.arange(64)[None, :] > torch.tensor([[10], [30]])
    out = attention(q, k, v, hidden)
    k2, v2 = k.clone(), v.clone()
    k2[0, :, 11:] = 1e30  # scores overflow to inf: masked_fill must still hide them
    v2[1, :, 31:] = -1e30
    assert torch.equal(attention(q, k2, v2, hidden), out)


def _timeline(levels=5, layers=2, n_side=2, seed=0, rows=3):
    tl = Timeline(
        levels,
        layers,
        kv_heads=2,
        head_dim=4,
        capacity=16,
        n_side=n_side,
        dtype=torch.float32,
        device="cpu",
        rows=rows,
    )
    g = torch.Generator().manual_seed(seed)
    for t in (tl.k, tl.v, tl.side_k, tl.side_v):
        t.copy_(torch.randn(t.shape, generator=g))
    return tl


def test_run_view_equals_gather_without_copying():
    tl = _timeline()
    k, v = tl.run_view(1, cell0=1, delta=2, n=2, length=16)  # row 0, levels 1 and 3
    assert k.data_ptr() == tl.k[0, 1, 1].data_ptr()  # a view, not a copy
    assert torch.equal(k[1], tl.k[0, 3, 1, :, :16]) and torch.equal(v[0], tl.v[0, 1, 1, :, :16])
    level = torch.tensor([1, 3])
    rows = torch.tensor([0, 0])
    gk, gv = tl.gather(
        1,
        rows,
        level,
        torch.tensor([4, 5]),
        torch.tensor([2, 2]),
        torch.tensor([False, False]),
        torch.arange(16),
    )
    assert torch.equal(gk, k) and torch.equal(gv, v)


def test_one_level_across_sequences_is_one_view():
    """Cells row * levels + level: level 2 of rows 0, 1, 2 is cells 2, 7, 12, one strided view."""
    tl = _timeline()
    k, v = tl.run_view(0, cell0=2, delta=tl.levels, n=3, length=9)
    assert k.data_ptr() == tl.k[0, 2, 0].data_ptr()
    for b in range(3):
        assert torch.equal(k[b], tl.k[b, 2, 0, :, :9]) and torch.equal(v[b], tl.v[b, 2, 0, :, :9])
    gk, _ = tl.gather(
        0,
        torch.tensor([0, 1, 2]),
        torch.tensor([2, 2, 2]),
        torch.tensor([3, 3, 3]),
        torch.tensor([2, 2, 2]),
        torch.tensor([False] * 3),
        torch.arange(9),
    )
    assert torch.equal(gk, k)


def test_side_rows_overlay_their_position_only():
    tl = _timeline()
    sk, _ = tl.side_view(0, [(2, 1, 3, 7)], 16)
    expect = tl.k[2, 3, 0, :, :16].clone()
    expect[:, 7] = tl.side_k[2, 1, 3, 0]
    assert torch.equal(sk[0], expect)
    gk, _ = tl.gather(
        0,
        torch.tensor([2]),
        torch.tensor([3]),
        torch.tensor([7]),
        torch.tensor([1]),
        torch.tensor([True]),
        torch.arange(16),
    )
    assert torch.equal(gk[0], expect)


@pytest.mark.parametrize("length", [1, 9, 16])
def test_the_compiled_gather_reads_the_keys_the_eager_one_does(length):
    """A compiled engine's read (`put`: one index per (lane, KV head) into the flat buffers, its keys
    one block) copies bitwise what the eager gather's index_select does, for lanes of several rows
    and levels, side lanes overlaid at their position, and any key length up to the capacity."""
    tl = _timeline()
    args = (
        torch.tensor([2, 0, 1, 2, 0]),  # rows
        torch.tensor([3, 1, 4, 0, 1]),  # levels
        torch.tensor([7, 0, 15, 3, 5]),  # positions
        torch.tensor([1, 2, 0, 2, 0]),  # side slots
        torch.tensor([True, False, True, False, True]),
        torch.arange(length),
    )
    for layer in (0, 1):
        want = tl.gather(layer, *args)
        tl.put = True
        got = tl.gather(layer, *args)
        tl.put = False
        for a, b in zip(got, want):
            assert a.shape == (5, 2, length, 4) and torch.equal(a, b)


def test_write_and_promote():
    tl = _timeline()
    k = torch.ones(2, 2, 4)
    v = torch.full((2, 2, 4), 2.0)
    # call row 0: sequence 1's main lane at (level 2, pos 5); call row 1: sequence 2's side lane
    # in slot 0 at level 1 (main -> trash)
    tl.write(
        1,
        k,
        v,
        torch.tensor([1, 2]),
        torch.tensor([2, 1]),
        torch.tensor([5, tl.trash_pos]),
        torch.tensor([tl.trash_slot, 0]),
    )
    assert torch.equal(tl.k[1, 2, 1, :, 5], k[0]) and torch.equal(tl.v[1, 2, 1, :, 5], v[0])
    assert torch.equal(tl.side_k[2, 0, 1, 1], k[1])
    before = tl.k.clone()
    tl.promote(2, 0, 9)
    assert torch.equal(tl.k[2, :, :, :, 9], tl.side_k[2, 0])
    other = torch.ones_like(before, dtype=torch.bool)
    other[2, :, :, :, 9] = False
    assert torch.equal(tl.k[other], before[other])


def test_poison_keeps_exactly_the_kept_slots():
    tl = _timeline()
    before_k, before_side = tl.k.clone(), tl.side_k.clone()
    keep_main = torch.zeros(tl.rows, tl.levels, tl.capacity + 1, dtype=torch.bool)
    keep_main[0, :, :3] = True
    keep_main[2, :2, 5] = True
    keep_side = torch.zeros(tl.rows, tl.n_side + 1, tl.levels, dtype=torch.bool)
    keep_side[1, 1, :3] = True
    tl.poison(torch.Generator().manual_seed(9), 1e4, keep_main, keep_side)
    km = keep_main[:, :, None, None, :, None].expand_as(tl.k)
    assert torch.equal(tl.k[km], before_k[km])
    assert not bool((tl.k[~km] == before_k[~km]).any())
    ks = keep_side[:, :, :, None, None, None].expand_as(tl.side_k)
    assert torch.equal(tl.side_k[ks], before_side[ks])
    assert not bool((tl.side_k[~ks] == before_side[~ks]).any())
    assert bool(torch.isfinite(tl.k).all())


@pytest.mark.parametrize("name", ["tiny-raven", "tiny-ouro"])
def test_engine_rollback_then_redecode_equals_fresh(name):
    """Decode 3 wrong lanes past the prefix, drop them (length never moved), decode the right
    token: the logits equal a fresh engine's, bit for bit (fixed width)."""
    model = LoopedLM(get_preset(name)).init_weights(4)
    R = model.cfg.recurrence
    prompt = [1, 2, 3, 4, 5]

    def fresh_engine():
        eng = Engine(model, R, [1, R], capacity=64, fixed_width=4)
        lanes = [Lane(p, t) for p, t in enumerate(prompt)]
        for _ in range(R):
            eng.advance(lanes)
        return eng

    def decode(eng, pos, token):
        lane = Lane(pos, token)
        for _ in range(R):
            eng.advance([lane])
        return lane.logits[R]

    eng = fresh_engine()
    wrong = [Lane(5 + i, 9 + i) for i in range(3)]
    for _ in range(R):
        eng.advance(wrong)  # rejected speculation: written, then simply forgotten (the length stays)
    got = decode(eng, 5, 7)
    assert torch.equal(got, decode(fresh_engine(), 5, 7))
    assert not torch.equal(got, wrong[0].logits[R])  # the test can see a different token


def test_stats_rates():
    s = Stats(
        "pipelined",
        depth=8,
        draft_depth=2,
        second_depth=4,
        tokens=10,
        from_first=6,
        from_second=2,
        from_restart=2,
        proposals=9,
        accepted=6,
        rounds=4,
        gate_checks=5,
        gate_opens=2,
        rewind_checks=3,
        rewind_hits=2,
        steps=20,
        lane_steps=60,
    )
    assert s.gamma == pytest.approx(10 * 8 / (6 * 2 + 2 * 4 + 2 * 8))
    assert (s.rejections, s.acceptance_rate, s.mean_accepted_length) == (3, 6 / 9, 1.5)
    assert (s.gate_open_rate, s.mean_live_lanes, s.rewind_hit_rate) == (0.4, 3.0, 2 / 3)
    d = s.as_dict()
    assert d["gamma"] == s.gamma and d["tokens"] == 10 and "steps_per_width" in d
    # every public figure of a Stats is in as_dict, with its value (found here by dir(), not from
    # the class's own list)
    public = {n for n in dir(s) if not n.startswith("_") and not callable(getattr(s, n))}
    assert set(d) == public and all(d[n] == getattr(s, n) for n in public)
    empty = Stats("autoregressive", depth=4)
    assert (empty.gamma, empty.acceptance_rate, empty.rewind_hit_rate) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("n, V", [(5, 13), (300, 61), (20, 65536)])  # the last: rows alone (LAW_BATCH_ELEMS)
def test_readout_laws_are_each_rows_transform_bitwise(n, V):
    """A readout call's laws (Readout.law, computed for every row at once when small) are
    bitwise refdec.sampling.transform of each row alone, filtered or not, whichever row asks first."""
    g = torch.Generator().manual_seed(V)
    logits = torch.randn(n, V, generator=g) * 4
    out = Readout(logits)
    assert (n * V > LAW_BATCH_ELEMS) == (V == 65536)
    for params in (
        SamplingParams(0.0),
        SamplingParams(0.8),
        SamplingParams(0.8, top_k=3),
        SamplingParams(1.2, top_p=0.7),
    ):
        for i in (n - 1, 0, n // 2):
            assert torch.equal(out.law(i, params), transform(logits[i], params)), (params, i)
    assert not torch.equal(out.law(0, SamplingParams(0.8)), transform(logits[1], SamplingParams(0.8)))


def test_readout_argmax_is_each_rows_greedy_token():
    """Readout.argmax (every row's argmax found at once, what greedy commits) is greedy_token of
    each row alone, ties (the first maximal index) and NaN rows included."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 50, generator=g)
    logits[1, [7, 30]] = 9.0  # a tie: the first
    logits[2] = 0.0  # all tied
    logits[3, 11] = float("nan")
    logits[4, 40] = float("inf")
    out = Readout(logits)
    assert [out.argmax(i) for i in range(6)] == [greedy_token(row) for row in logits]
    assert (out.argmax(1), out.argmax(2), out.argmax(3), out.argmax(4)) == (7, 0, 11, 40)
    lane = LaneLogits()
    lane.at[2] = (out, 4)
    assert lane.argmax(2) == 40


def test_fused_chunks_split_lanes_into_the_calls_that_cost_least():
    """A compiled prefill of 24 lanes runs calls of 16 + 4 + 4 lanes, not one padded to 64 (whose
    rows each copy their keys); every n up to 70 is split into calls of at most 64 lanes, n lanes
    in all, at the least cost (a call: its padded width + CALL_LANES) of any calls that hold n."""
    widths = (1, 4, 16, 64)  # a compiled engine's
    assert fused_chunks(24, widths) == (16, 4, 4)
    assert fused_chunks(60, widths) == (60,)  # 4 lanes of padding cost less than five more calls
    assert fused_chunks(384, widths) == (64,) * 6
    for n in range(1, 71):
        least = min(  # brute force: calls of each width, the rest in calls of 1
            a * (64 + CALL_LANES) + b * (16 + CALL_LANES) + c * (4 + CALL_LANES) + rest * (1 + CALL_LANES)
            for a in range(3)
            for b in range(6)
            for c in range(19)
            for rest in [max(0, n - 64 * a - 16 * b - 4 * c)]
        )
        sizes = fused_chunks(n, widths)
        assert sum(sizes) == n and max(sizes) <= 64 and min(sizes) > 0
        paid = sum(min(w for w in widths if w >= k) + CALL_LANES for k in sizes)
        assert paid == least, (n, sizes)
