"""CUDA graphs (fastdec.graphs) against the same engine run eagerly. Needs CUDA:

    python3 -m pytest -m gpu tests/fastdec/test_gpu.py

Replay must equal eager bit for bit at every width, padded rows included, and graphed sampling
must reproduce eager sampling for the same seed. The eager side uses reads="gather", the code
path graphs capture (views cannot move between replays), so both launch the same kernels.
"""

import pytest
import torch

from fastdec import WIDTHS, Decoder
from refdec import LoopedLM, SamplingParams, generate
from refdec.config import TINY_PRESETS, get_preset

pytestmark = pytest.mark.gpu

PROMPT = [1, 2, 3, 4, 5, 6, 7]
N_NEW = 10


def cuda_model(name, dtype=torch.float32, seed=3):
    return LoopedLM(get_preset(name)).init_weights(seed).to(device="cuda", dtype=dtype)


def record(engine, log):
    """Log every phase call: its rows (lanes in order) and all W output rows, padding included."""
    inner = engine.run_phase

    def run_phase(kind, lanes, width=None):
        order, outs = inner(kind, lanes, width)
        log.append((kind, [(ln.pos, ln.depth, ln.side) for ln in order], [o.clone() for o in outs]))
        return order, outs

    engine.run_phase = run_phase


def assert_same_result(a, b):
    """Bit for bit the same tokens and target logits."""
    assert a.tokens == b.tokens
    assert all(torch.equal(x, y) for x, y in zip(a.target_logits, b.target_logits))


STRATEGIES = [
    ("pipelined", {"draft_depth": 1, "second_depth": 3}),
    ("draft-verify", {"draft_depth": 2, "draft_ahead": 4}),
    ("autoregressive", {}),
]


def cache_rows(engine):
    """Every non-trash cache row (padded rows may race on the trash row; it is never read)."""
    out = []
    for tl in engine.cache.timelines():
        out += [
            tl.k[..., : tl.capacity, :],
            tl.v[..., : tl.capacity, :],
            tl.side_k[:, : tl.n_side],
            tl.side_v[:, : tl.n_side],
        ]
    return out


def graphed_then_eager(model, width, n_positions: int, rows: int, decode) -> list[tuple]:
    """[(result, engine, call log)] of decode(decoder) with CUDA graphs, then eager with the reads
    graphs use (gather): one pipelined setting at fixed width `width`, its engine of `rows` rows."""
    runs = []
    for graphs in (True, False):
        dec = Decoder(
            model,
            "pipelined",
            draft_depth=1,
            second_depth=2,
            fixed_width=width,
            device="cuda",
            cuda_graphs=graphs,
            reads="gather",
        )
        engine = dec.engine(n_positions, rows)
        log = []
        record(engine, log)
        res = decode(dec)
        torch.cuda.synchronize()
        runs.append((res, engine, log))
    return runs


@pytest.mark.parametrize("name", TINY_PRESETS)
@pytest.mark.parametrize("width", WIDTHS)
def test_graph_replay_equals_eager_at_every_width(name, width):
    decode = lambda dec: dec.generate(PROMPT, N_NEW, keep_logits=True)
    runs = graphed_then_eager(cuda_model(name), width, len(PROMPT) + N_NEW, 1, decode)
    (g_res, g_eng, g_log), (e_res, e_eng, e_log) = runs
    assert g_eng.graphs is not None and g_eng.graphs.replays == len(g_log) > 0
    assert g_eng.graphs.captures <= 3  # one graph per phase at this width
    assert len(g_log) == len(e_log)
    for i, ((gk, g_rows, g_outs), (ek, e_rows, e_outs)) in enumerate(zip(g_log, e_log)):
        assert (gk, g_rows) == (ek, e_rows), f"call {i}: different lanes"
        for a, b in zip(g_outs, e_outs):
            assert a.shape[0] == width
            bad = (a != b).reshape(width, -1).any(-1)
            assert not bool(bad.any()), f"call {i} ({gk}): rows {bad.nonzero().flatten().tolist()} differ"
    assert_same_result(g_res, e_res)
    assert all(torch.equal(a, b) for a, b in zip(cache_rows(g_eng), cache_rows(e_eng)))


@pytest.mark.parametrize("strategy, kw", STRATEGIES)
@pytest.mark.parametrize(
    "sampling", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.8, top_k=5, top_p=0.9)]
)
def test_graphed_sampling_equals_eager_sampling(strategy, kw, sampling):
    model = cuda_model("tiny-raven")
    for seed in (0, 11):
        a = Decoder(model, strategy, device="cuda", cuda_graphs=True, **kw).generate(
            PROMPT, 16, sampling, seed=seed, keep_logits=True
        )
        b = Decoder(model, strategy, device="cuda", cuda_graphs=False, reads="gather", **kw).generate(
            PROMPT, 16, sampling, seed=seed, keep_logits=True
        )
        assert_same_result(a, b)


@pytest.mark.parametrize("name", TINY_PRESETS)
def test_graphed_greedy_float64_equals_refdec(name):
    cpu = LoopedLM(get_preset(name)).init_weights(5).double()
    want = generate(cpu, PROMPT, N_NEW)
    model = cpu.to("cuda")
    settings = [("pipelined", {"draft_depth": 1, "second_depth": 3}), ("draft-verify", {"draft_depth": 2})]
    for strategy, kw in settings:
        assert Decoder(model, strategy, device="cuda", **kw).generate(PROMPT, N_NEW).tokens == want


# -- batches: one graph per (phase, width) of an engine of static (capacity, rows) ----------------

BATCH_PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [2], [7, 7, 1, 3]]


@pytest.mark.parametrize("rows", [2, 4])
@pytest.mark.parametrize("width", [8, 64, None])  # None: the batch engine's widths, up to 256
def test_batched_graph_replay_equals_eager_at_every_batch_and_width(rows, width):
    """Replay == eager (gather reads) bit for bit for a batch: every call's rows, the outputs and
    the cache, with the sequence dimension static (the engine's rows)."""
    news, sampling = [N_NEW, 3, N_NEW, 5][:rows], SamplingParams(temperature=1.0)
    decode = lambda dec: dec.generate_batch(
        BATCH_PROMPTS[:rows], news, sampling, list(range(rows)), keep_logits=True
    )
    runs = graphed_then_eager(cuda_model("tiny-raven"), width, 6 + N_NEW, rows, decode)
    (g_res, g_eng, g_log), (e_res, e_eng, e_log) = runs
    assert g_eng.graphs is not None and g_eng.graphs.replays == len(g_log) > 0
    assert [(k, r) for k, r, _ in g_log] == [(k, r) for k, r, _ in e_log]
    for (_, _, g_outs), (_, _, e_outs) in zip(g_log, e_log):
        assert all(torch.equal(a, b) for a, b in zip(g_outs, e_outs))
    for a, b in zip(g_res, e_res):
        assert_same_result(a, b)
    assert all(torch.equal(a, b) for a, b in zip(cache_rows(g_eng), cache_rows(e_eng)))


@pytest.mark.parametrize("strategy, kw", STRATEGIES)
def test_graphed_needle_in_a_batch_equals_the_sequence_alone(strategy, kw):
    """Under graphs every read spans the capacity: at one capacity, a sequence decoded in a batch
    is bit for bit the same sequence decoded alone (fixed width)."""
    model = cuda_model("tiny-raven")
    sampling = SamplingParams(temperature=1.0)
    dec = Decoder(model, strategy, device="cuda", fixed_width=16, **kw)
    got = dec.generate_batch(BATCH_PROMPTS, 10, sampling, [5, 6, 7, 8], keep_logits=True)
    for p, s, res in zip(BATCH_PROMPTS, [5, 6, 7, 8], got):
        want = dec.generate(p, 10, sampling, seed=s, keep_logits=True)
        assert_same_result(res, want)
