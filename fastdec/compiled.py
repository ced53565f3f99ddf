"""Compiled engine steps (docs/design.md section 5; docs/speed.md#compiled-steps). The only module
that calls torch.compile.

A step of a small looped model is a few small matmuls: eager PyTorch spends most of it in Python
and operator dispatch. On a GPU the answer is CUDA graphs of `Engine.phase_fn` (fastdec/graphs.py);
on a CPU it is the same function compiled by inductor into C++ kernels, one compiled callable per
(phase, width) of an engine, with the preconditions the graphs need:

- static shapes: `dynamic=False`, every call of a (phase, width) has the same shapes (the engine
  pads rows to its widths, and in gather mode every read spans the capacity);
- one graph: `fullgraph=True`, so a host sync or a data-dependent shape is an error at compile time,
  never a silent fall back to eager (tests/fastdec/test_compiled.py compiles every (phase, width)
  for each family: the CUDA-graph path's preconditions, tested without a GPU);
- the cache read by index tensors (`plan=None`, the engine's gather reads), written in place;
- nothing random inside: every draw happens on the host after the logits come out, as under
  graphs, so a compiled decoder draws exactly the uniforms an eager one draws.

Fused steps. A strategy's Step with `to` (the prefill, autoregressive's token, draft-verify's
drafts and deepening: lanes at one depth going to another) runs as ONE graph per (width, from
depth, to depth), `Engine.fused_fn`: the prelude, every recurrence and every readout on the way,
the levels constants, no side-slot work; eager engines run the same Steps call by call, as before.
A token of autoregressive decoding is then one compiled call instead of 2 + R. What else keeps a
graph short: the cache is written and read through flat (N, D) views of its buffers with
index_put_ (inductor updates a mutated graph input in place; `index_copy_` into a view of one it
turned into a copy of the whole buffer and a copy back, per write), calls of engines without side
slots carry no side work, and inductor's C++ wrapper (`cpp_wrapper`) runs the kernels and the
matmuls without a Python line per op. Fixed-width mode runs no fused graph: its claim is bitwise
equality among strategies, and a fused graph's kernels need not round as the per-phase ones do.

Greedy chains (Engine.chain, one graph per (width, tokens)): a lone plain-greedy autoregressive
sequence's next tokens, each the argmax of the one before's logits inside the graph; the host
decides every token from the logits and keeps a lane only if it read the token committed before it.

Dynamo once, then the compiled code. A graph is traced by torch.compile (dynamo: fullgraph, static
shapes) on its first call; later calls go straight into the code inductor made of it (`Graph`):
dynamo's entry (its cache lookup, a guard on every input, parameter and cache buffer, the frame's
bookkeeping) cost ~1/5 of a tiny model's token, more than its kernels' arithmetic. The engine calls
a graph with inputs of one set of names, shapes and dtypes, and every other tensor the graph reads
(parameters, cache buffers, rope tables) is one the engine made once and never rebinds, so the
trace's guards hold on every later call; the direct call checks what can differ cheaply (the input
names, shapes and dtypes) and sends any other call back through dynamo (which retraces or raises).

Small matmuls as generated loops. A token's matmuls have one row per lane: through ATen each is an
MKL call (~4 us with its argument checks, and a copy of an input whose unit dimension has stride 0)
for a few thousand multiply-adds. Matmuls of at most SMALL_MM_ROWS rows (the attention's bmm: at
most SMALL_BMM_ROWS in all) are rewritten in dynamo's graph into a product and a sum
(`small_matmuls`), which inductor compiles into its own vectorized loops, fused with the
normalization before them and the activation after; larger ones stay ATen's (MKL's blocking wins).

Compiled kernels may round differently from eager ones (fused reductions): a compiled decoder's
logits are not bitwise an eager decoder's, so the claim is the certificate's (greedy classified
against float64 refdec, sampling laws), plus bitwise equality among compiled strategies in
fixed-width mode (the same compiled kernels at the same width).

Compiling costs seconds per graph (measured in docs/measurements.md#compiled-steps); inductor's
on-disk caches make a second process pay only the tracing: they live in $TORCHINDUCTOR_CACHE_DIR,
which this module points at ~/.cache/loopcert/inductor (or $XDG_CACHE_HOME/loopcert/inductor) when
the user has not set it, so they survive a reboot's /tmp cleanup.
"""

from __future__ import annotations

import inspect
import os
import time
from pathlib import Path

import torch

from refdec.errors import LoopcertError

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
# graphs per engine: up to 3 phases x the engine's widths (7 for one sequence, more in a batch)
RECOMPILE_LIMIT = 64
# graphs of one code object in a process, all engines together (dynamo's accumulated limit)
ACCUMULATED_LIMIT = 64 * RECOMPILE_LIMIT
# inductor's options: its C++ wrapper calls the kernels (a Python wrapper costs ~1 us per op, and
# a fused step has a few hundred); measured on the tiny Nanbeige: docs/measurements.md#compiled-steps
INDUCTOR_OPTIONS = {"cpp_wrapper": True}
# matmuls (mm, addmm) of at most this many rows become inductor's loops, not MKL calls: one row
# per lane, so a batch-1 token's, a 4-token draft's (docs/measurements.md#compiled-steps); and the
# attention's bmm of at most SMALL_BMM_ROWS rows in all (heads x rows): a batch-1 token's heads.
# Wider ones stay ATen's: rewritten, a batch of 16's attention made compiled decoding slower than eager
SMALL_MM_ROWS = 4
SMALL_BMM_ROWS = 16


def compile_cache_dir() -> Path:
    """Where inductor keeps its compiled kernels: $TORCHINDUCTOR_CACHE_DIR when the user set it,
    else ~/.cache/loopcert/inductor/CAPABILITY (set into the environment, which inductor reads when
    it first compiles). CAPABILITY is $ATEN_CPU_CAPABILITY (or "native"): inductor 2.13's cache key
    leaves it out, and a process under ATEN_CPU_CAPABILITY=default reusing another's precompiled
    header fails to build its kernels ("'at::vec' has not been declared"), as `tox -e portable`
    beside `tox -e py` did."""
    if USER_CACHE:
        return Path(USER_CACHE)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = base / "loopcert" / "inductor" / (os.environ.get("ATEN_CPU_CAPABILITY") or "native")
    os.environ[CACHE_ENV] = str(path)
    return path


# read once, when fastdec.compiled is first imported (Engine imports it for a compiled engine, before
# any compile): inductor writes the variable itself on its first use, after which a value there no
# longer says that the user chose it
USER_CACHE = os.environ.get(CACHE_ENV)


def _compile_kwargs() -> dict:
    """torch.compile's options: one cache of graphs per compiled callable where this torch has
    `isolate_recompiles` (2.10+: an engine's graphs never evict another engine's); on older
    torch (>= 2.4) dynamo's global limit on graphs per code object is raised instead, since every
    (phase, width) of every engine compiles the same `phase_fn`. On every torch, dynamo's limit on
    the graphs of one code object summed over all its caches (accumulated_recompile_limit, 256 in
    2.13) is raised to ACCUMULATED_LIMIT: every compiled decoder of a process traces the same `step`,
    and `loopcert bench --compile` builds dozens of them (past 256 graphs the next one failed with
    FailOnRecompileLimitHit)."""
    import torch._dynamo.config as dynamo_config

    for name in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), ACCUMULATED_LIMIT))
    params = inspect.signature(torch.compile).parameters
    if "isolate_recompiles" in params and "recompile_limit" in params:
        return {"isolate_recompiles": True, "recompile_limit": RECOMPILE_LIMIT}
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), 8 * RECOMPILE_LIMIT))
    return {}


def no_host_values():
    """Dynamo's settings while a phase is traced: a tensor's value read on the host (`.item()`,
    `int(t)`, a shape from `nonzero`) is a graph break, hence an error under fullgraph, instead of
    an unbacked symbol traced into the graph (torch >= 2.6 may capture them): a CUDA graph could not
    replay such a call, and on a CPU it would stall every step."""
    import torch._dynamo.config as dynamo_config

    flags = {
        name: False
        for name in ("capture_scalar_outputs", "capture_dynamic_output_shape_ops")
        if hasattr(dynamo_config, name)
    }
    return dynamo_config.patch(**flags)


class CompiledPhases:
    """One compiled `phase_fn` per (phase, width) of an engine, compiled on first use.

    backend: torch.compile's ("inductor": C++ kernels; "aot_eager": the same tracing without code
    generation, which the precondition test uses to check every graph quickly)."""

    def __init__(self, engine, backend: str = "inductor"):
        if engine.reads != "gather":
            raise LoopcertError("compiled steps read the cache by index (reads='gather')")
        self.engine, self.backend = engine, backend
        for tl in engine.cache.timelines():  # writes inductor can do in place (Timeline.write_at)
            tl.put = True
        compile_cache_dir()
        self.fns: dict[tuple[str, int], object] = {}
        self.fused: dict[tuple[int, int, int], object] = {}  # (width, from depth, to depth) -> graph
        self.chains: dict[tuple[int, int], object] = {}  # (width, tokens) -> graph (Engine.chain_fn)
        self.compile_seconds: dict[tuple[str, int], float] = {}  # (phase, width) -> its first call
        self.calls = 0

    def run(self, kind: str, inp: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        key = (kind, inp["pos"].shape[0])
        fn = self.fns.get(key)
        self.calls += 1
        if fn is not None:
            return fn(inp)
        fn = self.fns[key] = self._compile(kind)
        t0 = time.perf_counter()
        with no_host_values():  # the first call traces
            out = fn(inp)
        self.compile_seconds[key] = time.perf_counter() - t0
        return out

    def run_fused(self, d0: int, to: int, inp: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """Engine.fused_fn(d0, to, inp), one compiled graph per (width, d0, to)."""
        engine = self.engine
        key = (inp["pos"].shape[0], d0, to)
        return self._run(self.fused, "fused", key, lambda inp: engine.fused_fn(d0, to, inp), inp)

    def run_chain(self, k: int, inp: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Engine.chain_fn(k, inp), one compiled graph per (width, k)."""
        engine = self.engine
        key = (inp["pos"].shape[0], k)
        return self._run(self.chains, "chain", key, lambda inp: engine.chain_fn(k, inp), inp)

    def _run(self, graphs: dict, label: str, key: tuple, step, inp: dict[str, torch.Tensor]):
        """graphs[key](inp), compiling `step` into graphs[key] on its first call (timed)."""
        fn = graphs.get(key)
        self.calls += 1
        if fn is not None:
            return fn(inp)
        fn = graphs[key] = self._wrap(step)
        t0 = time.perf_counter()
        with no_host_values():
            out = fn(inp)
        self.compile_seconds[(label, *key)] = time.perf_counter() - t0
        return out

    def _compile(self, kind: str):
        engine = self.engine

        def step(inp: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
            return engine.phase_fn(kind, inp)

        return self._wrap(step)

    def _wrap(self, step):
        if self.backend == "inductor":
            return Graph(step)
        return torch.compile(step, fullgraph=True, dynamic=False, backend=self.backend, **_compile_kwargs())

    def warm(self) -> float:
        """Compile every (phase, width) of the engine not compiled yet, by calls on placeholder
        lanes (zero states, main line, every row); -> the seconds it took. The calls write cache
        slots that no committed position owns (the caller drops what it held: Decoder.prepare)."""
        t0 = time.perf_counter()
        engine = self.engine
        # as Engine.run_phase calls them: inputs made in inference mode are inference tensors, and
        # a graph traced on others would not serve the real calls (dynamo guards on it)
        with torch.inference_mode():
            for width in engine.widths:
                for kind in engine.phases:
                    if (kind, width) not in self.fns:
                        lanes = engine.placeholder_lanes(kind, width)
                        self.run(kind, engine.phase_inputs(kind, lanes, width)[0])
            if engine.fixed_width is None:  # fused graphs (fixed-width mode runs none)
                for width in (w for w in engine.widths if w <= engine.fuse_width):
                    for d0, to in engine.fused_spans:
                        if (width, d0, to) not in self.fused:
                            engine.fused_placeholder(width, d0, to)
                if engine.chain_length and (1, engine.chain_length) not in self.chains:
                    engine.chain_placeholder()
        return time.perf_counter() - t0

    @property
    def total_compile_seconds(self) -> float:
        return sum(self.compile_seconds.values())


def small_matmuls(gm: torch.fx.GraphModule) -> int:
    """Rewrite dynamo's graph in place: F.linear and `@` of at most SMALL_MM_ROWS rows, and bmm of at
    most SMALL_BMM_ROWS rows in all (float32 or float64), become a broadcast product and a sum over
    the inner dimension, which inductor compiles into its own loops. A rewrite of the graph, not a
    decomposition table handed to inductor: the compile caches key the graph, and a custom table
    made inductor skip its cache (the table cannot be pickled into a key). -> matmuls rewritten."""
    import operator

    linears = {torch.nn.functional.linear, torch._C._nn.linear}
    matmuls = {operator.matmul, torch.matmul}
    graph, done = gm.graph, 0

    def value(arg):
        v = arg.meta.get("example_value") if isinstance(arg, torch.fx.Node) else None
        ok = isinstance(v, torch.Tensor) and v.dtype in (torch.float32, torch.float64)
        return v if ok else None

    for node in list(graph.nodes):
        if node.op != "call_function" or node.kwargs and node.target not in linears:
            continue
        args = list(node.args)
        if node.target in linears and len(args) >= 2:
            x, w = value(args[0]), value(args[1])
            bias = args[2] if len(args) > 2 else node.kwargs.get("bias")
            if x is None or w is None or w.dim() != 2 or x.shape[:-1].numel() > SMALL_MM_ROWS:
                continue
            with graph.inserting_before(node):  # (..., 1, K) * (N, K) -> sum over K
                prod = graph.call_function(
                    torch.mul, (graph.call_method("unsqueeze", (args[0], -2)), args[1])
                )
                out = graph.call_function(torch.sum, (prod, -1))
                if bias is not None:
                    out = graph.call_function(torch.add, (out, bias))
        elif node.target in matmuls and len(args) == 2:
            a, b = value(args[0]), value(args[1])
            if a is None or b is None or b.dim() != 2 or a.dim() < 2 or a.shape[:-1].numel() > SMALL_MM_ROWS:
                continue
            with graph.inserting_before(node):  # (..., K, 1) * (K, N) -> sum over K
                prod = graph.call_function(
                    torch.mul, (graph.call_method("unsqueeze", (args[0], -1)), args[1])
                )
                out = graph.call_function(torch.sum, (prod, -2))
        elif node.target is torch.bmm and len(args) == 2:
            a, b = value(args[0]), value(args[1])
            if a is None or b is None or a.shape[:-1].numel() > SMALL_BMM_ROWS:
                continue
            with graph.inserting_before(node):  # (B, M, K, 1) * (B, 1, K, N) -> sum over K
                left = graph.call_method("unsqueeze", (args[0], -1))
                right = graph.call_method("unsqueeze", (args[1], -3))
                out = graph.call_function(torch.sum, (graph.call_function(torch.mul, (left, right)), -2))
        else:
            continue
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        done += 1
    if done:
        graph.lint()
        gm.recompile()
    return done


class Graph:
    """One compiled step (a phase at one width, or a fused span): dynamo traces it on the first call,
    and later calls run inductor's compiled code directly (the module's docstring says why it is
    safe). Falls back to torch.compile's own call (every call through dynamo) where this torch's
    inductor has no `compile_fx` of this form."""

    def __init__(self, step):
        # the compiled code of dynamo's latest trace, its inputs and what it returned (the backend
        # records them; the first call's become the plan, later retraces' are never called directly)
        self.traced: tuple | None = None
        self.plan: _Plan | None = None
        backend = self._inductor if _inductor_compile() is not None else "inductor"
        kw = _compile_kwargs()
        if backend == "inductor":
            kw["options"] = dict(INDUCTOR_OPTIONS)
        self.dynamo = torch.compile(step, fullgraph=True, dynamic=False, backend=backend, **kw)

    def _inductor(self, gm, example_inputs):
        small_matmuls(gm)
        code = _inductor_compile()(gm, example_inputs, config_patches=dict(INDUCTOR_OPTIONS))
        record = [code, list(example_inputs), None]  # the outputs once it has run

        def traced(*args):
            out = code(*args)
            record[2] = list(out)
            return out

        self.traced = record
        return traced

    def __call__(self, inp: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        plan = self.plan
        if plan is not None and plan.accepts(inp):
            out = plan.code(*[t if k is None else inp[k] for k, t in plan.args])
            return tuple(out[j] if k is None else inp[k] for k, j in plan.outs)
        out = self.dynamo(inp)  # the first call (dynamo traces), or one the plan does not accept
        if plan is None and self.traced is not None:
            self.plan = _Plan.of(inp, *self.traced, out)
        self.traced = None
        return out


class _Plan:
    """How one graph's direct call is made: its arguments (an input's name, or a tensor the engine
    holds), its outputs (a position in the compiled code's outputs, or an input passed through), and
    the names, shapes and dtypes of the inputs it was traced for."""

    def __init__(self, code, args, outs, shapes):
        self.code, self.args, self.outs, self.shapes = code, args, outs, shapes
        self.names = [name for name, _, _ in shapes]

    @classmethod
    def of(cls, inp, code, traced, graph_outs, outs) -> _Plan | None:
        """None where the trace does not map onto names and identities (the call stays dynamo's)."""
        if graph_outs is None:
            return None
        names = {id(t): k for k, t in inp.items()}
        args = [(names.get(id(t)), t if id(t) not in names else None) for t in traced]
        where = []
        for o in outs:
            j = next((j for j, g in enumerate(graph_outs) if g is o), None)
            if j is not None:
                where.append((None, j))
            elif id(o) in names:
                where.append((names[id(o)], None))
            else:
                return None
        return cls(code, args, where, [(k, t.shape, t.dtype) for k, t in inp.items()])

    def accepts(self, inp) -> bool:
        if list(inp) != self.names:
            return False
        return all(inp[k].shape == shape and inp[k].dtype == dtype for k, shape, dtype in self.shapes)


def _inductor_compile():
    """inductor's compile_fx, or None on a torch without it in this form."""
    try:
        from torch._inductor.compile_fx import compile_fx
    except ImportError:
        return None
    return compile_fx if "config_patches" in inspect.signature(compile_fx).parameters else None
