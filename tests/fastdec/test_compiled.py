"""Compiled engine steps (fastdec/compiled.py): every (phase, width) the engine runs compiles as one
graph (the CUDA-graph path's preconditions: no host sync, no data-dependent shape), and a compiled
decoder decodes what the eager one does."""

import pytest
import torch
from tolerances import assert_close

import fastdec
import refdec
from fastdec.compiled import CompiledPhases
from fastdec.config import DecodeConfig
from fastdec.engine import PHASES, Engine, Lane
from fastdec.strategies import fused_spans
from refdec.config import TINY_LOOPCODER, TINY_PRESETS, get_preset
from refdec.errors import LoopcertError
from refdec.model import LoopedLM

ALL_TINY = TINY_PRESETS + (TINY_LOOPCODER,)


def tiny(name, dtype=torch.float32):
    return LoopedLM(get_preset(name)).init_weights(0).to(dtype).eval()


def lanes_for(engine: Engine, kind: str, width: int) -> list[Lane]:
    """`width` lanes of a phase over two cache rows, main and side lanes, at mixed positions and
    depths (a verify block, drafts, a side proposal), their states random."""
    g = torch.Generator().manual_seed(width)
    d = engine.cfg.d_model
    R = engine.depth
    h = torch.randn(width, 1, d, generator=g).to(engine.dtype)
    e = torch.randn(width, 1, d, generator=g).to(engine.dtype)
    out = []
    for i in range(width):
        side = i % 5 == 4 and engine.cache.n_side > 0
        depth = 0 if kind == "prelude" else (1 + i % R if kind == "recur" else R)
        if kind == "readout":
            depth = engine.readout_depths[i % len(engine.readout_depths)]
        ln = Lane(
            pos=i % engine.capacity,
            token=i % engine.cfg.vocab_size,
            row=i % engine.rows,
            side=(i // 5) % engine.cache.n_side if side else -1,
            depth=depth - (kind == "recur"),
        )
        if kind != "prelude":
            ln.h, ln.e = (h, i), (e, i)
        out.append(ln)
    return out


def check_graphs(name: str, widths=None) -> None:
    """fullgraph=True: a graph break (a host sync, a data-dependent shape) fails here. aot_eager
    traces what inductor would compile (dynamo, then AOT autograd's functional graph, where a
    data-dependent index fails), without generating code; the compiled call must give the eager
    call's outputs."""
    model = tiny(name)
    R = model.cfg.recurrence
    engine = Engine(model, R, [1, R], capacity=64, n_side=2, reads="gather", rows=2)
    phases = CompiledPhases(engine, backend="aot_eager")
    widths = engine.widths if widths is None else widths
    for width in widths:
        for kind in PHASES:
            lanes = lanes_for(engine, kind, width)
            inp, _, _ = engine.phase_inputs(kind, lanes, width)
            with torch.inference_mode():
                got = phases.run(kind, inp)
                want = engine.phase_fn(kind, inp)
            for a, b in zip(got, want):
                assert_close(a, b)
    assert set(phases.fns) == {(k, w) for k in PHASES for w in widths}


def check_fused(name: str, widths=(4,)) -> None:
    """Every fused span a strategy asks for (prefill/autoregressive 0 -> R, drafts 0 -> d1,
    deepening d1 -> R) compiles as one graph (fullgraph, aot_eager), and advancing lanes through
    it leaves the lanes, their logits and the cache where the eager phase-by-phase calls leave them."""
    model = tiny(name)
    R = model.cfg.recurrence
    spans = fused_spans(DecodeConfig("draft-verify", draft_depth=1).resolve(R))
    assert spans == {(0, R), (0, 1), (1, R)}
    runs = {}
    for fused in (False, True):
        engine = Engine(model, R, [1, R], capacity=64, reads="gather", rows=2)
        if fused:
            engine.compiled = CompiledPhases(engine, backend="aot_eager")
        for ln_tl in engine.cache.timelines():
            ln_tl.put = True  # both write through the flat views
        out = []
        for width in widths:
            lanes = [Lane(pos=3 + i, token=(7 * i) % model.cfg.vocab_size, row=i % 2) for i in range(width)]
            for to in (1, R):  # 0 -> 1 (a draft), then 1 -> R (the deepening)
                if fused:
                    assert engine.fusable(lanes, to)
                    calls = engine.advance(lanes, to=to)
                else:
                    calls = []
                    while lanes[0].depth < to:
                        calls += engine.advance(lanes)
                out.append([(c.kind, c.width) for c in calls for _ in range(c.count)])
            out.append([ln.logits[d] for ln in lanes for d in (1, R)] + [lanes[0].h[0][lanes[0].h[1]]])
        out.append([t.clone() for tl in engine.cache.timelines() for t in (tl.k, tl.v)])
        runs[fused] = out
        if fused:
            keys = {(w, a, b) for w in widths for a, b in ((0, 1), (1, R))}
            assert set(engine.compiled.fused) == keys
    for want, got in zip(runs[False], runs[True]):
        if want and isinstance(want[0], tuple):
            assert got == want  # the same calls recorded (Stats)
        else:
            for a, b in zip(want, got):
                assert_close(a, b)


def test_loopcoder_compiles_its_fused_steps_as_one_graph():
    """The default suite's fused check: LoopCoder's reads (two gathers and a gate per core layer)."""
    check_fused(TINY_LOOPCODER)


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY_PRESETS)
def test_each_family_compiles_its_fused_steps_as_one_graph(name):
    check_fused(name)


@pytest.fixture
def aot_eager(monkeypatch):
    """Compiled decoders trace with aot_eager (the graphs, not inductor's code: seconds, not minutes)."""
    import fastdec.compiled as compiled_mod

    real = compiled_mod.CompiledPhases.__init__

    def init(self, engine, backend="inductor"):
        real(self, engine, "aot_eager")

    monkeypatch.setattr(compiled_mod.CompiledPhases, "__init__", init)


@pytest.mark.tier2
@pytest.mark.parametrize("strategy", ["autoregressive", "draft-verify"])
def test_fused_steps_decode_the_eager_tokens_with_the_eager_calls(strategy, aot_eager, monkeypatch):
    """Outside fixed-width mode a compiled decoder runs its Steps with `to` as fused graphs: the
    float64 greedy tokens are the eager decoder's, and so are the calls its Stats count (greedy
    chains off: a chain's lanes past the last token count as calls; tested below)."""
    import fastdec.engine as engine_mod

    monkeypatch.setattr(engine_mod, "CHAIN_RECURRENCES", 0)
    model = tiny(TINY_LOOPCODER, torch.float64)
    prompt = list(range(5, 25))
    kw = {"draft_depth": 1} if strategy == "draft-verify" else {}
    eager = fastdec.Decoder(model, strategy, **kw)
    compiled = fastdec.Decoder(model, strategy, compile=True, **kw)
    want = eager.generate(prompt, 12, refdec.SamplingParams(), seed=0)
    got = compiled.generate(prompt, 12, refdec.SamplingParams(), seed=0)
    assert got.tokens == want.tokens
    assert got.stats.calls == want.stats.calls and got.stats.steps == want.stats.steps
    (engine,) = compiled._engines.values()
    R = model.cfg.recurrence
    spans = {(0, R)} if strategy == "autoregressive" else {(0, R), (0, 1), (1, R)}
    assert {(a, b) for _, a, b in engine.compiled.fused} == spans


def test_a_host_sync_in_a_fused_step_fails_the_precondition_check(monkeypatch):
    """The fused graphs' negative control: the same syncing read as below, in a fused call."""
    from fastdec.cache import Timeline

    real = Timeline.gather

    def syncing(self, layer, row, level, pos, side_slot, is_side, key_pos):
        if bool((pos < 0).any()):  # the host reads pos
            pos = pos.clamp(min=0)
        return real(self, layer, row, level, pos, side_slot, is_side, key_pos)

    monkeypatch.setattr(Timeline, "gather", syncing)
    with pytest.raises(Exception, match="(?i)graph break|data-dependent"):
        check_fused(TINY_PRESETS[0], widths=(1,))


@pytest.mark.tier2
@pytest.mark.parametrize("name", ALL_TINY)
def test_each_family_compiles_every_phase_as_one_graph(name):
    """Every family's code paths (a width changes shapes, not code): the narrowest call and the
    widest a two-row batch makes, side lanes included."""
    check_graphs(name, widths=(1, 128))


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_TINY)
def test_every_phase_and_width_compiles_as_one_graph(name):
    check_graphs(name)


def test_compile_settings_are_checked():
    model = tiny(TINY_PRESETS[0])
    with pytest.raises(LoopcertError, match="compile must be True or False"):
        fastdec.Decoder(model, "autoregressive", compile="yes")
    with pytest.raises(LoopcertError, match="choose one"):
        fastdec.Decoder(model, "autoregressive", compile=True, cuda_graphs=True)
    with pytest.raises(LoopcertError, match="by index"):
        CompiledPhases(Engine(model, 2, [2], capacity=64))


def test_a_host_sync_in_a_phase_fails_the_precondition_check(monkeypatch):
    """The negative control: a cache read that branches on a tensor's value (skip the side-lane
    overlay when no lane of the call is a side lane: the same outputs eagerly, a host sync every
    call) is refused at compile time, as an index by a 0-d tensor in Timeline.gather was before
    compiled steps existed."""
    from fastdec.cache import Timeline

    real = Timeline.gather

    def syncing(self, layer, row, level, pos, side_slot, is_side, key_pos):
        if is_side is not None and not bool(is_side.any()):  # the host reads is_side
            is_side = None
        return real(self, layer, row, level, pos, side_slot, is_side, key_pos)

    monkeypatch.setattr(Timeline, "gather", syncing)
    with pytest.raises(Exception, match="(?i)graph break|data-dependent"):
        check_graphs(TINY_PRESETS[0], widths=(1,))


@pytest.mark.tier2
@pytest.mark.parametrize("strategy", ["autoregressive", "pipelined"])
def test_a_compiled_decoder_decodes_the_eager_tokens(strategy):
    """inductor's kernels, float64 (no greedy tie at this precision): the compiled decoder's greedy
    tokens are the eager decoder's, and it compiles each (phase, width) it runs once."""
    model = tiny(TINY_LOOPCODER, torch.float64)
    prompt = list(range(5, 25))  # past tiny-loopcoder's window of 8
    kw = {"draft_depth": 1} if strategy == "pipelined" else {}
    eager = fastdec.Decoder(model, strategy, fixed_width=8, **kw)
    compiled = fastdec.Decoder(model, strategy, fixed_width=8, compile=True, **kw)
    want = eager.generate(prompt, 24, refdec.SamplingParams(), seed=0).tokens
    got = compiled.generate(prompt, 24, refdec.SamplingParams(), seed=0).tokens
    assert got == want
    (engine,) = compiled._engines.values()
    assert set(engine.compiled.fns) == {(k, 8) for k in PHASES}
    assert compiled.compile_seconds > 0 and eager.compile_seconds == 0


def test_a_compiled_engine_pads_to_fewer_widths():
    model = tiny(TINY_PRESETS[0])
    assert Engine(model, 2, [2], capacity=64, compiled=True).widths == (1, 4, 16, 64)
    assert Engine(model, 2, [2], capacity=64, rows=16, compiled=True).widths == (1, 4, 16, 64, 256, 1024)


def test_a_compiled_step_of_many_lanes_runs_as_the_calls_that_cost_least(aot_eager):
    """A step's lanes (a batch's pipelined round: new lanes beside deeper ones, side lanes) run in
    fused_chunks' calls at STEP_LANES a call, not in one call padded to the next width 4x up (26
    lanes: 16 + 16 or 16 + 4 + 4 + 4, not 64); the states, logits and cache are an eager engine's."""
    import fastdec.engine as engine_mod

    model = tiny(TINY_LOOPCODER)
    R = model.cfg.recurrence
    runs = {}
    for compiled in (False, True):
        engine = Engine(model, R, [1, R], capacity=64, n_side=2, reads="gather", rows=2, compiled=compiled)
        for tl in engine.cache.timelines():
            tl.put = True  # both write through the flat views
        lanes = lanes_for(engine, "recur", 26)
        calls = engine.advance(lanes)
        runs[compiled] = (
            [ln.h[0][ln.h[1]] for ln in lanes]
            + [ln.logits[ln.depth] for ln in lanes if ln.depth in engine.readout_slot]
            # the cells, not the trash position padded rows write to
            + [t[..., : engine.capacity, :].clone() for tl in engine.cache.timelines() for t in (tl.k, tl.v)]
        )
        widths = [c.width for c in calls if c.kind == "recur"]
    sizes = engine_mod.fused_chunks(26, engine.widths, engine_mod.STEP_LANES)
    assert widths == [engine.width(n) for n in sizes] and 64 not in widths and len(sizes) > 1
    assert len(runs[True]) == len(runs[False])
    for want, got in zip(runs[False], runs[True]):
        assert_close(got, want)


def test_certify_compile_names_the_compiled_grid_and_refuses_a_user_decoder():
    from proofs.decoders.candidates import fastdec_grid
    from proofs.run.certify import certify

    grid = fastdec_grid(2, full=False, compile=True)
    assert all(c.label.endswith(" compiled") and c.settings["compile"] for c in grid)
    assert not any("compile" in c.settings for c in fastdec_grid(2, full=False))
    with pytest.raises(LoopcertError, match="--compile compiles fastdec"):
        certify("tiny-raven", "some.module:make", compile=True)


def test_the_stamped_command_of_a_compiled_run_reruns_it_compiled():
    """The stamp's command reruns the run: --compile certifies another decoder (fastdec compiled)."""
    import argparse

    from loopcert.commands.certify import add_arguments, command_line

    p = argparse.ArgumentParser()
    add_arguments(p)
    for argv, compiled in ((["tiny-raven", "--compile"], True), (["tiny-raven"], False)):
        line = command_line(p.parse_args(argv), "tiny-raven")
        assert line.startswith("loopcert certify tiny-raven ") and ("--compile" in line.split()) == compiled


@pytest.mark.tier2
def test_prepare_compiles_every_shape_and_changes_no_token():
    """Decoder.prepare compiles the engine's every (phase, width) before decoding (aot_eager here:
    the graphs, not inductor's code); the tokens after it are the eager decoder's, in batches of any
    size, in its two engines (one row; max_batch's rows)."""
    import fastdec.compiled as compiled_mod

    model = tiny(TINY_PRESETS[0], torch.float64)
    dec = fastdec.Decoder(model, "pipelined", compile=True, max_batch=4)
    real = compiled_mod.CompiledPhases.__init__

    def aot_eager(self, engine, backend="inductor"):
        real(self, engine, "aot_eager")

    compiled_mod.CompiledPhases.__init__ = aot_eager
    try:
        assert dec.prepare(40) > 0
        engines = list(dec._engines.values())
        assert sorted(e.rows for e in engines) == [1, 4]
        R = model.cfg.recurrence
        for engine in engines:
            assert set(engine.compiled.fns) == {(k, w) for k in PHASES for w in engine.widths}
            # the prefill's, at the widths fused calls take (FUSE_WIDTH)
            assert set(engine.compiled.fused) == {(w, 0, R) for w in engine.widths if w <= 64}
        n = sum(len(e.compiled.fns) + len(e.compiled.fused) for e in engines)
        eager = fastdec.Decoder(model, "pipelined", max_batch=4)
        V = model.cfg.vocab_size
        prompts = [[t % V for t in range(a, b)] for a, b in ((3, 20), (9, 30), (1, 12))]
        sampling = refdec.SamplingParams(temperature=0.8)
        for b in (1, 3):
            with torch.compiler.set_stance("fail_on_recompile"):  # a graph traced for other calls fails
                got = dec.generate_batch(prompts[:b], 12, sampling, list(range(b)))
            want = eager.generate_batch(prompts[:b], 12, sampling, list(range(b)))
            assert [r.tokens for r in got] == [r.tokens for r in want]
        assert len(dec._engines) == 2  # nothing compiled after prepare:
        assert sum(len(e.compiled.fns) + len(e.compiled.fused) for e in dec._engines.values()) == n
    finally:
        compiled_mod.CompiledPhases.__init__ = real
    assert fastdec.Decoder(model, "pipelined").prepare(40) == 0.0


def test_a_graph_is_called_directly_after_its_trace_and_through_dynamo_when_its_inputs_differ():
    """fastdec.compiled.Graph: the first call traces (dynamo), later calls with the traced names,
    shapes and dtypes run inductor's code directly, giving what the step gives, with an input passed
    through unchanged returned as the very tensor; a call of another shape or set of names goes back
    through dynamo (which retraces it) and still gives the right outputs."""
    from fastdec.compiled import Graph

    w = torch.randn(8, 8, dtype=torch.float64)

    def step(inp):
        return (inp["x"] @ w + inp["b"], inp["b"])

    graph = Graph(step)
    x, b = torch.randn(3, 8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    with torch.inference_mode():
        assert_close(graph({"x": x, "b": b})[0], x @ w + b)
        assert graph.plan is not None  # later calls skip dynamo
        calls = []
        real = graph.dynamo
        graph.dynamo = lambda inp: calls.append(inp) or real(inp)
        x2 = torch.randn(3, 8, dtype=torch.float64)
        out, passed = graph({"x": x2, "b": b})
        assert_close(out, x2 @ w + b)
        assert passed is b and not calls
        w.mul_(2)  # a tensor the graph holds, updated in place (as the engine's cache): read live
        assert_close(graph({"x": x2, "b": b})[0], x2 @ w + b)
        assert not calls
        x3 = torch.randn(5, 8, dtype=torch.float64)  # another shape: through dynamo
        assert_close(graph({"x": x3, "b": b})[0], x3 @ w + b)
        assert len(calls) == 1
        assert_close(graph({"x": x, "b": b})[0], x @ w + b)  # the traced shape again: direct, its own code
        assert len(calls) == 1
        assert_close(graph({"b": b, "x": x2})[0], x2 @ w + b)  # the names in another order
        assert len(calls) == 2
        graph.dynamo = real


def test_small_matmuls_compile_to_loops_and_larger_ones_to_aten():
    """small_matmuls rewrites dynamo's graph: F.linear (with and without bias), `@` and bmm of at
    most SMALL_MM_ROWS rows (bmm: SMALL_BMM_ROWS in all) become loops (no ATen matmul in the
    generated code), larger ones do not; both agree with eager within float32's tolerance. Negative
    control: the same graph without the rewrite calls ATen's matmul. And the rewritten graph is one
    inductor's cache keys: compiled again after dynamo forgets it, it is a cache hit."""
    from torch._dynamo.utils import counters
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.utils import run_and_get_code

    from fastdec.compiled import INDUCTOR_OPTIONS, SMALL_BMM_ROWS, SMALL_MM_ROWS, small_matmuls

    g = torch.Generator().manual_seed(0)
    w, bias = torch.randn(48, 32, generator=g), torch.randn(48, generator=g)
    head, kv = torch.randn(32, 40, generator=g), torch.randn(2, 16, 32, generator=g)

    def step(x):  # x (M, 32): linears without and with bias, a matmul, a bmm over two heads
        q = torch.nn.functional.linear(x, w) + torch.nn.functional.linear(x, w, bias)
        return q, x @ head, torch.bmm(x.expand(2, -1, -1), kv.transpose(1, 2))

    def compiled(rewrite: bool):
        def backend(gm, ex):
            if rewrite:
                m = ex[0].shape[0]  # 3 matmuls of m rows, a bmm of 2m
                assert small_matmuls(gm) == 3 * (m <= SMALL_MM_ROWS) + (2 * m <= SMALL_BMM_ROWS)
            return compile_fx(gm, ex, config_patches=dict(INDUCTOR_OPTIONS))

        return torch.compile(step, fullgraph=True, dynamic=False, backend=backend)

    cases = ((SMALL_MM_ROWS, True, False), (SMALL_MM_ROWS + 1, True, True), (1, False, True))
    for rows, rewrite, calls_aten in cases:
        torch._dynamo.reset()
        x = torch.randn(rows, 32, generator=g)
        with torch.inference_mode():
            out, code = run_and_get_code(compiled(rewrite), x)
        for a, b in zip(out, step(x)):
            assert_close(a, b)
        text = "\n".join(code)
        assert ("mm_out" in text or "extern_kernels." in text) == calls_aten, (rows, rewrite)
    torch._dynamo.reset()
    hits = counters["inductor"]["fxgraph_cache_hit"]
    with torch.inference_mode():
        compiled(True)(torch.randn(SMALL_MM_ROWS, 32, generator=g))
    assert counters["inductor"]["fxgraph_cache_hit"] == hits + 1


@pytest.fixture
def short_chains(monkeypatch):
    """Chains of 3 tokens on the tiny models (R = 2): what a chain does at a third of the tracing."""
    import fastdec.engine as engine_mod

    monkeypatch.setattr(engine_mod, "CHAIN_RECURRENCES", 6)


@pytest.mark.tier2
def test_greedy_chains_decode_the_eager_tokens(aot_eager, short_chains):
    """A compiled autoregressive decoder decodes a lone plain-greedy sequence in chains of
    Engine.chain_length tokens (one graph, each token the argmax of the last), compiled by prepare:
    the float64 tokens and the logits they were decided on are the eager decoder's, with a tail
    shorter than a chain, a chain past the cache's capacity (64 positions: its last lanes write
    the trash position) and a run of 3 tokens; nothing compiles after prepare."""
    model = tiny(TINY_LOOPCODER, torch.float64)
    eager = fastdec.Decoder(model, "autoregressive")
    compiled = fastdec.Decoder(model, "autoregressive", compile=True, max_batch=1)
    assert compiled.prepare(64) > 0
    (engine,) = compiled._engines.values()
    assert engine.chain_length == 3 and set(engine.compiled.chains) == {(1, 3)}
    fused = set(engine.compiled.fused)
    for prompt_len, n in ((20, 24), (20, 44), (5, 3)):
        prompt = list(range(5, 5 + prompt_len))
        want = eager.generate(prompt, n, refdec.SamplingParams(), seed=0, keep_logits=True)
        with torch.compiler.set_stance("fail_on_recompile"):
            got = compiled.generate(prompt, n, refdec.SamplingParams(), seed=0, keep_logits=True)
        assert got.tokens == want.tokens
        for a, b in zip(got.target_logits, want.target_logits):
            assert_close(a, b)
        # the n - 1 tokens after the prefill's: chains of 3 while 2 or more are to come, then one lane
        chains, rest = divmod(n - 1, 3)
        chains, singles = (chains + 1, 0) if rest == 2 else (chains, rest)
        assert got.stats.calls["prelude"][1] == 3 * chains + singles
    assert set(engine.compiled.fused) == fused and list(compiled._engines.values()) == [engine]


@pytest.mark.tier2
def test_a_chain_proposal_the_host_does_not_draw_is_thrown_away(aot_eager, short_chains, monkeypatch):
    """The chain's negative control: proposals made wrong on purpose (argmax + 1) are never
    committed; the host's draw decides every token, so the tokens are still the eager decoder's
    (each chain then commits one token), and an EOS the eager run emits ends the run there."""
    model = tiny(TINY_LOOPCODER, torch.float64)
    prompt = list(range(5, 25))
    V = model.cfg.vocab_size
    eager = fastdec.Decoder(model, "autoregressive")
    want = eager.generate(prompt, 20, refdec.SamplingParams(), seed=0).tokens
    real = Engine.chain_fn

    def wrong(self, k, inp):
        tokens, logits = real(self, k, inp)
        return (tokens + 1) % V, logits

    monkeypatch.setattr(Engine, "chain_fn", wrong)
    compiled = fastdec.Decoder(model, "autoregressive", compile=True)
    got = compiled.generate(prompt, 20, refdec.SamplingParams(), seed=0)
    assert got.tokens == want
    # a chain (3 lanes) per token after the first while two or more are to come, then one lane
    assert got.stats.calls["prelude"][1] == 3 * 18 + 1
    eos = want[10]
    cut = eager.generate(prompt, 20, refdec.SamplingParams(), seed=0, eos_token_id=eos).tokens
    assert compiled.generate(prompt, 20, refdec.SamplingParams(), seed=0, eos_token_id=eos).tokens == cut


@pytest.mark.tier2
def test_chains_are_only_for_a_lone_plain_greedy_sequence(aot_eager):
    """Sampling, a greedy law with a processor (a repetition penalty) and a batch of two decode
    without chains (the host's draw is then not the logits' argmax, or other sequences share the
    call), with the eager decoder's tokens; a fixed-width engine has none."""
    model = tiny(TINY_LOOPCODER, torch.float64)
    prompt = list(range(5, 25))
    eager = fastdec.Decoder(model, "autoregressive", max_batch=2)
    compiled = fastdec.Decoder(model, "autoregressive", compile=True, max_batch=2)
    for sampling, b in (
        (refdec.SamplingParams(temperature=0.8), 1),
        (refdec.SamplingParams(repetition_penalty=1.3), 1),
        (refdec.SamplingParams(), 2),
    ):
        prompts = [prompt, prompt[3:]][:b]
        want = eager.generate_batch(prompts, 12, sampling, list(range(b)))
        got = compiled.generate_batch(prompts, 12, sampling, list(range(b)))
        assert [r.tokens for r in got] == [r.tokens for r in want]
    assert not any(e.compiled.chains for e in compiled._engines.values())
    assert Engine(model, 2, [2], capacity=64, compiled=True).chain_length == 8
    assert Engine(model, 2, [2], capacity=64, compiled=True, fixed_width=8).chain_length == 0
    assert Engine(model, 2, [1, 2], capacity=64, compiled=True).chain_length == 0  # another readout


def test_a_graph_compiled_before_without_the_decomposition_is_not_served():
    """AOT autograd's cache keys a graph without the decomposition table (torch 2.13): the same step
    compiled first by a plain torch.compile (ATen matmuls) must not be served to a Graph, whose code
    has no ATen matmul at one row. Negative control: the plain compile's code has one."""
    from torch._inductor.utils import run_and_get_code

    from fastdec.compiled import INDUCTOR_OPTIONS, Graph

    w = torch.randn(48, 32, generator=torch.Generator().manual_seed(1))

    def step(inp):
        return (torch.nn.functional.linear(inp["x"], w).relu(),)

    x = torch.randn(1, 32)
    plain = torch.compile(step, fullgraph=True, dynamic=False, options=dict(INDUCTOR_OPTIONS))
    with torch.inference_mode():
        _, code = run_and_get_code(plain, {"x": x})
        assert "mm_out" in "\n".join(code) or "extern_kernels." in "\n".join(code)
        torch._dynamo.reset()
        out, code = run_and_get_code(Graph(step), {"x": x})
    text = "\n".join(code)
    assert "mm_out" not in text and "extern_kernels." not in text
    assert_close(out[0], step({"x": x})[0])


@pytest.mark.tier2
def test_a_process_compiles_past_dynamos_limit_on_one_code_objects_graphs(monkeypatch):
    """Every compiled engine traces the same `step`: dynamo caps the graphs of one code object over all
    its caches (accumulated_recompile_limit, 256 in torch 2.13), and `loopcert bench --compile`'s
    dozens of decoders passed it (FailOnRecompileLimitHit at the next graph). Compiling raises the
    cap (fastdec.compiled.ACCUMULATED_LIMIT): set to 2 here, six graphs compile."""
    import torch._dynamo.config as dynamo_config

    import fastdec.compiled as compiled_mod

    names = [
        n
        for n in ("accumulated_recompile_limit", "accumulated_cache_size_limit")
        if hasattr(dynamo_config, n)
    ]
    for name in names:
        monkeypatch.setattr(dynamo_config, name, 2)
    model = tiny(TINY_PRESETS[0])
    R = model.cfg.recurrence
    engine = Engine(model, R, [R], capacity=64, reads="gather", rows=1)
    phases = CompiledPhases(engine, backend="aot_eager")
    for width in (1, 2):
        for kind in PHASES:
            inp, _, _ = engine.phase_inputs(kind, lanes_for(engine, kind, width), width)
            with torch.inference_mode():
                phases.run(kind, inp)
    assert len(phases.fns) == 6
    assert names and all(getattr(dynamo_config, n) == compiled_mod.ACCUMULATED_LIMIT for n in names)
