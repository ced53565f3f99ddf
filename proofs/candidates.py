"""What gets certified: named decoder settings, each a recipe `build(model) -> decoder`.

By default the candidate is fastdec with each strategy and a grid of settings whose depths
scale with the model's R (DESIGN.md section 6); `--decoder module:factory` makes it one user
decoder. A Candidate with `fixed_width` can also be built in fastdec's fixed-width mode for
the bitwise check (DESIGN.md section 5).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from proofs.protocol import Decoder, build_decoder, load_factory


@dataclass(frozen=True)
class Candidate:
    label: str
    build: Callable[..., Decoder]  # (model) -> decoder; fastdec recipes also take fixed_width=W
    settings: dict = field(default_factory=dict)
    lossless: bool = True  # False: must be REJECTED (a mutant), see proofs/mutants.py
    fixed_width: bool = False  # build(model, fixed_width=W) is supported


def default_depths(R: int) -> tuple[int, int | None]:
    """(d1, d2) used by the grid: about R/16 and R/4 (LoopSpec's measured best at R=32 is (2, 8))."""
    d1 = max(1, round(R / 16))
    d2 = max(d1 + 1, round(R / 4))
    return d1, (d2 if d2 < R else None)


def fastdec_candidate(label: str, lossless: bool = True, **settings) -> Candidate:
    def build(model, fixed_width=None):
        from fastdec import Decoder as FastDecoder  # fastdec is optional for user decoders

        p = next(model.parameters())  # the decoder runs where the model is, in its dtype
        return FastDecoder(model, fixed_width=fixed_width, device=p.device, dtype=p.dtype, **settings)

    return Candidate(label, build, {"decoder": "fastdec", **settings}, lossless, fixed_width=True)


def fastdec_grid(R: int, full: bool) -> list[Candidate]:
    """Each lossless strategy at the default depths; --full adds the unusual lossless settings."""
    d1, d2 = default_depths(R)
    grid = [
        fastdec_candidate("autoregressive", strategy="autoregressive"),
        fastdec_candidate(f"draft-verify d1={d1} k=4", strategy="draft-verify", draft_depth=d1,
                          draft_ahead=4),
        fastdec_candidate(f"pipelined d1={d1}" + (f" d2={d2}" if d2 else ""), strategy="pipelined",
                          draft_depth=d1, **({"second_depth": d2} if d2 else {})),
    ]
    if full:
        deep = max(1, R // 2)
        grid += [
            fastdec_candidate(f"draft-verify d1={deep} k=2", strategy="draft-verify", draft_depth=deep,
                              draft_ahead=2),
            fastdec_candidate(f"pipelined d1={d1} unfiltered draft", strategy="pipelined",
                              draft_depth=d1, draft_filter=False),
            fastdec_candidate(f"pipelined d1={deep} rewind={R - 1}", strategy="pipelined",
                              draft_depth=deep, rewind_depth=R - 1),
        ]
        if d2 is not None:
            grid += [fastdec_candidate(f"pipelined d1={d1} d2={d2} gate={gate}", strategy="pipelined",
                                       draft_depth=d1, second_depth=d2, gate=value)
                     for gate, value in (("off", False), ("inverted", "inverted"))]
    return grid


def user_candidate(spec: str) -> Candidate:
    factory = load_factory(spec)

    def build(model):
        return build_decoder(factory, model, spec)

    return Candidate(spec, build, {"decoder": spec})
