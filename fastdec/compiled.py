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
# inductor's options: its C++ wrapper calls the kernels (a Python wrapper costs ~1 us per op, and
# a fused step has a few hundred); measured on the tiny Nanbeige: docs/measurements.md#compiled-steps
INDUCTOR_OPTIONS = {"cpp_wrapper": True}


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
    (phase, width) of every engine compiles the same `phase_fn`."""
    params = inspect.signature(torch.compile).parameters
    if "isolate_recompiles" in params and "recompile_limit" in params:
        return {"isolate_recompiles": True, "recompile_limit": RECOMPILE_LIMIT}
    import torch._dynamo.config as dynamo_config

    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), 8 * RECOMPILE_LIMIT))
    if hasattr(dynamo_config, "accumulated_cache_size_limit"):
        dynamo_config.accumulated_cache_size_limit = max(
            dynamo_config.accumulated_cache_size_limit, 64 * RECOMPILE_LIMIT
        )
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
        key = (inp["pos"].shape[0], d0, to)
        fn = self.fused.get(key)
        self.calls += 1
        if fn is not None:
            return fn(inp)
        engine = self.engine

        def step(inp: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
            return engine.fused_fn(d0, to, inp)

        fn = self.fused[key] = self._wrap(step)
        t0 = time.perf_counter()
        with no_host_values():
            out = fn(inp)
        self.compile_seconds[("fused", *key)] = time.perf_counter() - t0
        return out

    def _compile(self, kind: str):
        engine = self.engine

        def step(inp: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
            return engine.phase_fn(kind, inp)

        return self._wrap(step)

    def _wrap(self, step):
        kw = _compile_kwargs()
        if self.backend == "inductor" and INDUCTOR_OPTIONS:
            kw["options"] = dict(INDUCTOR_OPTIONS)
        return torch.compile(step, fullgraph=True, dynamic=False, backend=self.backend, **kw)

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
        return time.perf_counter() - t0

    @property
    def total_compile_seconds(self) -> float:
        return sum(self.compile_seconds.values())
