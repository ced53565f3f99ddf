"""fastdec.Decoder: the public API. Validates inputs, owns one Engine per (capacity, rows), keeping
them under a byte limit on their KV caches (fastdec/kept.py)."""

from __future__ import annotations

import copy
import gc
from dataclasses import dataclass

import torch

from fastdec.batch import run_batch
from fastdec.cache import kv_cache_bytes
from fastdec.config import LOSSLESS, STRATEGIES, DecodeConfig
from fastdec.engine import WIDTHS, Engine
from fastdec.kept import check_cache_bytes, limit_for, to_evict
from fastdec.strategies import STRATEGY, Prefills, Sequence, fused_spans
from fastdec.telemetry import Stats
from refdec.decode import check_generate_args, check_run_args
from refdec.errors import LoopcertError
from refdec.load import parse_dtype
from refdec.model import LoopedLM
from refdec.sampling import SamplingParams
from refdec.validate import check_int

__all__ = ["LOSSLESS", "STRATEGIES", "Decoder", "GenerateResult"]

FIXED_WIDTHS = WIDTHS  # fixed_width must be one of these
MIN_CAPACITY = 64  # cache capacities are powers of two >= this: few distinct shapes (CUDA graphs)
MAX_BATCH = 64  # default most sequences one generate_batch call decodes together
COLLECT_BYTES = 64 << 20  # dropping this many bytes of caches frees them at once (Decoder.engine)


@dataclass
class GenerateResult:
    tokens: list[int]  # the new token ids (EOS included when it ended the run)
    stats: Stats
    target_logits: list[torch.Tensor] | None = None  # (V,) logits each token was decided on


def capacity_for(n_positions: int) -> int:
    c = MIN_CAPACITY
    while c < n_positions:
        c *= 2
    return c


def engine_bytes(model_cfg, config: DecodeConfig, capacity: int, rows: int, itemsize: int) -> int:
    """The KV cache bytes of a Decoder's engine of key (capacity, rows) on a model of `model_cfg`,
    for a resolved `config`, in a dtype of `itemsize` bytes: from the configs alone."""
    n_readouts = len(set(config.readout_depths) | {config.depth})  # Engine's readout levels
    return kv_cache_bytes(model_cfg, config.depth, n_readouts, capacity, config.n_side, itemsize, rows)


def rows_for(batch: int) -> int:
    """Cache rows for a batch: a power of two (few distinct shapes, CUDA graphs)."""
    r = 1
    while r < batch:
        r *= 2
    return r


class Decoder:
    """Fast self-speculative decoder for a refdec.LoopedLM.

    config         a DecodeConfig (strategy and depths); or, as a convenience, a strategy name
                   or nothing, with the DecodeConfig fields as keywords:
                   Decoder(model, "pipelined", draft_depth=2, second_depth=8)
    device, dtype  where and in which precision to run (the model is copied when they differ)
    fixed_width    run every engine call at this width (bitwise batch invariance mode)
    cuda_graphs    None: on for CUDA devices (unless compile); True needs CUDA
    compile        compile each engine call (phase, width) with torch.compile (fastdec/compiled.py):
                   the CPU's answer to CUDA graphs; the first call of each pays its compile
    reads          "view" (strided views, eager) or "gather" (index gather, what graphs use)
    max_batch      the most sequences generate_batch decodes at once (cache rows); more wait
                   in a queue and take the rows of sequences that finish
    cache_bytes    the most bytes of KV caches the decoder keeps between calls (an int >= 0): it
                   keeps one engine per (capacity, rows) it has decoded at, and making one that
                   would pass the limit first drops the least recently used (never the one in
                   use; 0 keeps only that one). None (default): no limit with CUDA graphs (their
                   capture is dear); else the largest engine made plus an eighth of it, at least
                   1 GiB (fastdec/kept.py). Tokens never depend on it. `held_bytes` says what is
                   kept, `cache_limit` the limit in force

    `config` is the resolved setting (depth and draft depth filled from the model); `label`
    names the setting as given.
    Benchmark switches (never set by a correctness check): `time_calls` times every engine
    call into Stats.call_seconds; `reuse_prefill` skips the prefill of a prompt a cache row
    holds from this decoder's previous run.
    """

    # proofs.decoders.protocol.BatchDecoder's optional attributes (with max_batch): a call may hold
    # any number of prompts, and the precision it computes in is the one it was built with
    batch_queue = True
    compute_dtype = property(lambda self: self.dtype)

    def __init__(
        self,
        model: LoopedLM,
        config: DecodeConfig | str | None = None,
        *,
        device="cpu",
        dtype=None,
        fixed_width: int | None = None,
        cuda_graphs: bool | None = None,
        compile: bool = False,
        reads: str = "view",
        max_batch: int = MAX_BATCH,
        cache_bytes: int | None = None,
        **settings,
    ):
        if not isinstance(model, LoopedLM):
            raise LoopcertError(f"model must be a refdec.LoopedLM, got {type(model).__name__}")
        if isinstance(config, DecodeConfig):
            if settings:
                raise LoopcertError(
                    f"give a DecodeConfig or its fields as keywords, not both: {sorted(settings)}"
                )
        elif config is None or isinstance(config, str):
            try:
                config = DecodeConfig(**({} if config is None else {"strategy": config}), **settings)
            except TypeError as e:
                raise LoopcertError(f"bad Decoder setting: {e}") from None
        else:
            raise LoopcertError(f"config must be a DecodeConfig or a strategy name, got {config!r}")
        self.label = config.label
        config = config.resolve(model.cfg.recurrence)
        if fixed_width is not None and (isinstance(fixed_width, bool) or fixed_width not in FIXED_WIDTHS):
            raise LoopcertError(f"fixed_width must be None or one of {FIXED_WIDTHS}, got {fixed_width!r}")
        if reads not in ("view", "gather"):
            raise LoopcertError(f"reads must be 'view' or 'gather', got {reads!r}")
        max_batch = check_int("max_batch", max_batch, 1)
        cache_bytes = check_cache_bytes(cache_bytes)
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise LoopcertError(f"bad device {device!r}: {e}") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise LoopcertError(f"device {str(device)!r} requested but CUDA is not available")
        if not isinstance(compile, bool):
            raise LoopcertError(f"compile must be True or False, got {compile!r}")
        if compile and cuda_graphs:
            raise LoopcertError(
                "compile=True and cuda_graphs=True: choose one (both capture the engine step)"
            )
        if cuda_graphs is None:
            cuda_graphs = device.type == "cuda" and not compile
        if cuda_graphs and device.type != "cuda":
            raise LoopcertError(f"cuda_graphs=True needs a CUDA device, got device={str(device)!r}")
        p = next(model.parameters())
        dtype = p.dtype if dtype is None else parse_dtype(dtype)
        if p.dtype != dtype or p.device != device:
            model = copy.deepcopy(model).to(device=device, dtype=dtype)
        self.model = model.eval()
        self.config = config
        self.device, self.dtype, self.cuda_graphs, self.reads = device, dtype, bool(cuda_graphs), reads
        self.compile = compile
        self.fixed_width, self.max_batch, self.cache_bytes = fixed_width, max_batch, cache_bytes
        self._engines: dict[tuple[int, int], Engine] = {}  # least recently used first
        self._largest = 0  # bytes of the largest engine made (the default limit follows it)
        self._in_use: set[tuple[int, int]] = set()  # keys of engines a call is decoding in
        self._prefills: dict[tuple[int, int], dict] = {}  # engine key -> Prefills.held
        self._step_hook = None  # tests: hook(engine, live lanes, {row: length}) before every step
        self.time_calls = False  # benchmarks (see the class docstring)
        self.reuse_prefill = False

    @property
    def boundaries(self) -> tuple[tuple[int, str], ...]:
        """Positions where this decoder's state changes shape (docs/decoders.md, `boundaries`):
        a prefill of W tokens runs at engine width W (wider prompts in chunks of the widest), and
        a sequence of more than C positions moves to an engine of the next cache capacity."""
        widths = tuple((w, f"a prefill at engine width {w}") for w in WIDTHS if w >= 2)
        caps, c = [], MIN_CAPACITY
        while c < self.model.cfg.max_seq_len:
            caps.append((c, f"cache capacity {c} filled (next engine)"))
            c *= 2
        return widths + tuple(caps)

    # the setting's fields, read by reports and tests
    strategy = property(lambda self: self.config.strategy)
    depth = property(lambda self: self.config.depth)
    draft_depth = property(lambda self: self.config.draft_depth)
    second_depth = property(lambda self: self.config.second_depth)
    rewind_depth = property(lambda self: self.config.rewind_depth)
    verify_depth = property(lambda self: self.config.verify_depth)
    lossless = property(lambda self: self.config.lossless)
    readout_depths = property(lambda self: self.config.readout_depths)

    @property
    def cache_limit(self) -> int | None:
        """The byte limit on kept caches now in force (None: none): see `cache_bytes`."""
        return limit_for(self.cache_bytes, self.cuda_graphs, self._largest)

    @property
    def compile_seconds(self) -> float:
        """Seconds the engines it keeps spent compiling (each (phase, width)'s first call: trace,
        code generation or inductor's on-disk cache); 0.0 when it does not compile."""
        return sum(e.compiled.total_compile_seconds for e in self._engines.values() if e.compiled)

    @property
    def held_bytes(self) -> int:
        """Bytes of the KV caches of the engines this decoder keeps."""
        return sum(e.cache_bytes for e in self._engines.values())

    def engine_bytes(self, capacity: int, rows: int) -> int:
        """The KV cache bytes of the engine of key (capacity, rows), before it is made."""
        itemsize = torch.empty(0, dtype=self.dtype).element_size()
        return engine_bytes(self.model.cfg, self.config, capacity, rows, itemsize)

    def engine(self, n_positions: int, batch: int = 1) -> Engine:
        key = (capacity_for(n_positions), self.rows_for(batch))
        engine = self._engines.pop(key, None)
        if engine is None:
            size = self.engine_bytes(*key)
            self._largest = max(self._largest, size)
            kept = {k: e.cache_bytes for k, e in self._engines.items()}
            dropped = to_evict(kept, size, self.cache_limit, self._in_use)
            for k in dropped:  # before the new cache is allocated: the peak is the limit's
                del self._engines[k], self._prefills[k]
            # an Engine refers to itself (its attend partials): refcounts never free it, the cycle
            # collector does. Run it now when the caches dropped are large (a full collection is
            # small beside filling that much memory and decoding in it: docs/measurements.md,
            # "Figures from code comments"); small ones wait for its next natural pass
            if sum(kept[k] for k in dropped) >= COLLECT_BYTES:
                gc.collect()
            c = self.config
            engine = Engine(
                self.model,
                c.depth,
                c.readout_depths,
                key[0],
                c.n_side,
                self.fixed_width,
                self.reads,
                self.cuda_graphs,
                rows=key[1],
                compiled=self.compile,
            )
            engine.fused_spans = fused_spans(c)
            self._prefills[key] = {}
        self._engines[key] = engine  # the most recently used last
        return engine

    def rows_for(self, batch: int) -> int:
        """Cache rows of the engine that decodes `batch` sequences at once. A compiled decoder has
        two engines per capacity, one row (generate) and max_batch's rows (every batch of more):
        each engine compiles its own graphs, and a sampler's calls come in many batch sizes; an
        eager one, the next power of two."""
        if self.compile:
            return 1 if batch <= 1 else rows_for(self.max_batch)
        return rows_for(batch)

    def prepare(self, n_positions: int) -> float:
        """Compile, now, every (phase, width) of the engine that decodes sequences of up to
        `n_positions` positions (compile=True; fastdec/compiled.py), so that no later call pays a
        compile: certify calls it before it times a decoder (the protocol's optional `prepare`).
        -> the seconds it took; 0.0, doing nothing, for an eager decoder."""
        if not self.compile:
            return 0.0
        capacity = capacity_for(check_int("n_positions", n_positions, 1))
        seconds = 0.0
        for batch in sorted({1, self.max_batch}):
            engine = self.engine(n_positions, batch)
            self._prefills[(capacity, self.rows_for(batch))].clear()  # the warm-up writes cache slots
            seconds += engine.compiled.warm()
        return seconds

    def forget_prefills(self) -> None:
        """Benchmarks: something other than a decode wrote the cache (a step-cost probe)."""
        for memo in self._prefills.values():
            memo.clear()

    def check_batch(self, prompts, max_new_tokens, sampling, seeds, eos_token_id: int | None = None):
        """generate_batch's arguments validated, before any work: (prompt ids, max_new_tokens,
        SamplingParams and seeds per sequence, eos_token_id); a LoopcertError names the bad value."""
        try:
            prompts, seeds = list(prompts), list(seeds)
        except TypeError:
            raise LoopcertError(
                f"prompts and seeds must be sequences, got {type(prompts).__name__} and "
                f"{type(seeds).__name__}"
            ) from None
        b = len(prompts)
        if b == 0:
            raise LoopcertError("generate_batch needs at least one prompt, got an empty batch")
        if len(seeds) != b:
            raise LoopcertError(f"{b} prompts but {len(seeds)} seeds: give one seed per prompt")
        news = _per_sequence("max_new_tokens", max_new_tokens, b, int)
        samplings = _per_sequence("sampling", sampling, b, SamplingParams)
        if eos_token_id is not None:
            eos_token_id = check_int("eos_token_id", eos_token_id, 0)
            if eos_token_id >= self.model.cfg.vocab_size:
                raise LoopcertError(
                    f"eos_token_id={eos_token_id} is outside the vocabulary [0, {self.model.cfg.vocab_size})"
                )
        ids = []
        checked: dict[int, list[int]] = {}  # id(prompt) -> its ids: a batch often repeats one prompt object
        for i, (prompt, n, sp, seed) in enumerate(zip(prompts, news, samplings, seeds)):
            try:
                known = checked.get(id(prompt))
                if known is None:
                    known = checked[id(prompt)] = check_generate_args(
                        self.model, prompt, n, sp, seed, self.depth
                    )[0]
                ids.append(check_run_args(self.model, known, n, sp, seed, self.depth)[0])
            except LoopcertError as e:
                raise LoopcertError(f"sequence {i}: {e}" if b > 1 else str(e)) from None
        return ids, news, samplings, seeds, eos_token_id

    def sequence(
        self, engine: Engine, prefills: Prefills, ids, n, sampling, seed, eos, keep_logits
    ) -> Sequence:
        """One sequence of this decoder's strategy in `engine`'s cache, from arguments check_batch
        validated (n new tokens, eos the EOS id or None). Its span is the capacity it would have
        decoding alone, so its law (and in fixed-width mode its bits) are generate()'s whatever
        shares the engine."""
        span = capacity_for(len(ids) + n)
        seq = STRATEGY[self.strategy](
            self.config,
            engine.cache,
            ids,
            n,
            sampling,
            seed,
            eos,
            keep_logits,
            engine.readout_slot,
            prefills,
            span,
        )
        if self.strategy == "autoregressive" and seq.greedy and seq.plain:  # its tokens are argmaxes
            seq.chain = engine.chain_length
        return seq

    @torch.no_grad()
    def generate(
        self,
        prompt,
        max_new_tokens: int,
        sampling: SamplingParams = SamplingParams(),
        seed: int = 0,
        eos_token_id: int | None = None,
        keep_logits: bool = False,
    ) -> GenerateResult:
        """New token ids (not the prompt); EOS included when it ends the run: the batch of one.

        Everything is validated before the cache is touched.
        """
        return self.generate_batch([prompt], max_new_tokens, sampling, [seed], eos_token_id, keep_logits)[0]

    @torch.no_grad()
    def generate_batch(
        self,
        prompts,
        max_new_tokens,
        sampling,
        seeds,
        eos_token_id: int | None = None,
        keep_logits: bool = False,
    ) -> list[GenerateResult]:
        """Decode B independent sequences together, one GenerateResult per prompt, in order.

        prompts        B token-id sequences (lengths may differ)
        max_new_tokens an int for every sequence, or B ints
        sampling       a SamplingParams for every sequence, or B of them
        seeds          B seeds in [0, 2**64): sequence i draws from torch.Generator(seeds[i])
        eos_token_id   ends a sequence when emitted (the others go on)

        At most max_batch sequences decode at once; the others wait, in order, and each takes
        the cache row of the next sequence to finish (a row is never idle while one waits).

        Each sequence's output has exactly the law of generate(prompt, max_new_tokens,
        sampling, seed) alone; in fixed-width mode it is that run bit for bit (tokens and
        logits). Everything is validated before any work: a LoopcertError names the bad value.
        """
        ids, news, samplings, seeds, eos_token_id = self.check_batch(
            prompts, max_new_tokens, sampling, seeds, eos_token_id
        )
        b = len(ids)
        rows = min(b, self.max_batch)
        engine = self.engine(max(len(p) + n for p, n in zip(ids, news)), rows)
        key = (engine.capacity, engine.rows)
        memo = self._prefills[key]
        if not self.reuse_prefill:
            memo.clear()  # this call overwrites rows: hold nothing across calls
        prefills = Prefills(memo if self.reuse_prefill else None)
        seqs = [
            self.sequence(engine, prefills, p, n, sp, seed, eos_token_id, keep_logits)
            for p, n, sp, seed in zip(ids, news, samplings, seeds)
        ]
        pinned = key not in self._in_use  # a step hook decoding with this decoder must not drop it
        self._in_use.add(key)
        try:
            run_batch(engine, seqs, prefills, rows, self.time_calls, self._step_hook)
        finally:
            if pinned:
                self._in_use.discard(key)
        return [GenerateResult(s.tokens, s.stats, s.target_logits) for s in seqs]


def _per_sequence(name: str, value, b: int, kind: type) -> list:
    """One value for every sequence, or exactly b of them."""
    if isinstance(value, kind) and not isinstance(value, bool):
        return [value] * b
    if isinstance(value, list | tuple):
        if len(value) != b:
            raise LoopcertError(f"{b} prompts but {len(value)} {name} values: give one, or one per prompt")
        return list(value)
    return [value] * b  # check_generate_args names the bad value
