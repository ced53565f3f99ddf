"""CUDA graphs for the engine's phases (docs/design.md section 5). The only module that captures.

One graph per (phase, width) of an Engine, captured on first use and replayed after:

- static buffers: the call's inputs (token ids or states, positions, levels, write addresses,
  side slots) are copied into per-graph static tensors; the cache, RoPE and initial-state
  tables are the engine's own, allocated once, so their addresses never move;
- one memory pool shared by all graphs of the engine; replays run one after another on one
  stream, so graphs may reuse each other's intermediates;
- outputs are cloned out of the graph's static outputs before the next replay can touch them;
- no host sync in a captured region: the captured function is `Engine.phase_fn` with
  plan=None, which reads the cache by index tensors (gather) instead of host-computed views
  and has no data-dependent shapes or `.item()`;
- RNG: nothing random runs on the device. Every uniform (drafts, acceptance, residual draws)
  is drawn on the host from the run's CPU torch.Generator after the logits are copied out, so
  a replay can neither consume nor skip a draw: graphed sampling equals eager sampling.

Warm-up runs before capture execute the call for real on a side stream; they write exactly
the cache rows the replay writes again (same inputs, same values), so they change nothing.
"""

from __future__ import annotations

import torch

from refdec.errors import LoopcertError


class CudaGraphs:
    def __init__(self, engine):
        if not torch.cuda.is_available() or engine.device.type != "cuda":
            raise LoopcertError("CUDA graphs need a CUDA device")
        self.engine = engine
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs: dict[tuple[str, int], tuple] = {}  # (phase, width) -> (graph, static in, static out)
        self.captures = 0
        self.replays = 0

    def run(self, kind: str, inp: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        key = (kind, inp["pos"].shape[0])
        if key not in self.graphs:
            self.graphs[key] = self._capture(kind, inp)
        graph, static_in, static_out = self.graphs[key]
        for name, t in inp.items():
            static_in[name].copy_(t, non_blocking=True)
        graph.replay()
        self.replays += 1
        return tuple(o.clone() for o in static_out)

    def _capture(self, kind: str, inp: dict[str, torch.Tensor]):
        static_in = {name: t.clone() for name, t in inp.items()}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: lazy initialisation stays out of the capture
            for _ in range(2):
                self.engine.phase_fn(kind, static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            static_out = self.engine.phase_fn(kind, static_in)
        self.captures += 1
        return graph, static_in, static_out
