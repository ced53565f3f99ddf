"""What one generate() call did: counts, rates and the LoopSpec step ratio gamma
(docs/design.md section 4)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass
class Stats:
    strategy: str
    depth: int  # R: the target depth
    draft_depth: int | None = None  # d1
    second_depth: int | None = None  # d2
    tokens: int = 0
    # Token sources (docs/design.md section 4): each committed token is exactly one of these.
    from_first: int = 0  # a first proposal (draft) accepted
    from_second: int = 0  # a second proposal accepted
    from_restart: int = 0  # no proposal, or all rejected: drawn from the (residual) target
    proposals: int = 0  # first proposals verified
    accepted: int = 0  # first proposals accepted
    rounds: int = 0  # draft-verify: verification rounds; pipelined: rejection-delimited runs
    escalations: int = 0  # adaptive-verify: rounds that went on to the full depth
    gate_checks: int = 0  # second-proposal gates evaluated (pipelined with second_depth)
    gate_opens: int = 0
    rewind_checks: int = 0  # one per rejected first proposal, when rewind_depth is set
    rewind_hits: int = 0  # rewind-depth argmax == target-depth argmax at that rejection
    steps: int = 0  # engine steps (one recurrence for every lane in the step), prefill excluded
    prefill_steps: int = 0
    lane_steps: int = 0  # sum over steps of lanes advanced
    peak_lanes: int = 0
    steps_per_width: dict[int, int] = field(default_factory=dict)  # recur calls per padded width
    calls: dict[str, dict[int, int]] = field(default_factory=dict)  # phase -> padded width -> calls
    # phase -> padded width -> [wall, cpu] seconds in those calls (Decoder.time_calls only)
    call_seconds: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    rewind_at: dict[int, list[int]] = field(default_factory=dict)  # telemetry depth -> [checks, hits]
    seconds: float = 0.0  # wall time of generate()
    prefill_seconds: float = 0.0  # wall time of the prefill (and the first token) within `seconds`
    cpu_seconds: float = 0.0  # process CPU time of generate() (robust to other load on the host)
    prefill_cpu_seconds: float = 0.0

    @property
    def rejections(self) -> int:
        return self.proposals - self.accepted

    # Rates are 0.0 when nothing was counted (_rate).
    acceptance_rate = property(lambda self: _rate(self.accepted, self.proposals))
    # accepted first proposals per round (see `rounds`)
    mean_accepted_length = property(lambda self: _rate(self.accepted, self.rounds))

    @property
    def gamma(self) -> float:
        """N*R / (N1*d1 + N2*d2 + Nrest*R): recurrent steps saved per token (<= R/d1)."""
        cost = self.from_first * (self.draft_depth or 0) + self.from_second * (self.second_depth or 0)
        cost += self.from_restart * self.depth
        return _rate(self.tokens * self.depth, cost)

    gate_open_rate = property(lambda self: _rate(self.gate_opens, self.gate_checks))
    mean_live_lanes = property(lambda self: _rate(self.lane_steps, self.steps))
    rewind_hit_rate = property(lambda self: _rate(self.rewind_hits, self.rewind_checks))
    tokens_per_s = property(lambda self: _rate(self.tokens, self.seconds))

    @property
    def decode_tokens(self) -> int:
        """Tokens after the first: the first comes out of the prefill, whatever the strategy."""
        return max(self.tokens - 1, 0)

    decode_seconds = property(lambda self: self.seconds - self.prefill_seconds)
    # the speed a strategy controls: the prefill (the same for every strategy) excluded
    decode_tokens_per_s = property(lambda self: _rate(self.decode_tokens, self.decode_seconds))

    def as_dict(self) -> dict:
        """The fields, then every derived figure (each property of the class)."""
        d = dataclasses.asdict(self)
        for name in DERIVED:
            d[name] = getattr(self, name)
        return d


def _rate(count: float, per: float) -> float:
    return count / per if per > 0 else 0.0


# The derived figures, in definition order: every property of Stats (a new one is reported by
# as_dict with no list to update).
DERIVED = tuple(name for name, v in vars(Stats).items() if isinstance(v, property))
