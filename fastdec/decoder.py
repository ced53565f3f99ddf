"""fastdec.Decoder: the public API. Validates settings, owns one Engine per cache capacity."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from fastdec.accept import GATES
from fastdec.engine import WIDTHS, Engine
from fastdec.stats import Stats
from fastdec.strategies import Run
from refdec.decode import check_generate_args
from refdec.errors import LoopcertError
from refdec.io import parse_dtype
from refdec.model import LoopedLM
from refdec.sampling import SamplingParams

STRATEGIES = ("autoregressive", "draft-verify", "pipelined", "adaptive-verify")
LOSSLESS = {"autoregressive": True, "draft-verify": True, "pipelined": True, "adaptive-verify": False}
FIXED_WIDTHS = WIDTHS  # fixed_width must be one of these
MIN_CAPACITY = 64  # cache capacities are powers of two >= this: few distinct shapes (CUDA graphs)


@dataclass
class GenerateResult:
    tokens: list[int]  # the new token ids (EOS included when it ended the run)
    stats: Stats
    target_logits: list[torch.Tensor] | None = None  # (V,) logits each token was decided on


def _int(name: str, v, lo: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or (lo is not None and v < lo):
        raise LoopcertError(f"{name} must be an integer{f' >= {lo}' if lo is not None else ''}, got {v!r}")
    return v


def capacity_for(n_positions: int) -> int:
    c = MIN_CAPACITY
    while c < n_positions:
        c *= 2
    return c


class Decoder:
    """Fast self-speculative decoder for a refdec.LoopedLM.

    strategy       "autoregressive" | "draft-verify" | "pipelined" | "adaptive-verify" (lossy)
    depth          target depth R (default the model's recurrence; may exceed it)
    draft_depth    d1 < depth (default max(1, depth // 4)); ignored by autoregressive
    second_depth   d2, d1 < d2 < depth: LoopSpec's second proposal (pipelined only)
    gate           True (LoopSpec gate), False (always propose when q2 has mass), "inverted"
                   (lossless control: propose exactly when the gate is closed)
    draft_ahead    tokens drafted per round (draft-verify, adaptive-verify), >= 1
    rewind_depth   rewind telemetry depth in [1, depth]; adaptive-verify's verify depth
                   (default 2*d1), which must lie strictly between d1 and depth
    draft_filter   False: drafts use the temperature but no top-k / top-p (a lossless control:
                   acceptance always uses the law the draft was drawn from)
    fixed_width    run every engine call at this width (bitwise batch invariance mode)
    cuda_graphs    None: on for CUDA devices; True needs CUDA
    telemetry_depths  extra rewind-telemetry depths in [1, depth] (reports: Stats.rewind_at); each
                   adds a readout depth, so it costs time: never set it in a timed run
    reads          "view" (strided views, eager) or "gather" (index gather, what graphs use)
    """

    def __init__(self, model: LoopedLM, strategy: str = "autoregressive", draft_depth: int | None = None,
                 second_depth: int | None = None, gate: bool | str = True, draft_ahead: int = 4,
                 depth: int | None = None, rewind_depth: int | None = None, device="cpu", dtype=None,
                 fixed_width: int | None = None, draft_filter: bool = True, cuda_graphs: bool | None = None,
                 reads: str = "view", telemetry_depths=()):
        if not isinstance(model, LoopedLM):
            raise LoopcertError(f"model must be a refdec.LoopedLM, got {type(model).__name__}")
        if strategy not in STRATEGIES:
            raise LoopcertError(f"unknown strategy {strategy!r}; choose one of {STRATEGIES}")
        depth = _int("depth", model.cfg.recurrence if depth is None else depth, 1)
        speculative = strategy != "autoregressive"
        if speculative:
            draft_depth = _int("draft_depth", max(1, depth // 4) if draft_depth is None else draft_depth, 1)
            if draft_depth >= depth:
                raise LoopcertError(f"draft_depth={draft_depth} must be < depth={depth}")
        elif draft_depth is not None:
            draft_depth = _int("draft_depth", draft_depth, 1)  # unused by autoregressive
        if second_depth is not None:
            second_depth = _int("second_depth", second_depth, 1)
            if strategy != "pipelined":
                raise LoopcertError(f"second_depth={second_depth} applies to strategy 'pipelined' only, "
                                    f"not {strategy!r}")
            if not draft_depth < second_depth < depth:
                raise LoopcertError(f"second_depth={second_depth} must satisfy draft_depth={draft_depth} "
                                    f"< second_depth < depth={depth}")
        if not (gate is True or gate is False or (isinstance(gate, str) and gate in GATES)):
            raise LoopcertError(f"gate must be True, False or one of {GATES}, got {gate!r}")
        draft_ahead = _int("draft_ahead", draft_ahead, 1)
        if rewind_depth is not None:
            rewind_depth = _int("rewind_depth", rewind_depth)
            if not 1 <= rewind_depth <= depth:
                raise LoopcertError(f"rewind_depth={rewind_depth} must be in [1, depth={depth}]")
        try:
            telemetry_depths = tuple(sorted({_int("telemetry depth", d) for d in telemetry_depths}))
        except TypeError:
            raise LoopcertError(f"telemetry_depths must be a sequence of depths, "
                                f"got {telemetry_depths!r}") from None
        if any(not 1 <= d <= depth for d in telemetry_depths):
            raise LoopcertError(f"telemetry_depths={telemetry_depths} must lie in [1, depth={depth}]")
        verify_depth = None
        if strategy == "adaptive-verify":
            verify_depth = rewind_depth if rewind_depth is not None else 2 * draft_depth
            if not draft_depth < verify_depth < depth:
                raise LoopcertError(f"adaptive-verify's verify depth {verify_depth} (rewind_depth, default "
                                    f"2*draft_depth) must satisfy draft_depth={draft_depth} < it "
                                    f"< depth={depth}")
        if fixed_width is not None and (isinstance(fixed_width, bool) or fixed_width not in FIXED_WIDTHS):
            raise LoopcertError(f"fixed_width must be None or one of {FIXED_WIDTHS}, got {fixed_width!r}")
        if not isinstance(draft_filter, bool):
            raise LoopcertError(f"draft_filter must be True or False, got {draft_filter!r}")
        if reads not in ("view", "gather"):
            raise LoopcertError(f"reads must be 'view' or 'gather', got {reads!r}")
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise LoopcertError(f"bad device {device!r}: {e}") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise LoopcertError(f"device {str(device)!r} requested but CUDA is not available")
        if cuda_graphs is None:
            cuda_graphs = device.type == "cuda"
        if cuda_graphs and device.type != "cuda":
            raise LoopcertError(f"cuda_graphs=True needs a CUDA device, got device={str(device)!r}")
        p = next(model.parameters())
        dtype = p.dtype if dtype is None else parse_dtype(dtype)
        if p.dtype != dtype or p.device != device:
            model = copy.deepcopy(model).to(device=device, dtype=dtype)
        self.model = model.eval()
        self.strategy, self.depth = strategy, depth
        self.draft_depth, self.second_depth = draft_depth, second_depth
        self.gate, self.draft_ahead, self.rewind_depth = gate, draft_ahead, rewind_depth
        self.verify_depth, self.fixed_width, self.draft_filter = verify_depth, fixed_width, draft_filter
        self.device, self.dtype, self.cuda_graphs, self.reads = device, dtype, bool(cuda_graphs), reads
        self.telemetry_depths = telemetry_depths
        self.lossless = LOSSLESS[strategy]
        self._engines: dict[int, Engine] = {}
        self._step_hook = None  # tests: hook(engine, live lanes) before every engine step
        self.time_calls = False  # benchmarks: time every engine call (Stats.call_seconds)
        self.reuse_prefill = False  # benchmarks: skip the prefill of a prompt this engine just prefilled

    @property
    def readout_depths(self) -> list[int]:
        """Every depth whose readout the strategy needs; each is computed for every position."""
        ds = {self.depth}
        if self.strategy != "autoregressive":
            ds.add(self.draft_depth)
        for d in (self.second_depth, self.rewind_depth, self.verify_depth, *self.telemetry_depths):
            if d is not None:
                ds.add(d)
        return sorted(ds)

    @property
    def n_side(self) -> int:
        """Side slots: one per main lane that can hold a second proposal at once."""
        return self.depth // self.draft_depth + 2 if self.second_depth is not None else 0

    def engine(self, n_positions: int) -> Engine:
        cap = capacity_for(n_positions)
        if cap not in self._engines:
            self._engines[cap] = Engine(self.model, self.depth, self.readout_depths, cap, self.n_side,
                                        self.fixed_width, self.reads, self.cuda_graphs)
        eng = self._engines[cap]
        eng.step_hook = self._step_hook
        eng.time_calls = self.time_calls
        return eng

    @torch.no_grad()
    def generate(self, prompt, max_new_tokens: int, sampling: SamplingParams = SamplingParams(),
                 seed: int = 0, eos_token_id: int | None = None, keep_logits: bool = False) -> GenerateResult:
        """New token ids (not the prompt); EOS included when it ends the run.

        Everything is validated before the cache is touched.
        """
        ids, _ = check_generate_args(self.model, prompt, max_new_tokens, sampling, seed, self.depth)
        if eos_token_id is not None:
            eos_token_id = _int("eos_token_id", eos_token_id, 0)
            if eos_token_id >= self.model.cfg.vocab_size:
                raise LoopcertError(f"eos_token_id={eos_token_id} is outside the vocabulary "
                                    f"[0, {self.model.cfg.vocab_size})")
        run = Run(self, self.engine(len(ids) + max_new_tokens), ids, max_new_tokens, sampling, seed,
                  eos_token_id, keep_logits, self.reuse_prefill)
        tokens, stats = run.run()
        return GenerateResult(tokens, stats, run.target_logits)
