"""Boundaries: the positions where a decoder's state changes shape (docs/design.md section 6,
"Coverage, next to power"; docs/certify.md#boundaries).

A Boundary at position b says: a decoder holding b tokens or more is in another state than one
holding fewer (a window of b wraps past it, a cache page of b fills, a prefill chunk of b ends,
a prompt of exactly b tokens takes another path). They come from
- the model's config: every window (LoopCoder's `loop_window_size`, a `sliding_window` and the
  per-layer windows of the folder's config.json), the original and the configured maximum length;
- the decoder's optional `boundaries` attribute (docs/decoders.md): (position, what) pairs, or
  bare positions; fastdec declares its engine widths and cache capacities, mlx-lm its rotating
  cache window and its KVCache growth step, an HTTP decoder what `--boundaries` names;
- each speculation width k the decoder declares: a prompt of k + 1 tokens;
- a ladder of powers of two up to the plan's horizon, for the boundaries nobody declared.

Crossing (`crossing`): a token sequence crosses b by generation when the decoder produced tokens
at positions b - 1 and b + 1 (0-based positions in prompt + continuation), by prefill when its
prompt holds more than b tokens; a speculation width's boundary only by a prompt of exactly
k + 1 tokens. The configured maximum length cannot be crossed: its
boundary sits at max_seq_len - 2, so that a generation reaching the last position crosses it.
A declared boundary (every source but the ladder) within the plan's horizon that no check
crossed fails the certificate as "no coverage" (proofs/checks/depth.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from proofs.decoder_attributes import declared_pairs, server_of, speculation_widths
from refdec.config import ModelConfig
from refdec.validate import is_int

MODEL, DECODER, SERVER, SPECULATION, LADDER = "model", "decoder", "server", "speculation", "ladder"
DECLARED = (MODEL, DECODER, SERVER, SPECULATION)  # a declared boundary left uncrossed fails
# keys of a published config.json that name a window (a per-layer list: every distinct entry)
WINDOW_KEYS = ("loop_window_size", "sliding_window", "attention_window", "local_window_size", "window_size")
LENGTH_KEYS = ("max_position_embeddings", "original_max_position_embeddings", "max_seq_len")


@dataclass(frozen=True, order=True)
class Boundary:
    position: int  # tokens held at which the state changes (0-based: the first position past it)
    source: str  # one of MODEL, DECODER, SERVER, SPECULATION, LADDER
    what: str  # what changes there, for the coverage table ("loop_window_size 64 wraps")
    window: bool = False  # a window that wraps: generation must run past two of the largest

    @property
    def declared(self) -> bool:
        return self.source in DECLARED


def crossed_by_generation(b: int, prompt_len: int, n_tokens: int) -> bool:
    """Whether a decoder that generated n_tokens after a prompt of prompt_len tokens produced
    tokens at positions b - 1 and b + 1 (so on both sides of b)."""
    return prompt_len <= b - 1 and prompt_len + n_tokens - 1 >= b + 1


def crossed_by_prefill(b: int, prompt_len: int) -> bool:
    return prompt_len > b


def crossing(boundary: Boundary, prompt_len: int, n_tokens: int) -> str | None:
    """How a sequence of a prompt of prompt_len tokens and n_tokens generated ones crosses the
    boundary: "generation", "prefill", or None. A speculation width's boundary (a prompt of
    exactly k + 1 tokens) is crossed only by such a prompt followed by generation ("prompt")."""
    if boundary.source == SPECULATION:
        return "prompt" if prompt_len == boundary.position and n_tokens >= 2 else None
    if crossed_by_generation(boundary.position, prompt_len, n_tokens):
        return "generation"
    return "prefill" if crossed_by_prefill(boundary.position, prompt_len) else None


def model_boundaries(cfg: ModelConfig, raw: Mapping | None = None) -> list[Boundary]:
    """The model config's: its windows and its lengths. `raw`: the folder's config.json, for the
    windows and lengths loopcert's ModelConfig does not keep (a sliding window, per-layer windows,
    max_position_embeddings)."""
    out = []
    if cfg.loop_window_size:
        w = cfg.loop_window_size
        out.append(Boundary(w, MODEL, f"loop_window_size {w} wraps", window=True))
    if cfg.rope_scaling is not None:
        o = cfg.rope_scaling.original_max_position_embeddings
        out.append(Boundary(o, MODEL, f"original_max_position_embeddings {o} (RoPE scaling) passed"))
    for key in WINDOW_KEYS:
        for w in _ints((raw or {}).get(key)):
            out.append(Boundary(w, MODEL, f"{key} {w} wraps", window=True))
    for key in LENGTH_KEYS[:2]:
        for n in _ints((raw or {}).get(key)):
            if n < cfg.max_seq_len:
                out.append(Boundary(n, MODEL, f"{key} {n} passed"))
    n = cfg.max_seq_len
    out.append(Boundary(n - 2, MODEL, f"max_seq_len {n}: the last positions reached"))
    return out


def _ints(v) -> list[int]:
    vals = v if isinstance(v, (list, tuple)) else [v]
    return sorted({int(x) for x in vals if is_int(x, 2)})


def ladder(horizon: int) -> list[Boundary]:
    out, b = [], 2
    while b <= horizon:
        out.append(Boundary(b, LADDER, f"2^{b.bit_length() - 1}"))
        b *= 2
    return out


def collect(
    model_cfg: ModelConfig,
    decoder=None,
    horizon: int = 256,
    *,
    raw_config: Mapping | None = None,
    server: Iterable[int] = (),
) -> list[Boundary]:
    """Every boundary of `decoder` on a model of `model_cfg` (sorted by position, then source),
    those past the model's length dropped (no sequence reaches them). `server`: positions an HTTP
    decoder's --boundaries names (a server's block and chunk sizes). A decoder may be None (the
    model's and the ladder's only), or a list of decoders (their union: fastdec's grid)."""
    found = model_boundaries(model_cfg, raw_config) + ladder(horizon)
    decoders = decoder if isinstance(decoder, (list, tuple)) else ([] if decoder is None else [decoder])
    for d in decoders:
        # a declaration naming a window (mlx-lm's rotating cache) counts as one
        found += [Boundary(p, DECODER, w, window="window" in w) for p, w in declared_pairs(d)]
        found += [
            Boundary(int(p), SERVER, f"server block/chunk {int(p)} (--boundaries)") for p in server_of(d)
        ]
        for k in speculation_widths(d):
            found.append(Boundary(k + 1, SPECULATION, f"a prompt of {k + 1} tokens (speculation width {k})"))
    found += [Boundary(int(p), SERVER, f"server block/chunk {int(p)}") for p in server]
    last = model_cfg.max_seq_len - 2
    return sorted({b for b in found if 1 <= b.position <= last})


def within(boundaries: Iterable[Boundary], horizon: int) -> list[Boundary]:
    """The boundaries a plan of `horizon` context tokens can cross by generation."""
    return [b for b in boundaries if b.position + 2 <= horizon]


def positions(boundaries: Iterable[Boundary]) -> list[int]:
    return sorted({b.position for b in boundaries})


def largest_window(boundaries: Iterable[Boundary]) -> int:
    """The largest window declared (0: none)."""
    return max((b.position for b in boundaries if b.window), default=0)


def near(position: int, boundaries: Iterable[Boundary]) -> str:
    """An absolute position relative to the nearest declared boundary at or below it (else any):
    "loop_window_size 64 wraps + 2" (position 66)."""
    bs = list(boundaries)
    below = [b for b in bs if b.position <= position and b.declared] or [
        b for b in bs if b.position <= position
    ]
    if not below:
        return f"position {position}"
    b = max(below, key=lambda b: (b.position, b.declared))
    return f"{b.what} (position {b.position}) + {position - b.position}"
