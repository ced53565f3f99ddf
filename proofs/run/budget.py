"""The sampling time budget as one pool over a run's sampling units (docs/design.md section 8).

The pool covers the sampling units this process runs (all of them, or a shard's: then the
shard's part of the budget, by N). A unit is handed its proportional part of what is left (by its
N among the units left) and may use up to SHARE_SLACK times that, but only out of what the units
before it left unused: every unit after it keeps its floor, its proportional part of the whole
budget (`floor`). What a unit does not use stays in the pool: a fast setting's leftover helps the
slow ones after it, and a slow unit is not cut at its bare proportion when there is a leftover to
give. When every unit is slow (a large model, a short budget) the pool splits in proportion to N:
before the floor, each unit took twice its part of what was left, and the last setting of a
24-layer, 49k-vocabulary model drew nothing (docs/scale.md). Only how far a case gets before its
deadline depends on the clock; N, seeds and samples do not.

Two ways to draw on it:
- one process (serial): `share` when a unit starts, `spend` the time it sampled when it ends;
- the parent of --jobs workers (proofs/run/jobs.py): `reserve` when a unit is dispatched, which
  hands out the same share but takes only its proportional part from the pool (taking the slack
  too would leave nothing for a unit dispatched beside it), and `settle` when it returns, which
  gives the reservation back and pays for the time the unit used. With N workers sampling at
  once the pool holds N x the budget in worker-seconds: the budget stays wall time.

The plan's budget (no --time-budget) is not a deadline: a unit's deadline follows the rate it
measures (RateDeadline), so a machine at half speed still reaches N, and only a runaway unit
(RUNAWAY x its part of the plan's budget, or a rate that collapses) is cut. A unit cut short with
nothing rejected is INCOMPLETE, never FAIL (proofs/checks/distribution.py). A given --time-budget
is a hard limit: each unit stops at its share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# the rate-following deadline lives beside the draw that asks it (the checks use it too)
from proofs.decoders.draw import RATE_SLACK, RUNAWAY, RateDeadline  # noqa: F401

SHARE_SLACK = 2.0  # a sampling unit may use up to 2x its proportional share of the pool left
# (out of what earlier units left unused: the units after it keep their floors)


@dataclass
class SamplingPool:
    seconds: float  # sampling time left, in worker-seconds
    samples: int  # planned N of the units not yet handed their share
    units: int  # sampling units not yet handed their share
    planned: Mapping[str, int]  # unit id -> N, every sampling unit the pool covers
    reserved: dict[str, float] = field(default_factory=dict)  # unit id -> seconds taken by reserve()
    floors: dict[str, float] = field(default_factory=dict)  # unit id -> its part of the whole pool, by N
    handed: set[str] = field(default_factory=set)  # units handed their share

    @classmethod
    def over(
        cls, planned: Mapping[str, int], unit_ids: Iterable[str], budget_s: float, workers: int = 1
    ) -> SamplingPool:
        """The pool of the sampling units among `unit_ids` (planned: N of every sampling unit of
        the run): the budget in proportion to their N, times the workers sampling at once."""
        ids = set(unit_ids)
        mine = {uid: n for uid, n in planned.items() if uid in ids}
        total = sum(planned.values())
        seconds = budget_s * workers * (sum(mine.values()) / total if total else 1.0)
        n = sum(mine.values())
        floors = {uid: seconds * k / n for uid, k in mine.items()} if n else {}
        return cls(seconds, n, len(mine), mine, floors=floors)

    def fair(self, uid: str) -> float:
        """This unit's proportional part of what is left: by its N among the units left."""
        return self.seconds * self.planned[uid] / self.samples if self.samples > 0 else 0.0

    def share(self, uid: str) -> float:
        """Hand a unit its sampling time and count it off: its fair part, and up to SHARE_SLACK x
        that out of what leaves the floors of the units after it whole; at most what is left.
        What it samples is paid with `spend`."""
        fair = self.fair(uid)
        later = sum(f for u, f in self.floors.items() if u != uid and u not in self.handed)
        slack = min(SHARE_SLACK * fair, self.seconds - later)
        share = min(self.seconds, max(fair, slack))
        self.handed.add(uid)
        self.samples = max(0, self.samples - self.planned[uid])
        self.units = max(0, self.units - 1)
        return share

    def spend(self, seconds: float) -> None:
        self.seconds = max(0.0, self.seconds - seconds)

    def reserve(self, uid: str) -> float | None:
        """A parallel unit's share, handed out when it is dispatched; None for a unit the pool does
        not cover (not a sampling unit). Only its fair part leaves the pool until `settle`."""
        if uid not in self.planned:
            return None
        fair = self.fair(uid)
        share = self.share(uid)
        self.spend(fair)
        self.reserved[uid] = fair
        return share

    def settle(self, uid: str, used: float) -> None:
        """A returned parallel unit gives its reservation back and pays the `used` seconds; a no-op
        for a unit that reserved nothing."""
        if uid in self.reserved:
            self.seconds = max(0.0, self.seconds + self.reserved.pop(uid) - used)

    def outlook(self, rate: float) -> str | None:
        """What the units left plan, and their time at `rate` samples/s (None: nothing to say)."""
        if rate <= 0 or not self.units:
            return None
        return (
            f"  {self.units} sampling unit(s) left plan {self.samples} samples: "
            f"~{self.samples / rate:.0f}s at {rate:.1f} samples/s; {self.seconds:.0f}s of the "
            "sampling budget left"
        )
