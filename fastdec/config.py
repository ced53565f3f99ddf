"""DecodeConfig: one decoder setting (strategy and depths), validated once (docs/design.md section 5).

Every place that names a decoder setting (fastdec.Decoder, certify's candidates, the bench
grid, the CLI) speaks this one type, and `label` is the one way a setting is written in a
table, a JSON file or a baseline.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, replace

from fastdec.accept import GATES
from refdec.errors import LoopcertError
from refdec.validate import check_int

STRATEGIES = ("autoregressive", "draft-verify", "pipelined", "adaptive-verify")
LOSSLESS = {"autoregressive": True, "draft-verify": True, "pipelined": True, "adaptive-verify": False}


def default_draft_depth(depth: int) -> int:
    """THE default draft depth d1 = max(1, round(R/16)): LoopSpec's measured best at R = 32 is
    d1 = 2 (with d2 = 8), and Theorem 2's optimum d1* grows slower than R (docs/design.md section 4)."""
    return max(1, round(depth / 16))


def default_second_depth(depth: int, draft_depth: int) -> int | None:
    """The grid's d2 = round(R/4) (LoopSpec's best at R = 32 is 8); None when no d2 fits."""
    d2 = max(draft_depth + 1, round(depth / 4))
    return d2 if d2 < depth else None


@dataclass(frozen=True)
class DecodeConfig:
    """How fastdec decodes (the model and the hardware settings are the Decoder's).

    strategy       "autoregressive" | "draft-verify" | "pipelined" | "adaptive-verify" (lossy)
    depth          target depth R; None: the model's recurrence (may exceed it)
    draft_depth    d1 < depth; None: default_draft_depth(depth); ignored by autoregressive
    second_depth   d2, d1 < d2 < depth: LoopSpec's second proposal (pipelined only)
    gate           True (LoopSpec gate), False (always propose when q2 has mass), "inverted"
                   (lossless control: propose exactly when the gate is closed)
    draft_ahead    tokens drafted per round (draft-verify, adaptive-verify), >= 1
    rewind_depth   rewind telemetry depth in [1, depth]; adaptive-verify's verify depth
                   (default 2*d1), which must lie strictly between d1 and depth
    draft_filter   False: drafts use the temperature but no top-k / top-p (a lossless control:
                   acceptance always uses the law the draft was drawn from)
    telemetry_depths  extra rewind-telemetry depths in [1, depth] (Stats.rewind_at); each adds
                   a readout depth, so it costs time: never set it in a timed run

    Fields that depend on the model's R stay None until `resolve(R)`; the Decoder holds the
    resolved config. Validation runs on every construction, so a resolved config is checked
    against its depth.
    """

    strategy: str = "autoregressive"
    _: KW_ONLY
    depth: int | None = None
    draft_depth: int | None = None
    second_depth: int | None = None
    gate: bool | str = True
    draft_ahead: int = 4
    rewind_depth: int | None = None
    draft_filter: bool = True
    telemetry_depths: tuple[int, ...] = ()

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise LoopcertError(f"unknown strategy {self.strategy!r}; choose one of {STRATEGIES}")
        depth = None if self.depth is None else check_int("depth", self.depth, 1)
        d1 = None if self.draft_depth is None else check_int("draft_depth", self.draft_depth, 1)
        if self.speculative and d1 is not None and depth is not None and d1 >= depth:
            raise LoopcertError(f"draft_depth={d1} must be < depth={depth}")
        if self.second_depth is not None:
            d2 = check_int("second_depth", self.second_depth, 1)
            if self.strategy != "pipelined":
                raise LoopcertError(
                    f"second_depth={d2} applies to strategy 'pipelined' only, not {self.strategy!r}"
                )
            if (d1 is not None and d2 <= d1) or (depth is not None and d2 >= depth):
                raise LoopcertError(
                    f"second_depth={d2} must satisfy draft_depth={d1} < second_depth < depth={depth}"
                )
        g = self.gate
        if not (g is True or g is False or (isinstance(g, str) and g in GATES)):
            raise LoopcertError(f"gate must be True, False or one of {GATES}, got {g!r}")
        check_int("draft_ahead", self.draft_ahead, 1)
        if self.rewind_depth is not None:
            rw = check_int("rewind_depth", self.rewind_depth)
            if rw < 1 or (depth is not None and rw > depth):
                raise LoopcertError(f"rewind_depth={rw} must be in [1, depth={depth}]")
        try:
            tele = tuple(sorted({check_int("telemetry depth", d) for d in self.telemetry_depths}))
        except TypeError:
            raise LoopcertError(
                f"telemetry_depths must be a sequence of depths, got {self.telemetry_depths!r}"
            ) from None
        if any(d < 1 or (depth is not None and d > depth) for d in tele):
            raise LoopcertError(f"telemetry_depths={tele} must lie in [1, depth={depth}]")
        object.__setattr__(self, "telemetry_depths", tele)
        if self.strategy == "adaptive-verify" and d1 is not None and depth is not None:
            v = self.verify_depth
            if not d1 < v < depth:
                raise LoopcertError(
                    f"adaptive-verify's verify depth {v} (rewind_depth, default "
                    f"2*draft_depth) must satisfy draft_depth={d1} < it < depth={depth}"
                )
        if not isinstance(self.draft_filter, bool):
            raise LoopcertError(f"draft_filter must be True or False, got {self.draft_filter!r}")

    # -- derived ------------------------------------------------------------------------------
    @property
    def speculative(self) -> bool:
        return self.strategy != "autoregressive"

    @property
    def lossless(self) -> bool:
        return LOSSLESS[self.strategy]

    @property
    def verify_depth(self) -> int | None:
        """adaptive-verify's (lossy) verify depth: rewind_depth, default 2*d1."""
        if self.strategy != "adaptive-verify" or self.draft_depth is None:
            return None
        return self.rewind_depth if self.rewind_depth is not None else 2 * self.draft_depth

    def resolve(self, recurrence: int) -> DecodeConfig:
        """Fill the model-dependent defaults: depth = R, and d1 for the speculative strategies."""
        depth = self.depth if self.depth is not None else recurrence
        d1 = self.draft_depth
        if d1 is None and self.speculative:
            d1 = default_draft_depth(check_int("depth", depth, 1))
        return replace(self, depth=depth, draft_depth=d1)

    @property
    def readout_depths(self) -> list[int]:
        """Every depth whose readout the strategy needs (resolved configs)."""
        ds = {self.depth}
        if self.speculative:
            ds.add(self.draft_depth)
        for d in (self.second_depth, self.rewind_depth, self.verify_depth, *self.telemetry_depths):
            if d is not None:
                ds.add(d)
        return sorted(ds)

    @property
    def n_side(self) -> int:
        """Side slots per sequence: one per main lane that can hold a second proposal at once."""
        return self.depth // self.draft_depth + 2 if self.second_depth is not None else 0

    @property
    def label(self) -> str:
        """THE label of a setting: 'pipelined d1=2 d2=8', 'draft-verify d1=4 k=4',
        'adaptive-verify d1=2 k=4 V=8', 'autoregressive'; unusual fields appended."""
        s = self.strategy
        out = s
        if self.speculative and self.draft_depth is not None:
            out += f" d1={self.draft_depth}"
        if self.second_depth is not None:
            out += f" d2={self.second_depth}"
        if s in ("draft-verify", "adaptive-verify"):
            out += f" k={self.draft_ahead}"
        if s == "adaptive-verify" and self.rewind_depth is not None:
            out += f" V={self.rewind_depth}"
        elif self.rewind_depth is not None:
            out += f" rewind={self.rewind_depth}"
        if self.depth is not None:
            out += f" R={self.depth}"
        if self.gate is not True:
            out += f" gate={'off' if self.gate is False else self.gate}"
        if not self.draft_filter:
            out += " unfiltered draft"
        if self.telemetry_depths:
            out += " telemetry=" + ",".join(map(str, self.telemetry_depths))
        return out
