"""What a shard.json must hold, checked field by field when it is read (proofs/run/shards.py).

A shard is a file a user copies between machines, edits, truncates, or takes from another run;
`loopcert merge` must never trust it because its JSON parses (a KeyError, an IndexError, or a
certificate whose check "could not run" on a hand-edited tally). Every field is checked for its
type; the run's identity for every key merge compares; the results for exactly the units the
shard's index takes from the plan's unit list, each the raw result its kind of unit returns
(proofs/run/units.py): a whole check's CheckResult, a mutant's MutantRow, a sampling or
engine-relative tally, or the unit's declination or error. A bad shard is a ShardError naming
its folder and the field (`results["sampling/..."].counts[1]`); merge then writes nothing.
What the JSON alone cannot show (a tally's views against the plan's laws) is checked where the
laws are known (proofs/run/certify.py check_tallies), as the same error naming the unit.
"""

from __future__ import annotations

import numbers

from proofs.details import MutantRow
from proofs.result import CheckResult
from refdec.errors import LoopcertError


class ShardError(LoopcertError):
    """A shard that is not what `certify --shard` writes: `field` names where (None: the unit's
    tally against its law, `unit` then set)."""

    def __init__(self, message: str, unit: str | None = None):
        super().__init__(message)
        self.unit = unit


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _number(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) or x in ("inf", "-inf", "nan")


def _str(x) -> bool:
    return isinstance(x, str)


def _opt(test):
    return lambda x: x is None or test(x)


def _list_of(test, length: int | None = None):
    return lambda x: isinstance(x, list) and (length is None or len(x) == length) and all(map(test, x))


def _count(x) -> bool:
    return _int(x) and x >= 0


IDENTITY_TYPES = {
    "commit": _opt(_str),
    "plan": _str,
    "plan_hash": _str,
    "model": _str,
    "model_fingerprint": _str,
    "seed": _int,
    "decoder": _str,
    "device": _str,
    "dtype": _str,
    "time_budget": _opt(_number),
    "sampling_plan": _str,
    "relative_to": _opt(_str),
}
DRAW_TYPES = {  # what every tally of a draw holds (proofs/checks/distribution.py sample_tally)
    "samples": _count,
    "counts": _list_of(_list_of(_count)),
    "seconds": _number,
    "samples_per_s": _number,
    "batched": lambda x: isinstance(x, bool),
    "error": _opt(_str),
    "stopped_by_deadline": lambda x: isinstance(x, bool),
    "seeds": _list_of(_int, 2),
}
SAMPLING_TYPES = {**DRAW_TYPES, "unit": _str, "impossible": _count, "planned": _count}
RELATIVE_TALLY_TYPES = {**DRAW_TYPES, "malformed": _count}


def _fields(data: dict, types: dict, where: str) -> None:
    if not isinstance(data, dict):
        raise ShardError(f"{where} must be a JSON object, got {type(data).__name__}")
    for key, ok in types.items():
        if key not in data:
            raise ShardError(f"{where} lacks {key!r}")
        if not ok(data[key]):
            raise ShardError(f"{where}.{key} has a bad value {data[key]!r:.80}")


def _declined_or_failed(raw: dict, kind: str, where: str) -> bool:
    """A unit that has no result: it failed (unit_error, any kind: units.failed_unit) or its
    decoder declined it (not_applicable, a sampling kind), a string each."""
    for key in ("unit_error", "not_applicable") if kind in ("sampling", "relative") else ("unit_error",):
        if key in raw:
            if not isinstance(raw[key], str):
                raise ShardError(f"{where}.{key} must be a string, got {raw[key]!r:.80}")
            return True
    return False


def check_unit_result(uid: str, raw, where: str) -> None:
    """One unit's raw result, as its kind of unit returns it."""
    if not isinstance(raw, dict):
        raise ShardError(f"{where} must be a JSON object, got {type(raw).__name__}")
    kind = uid.split("/", 1)[0]
    if _declined_or_failed(raw, kind, where):
        return
    try:
        if kind == "check":
            CheckResult.from_dict(raw)
        elif kind == "mutant":
            raw = dict(raw)
            laws = raw.pop("laws", {})
            if not (isinstance(laws, dict) and all(map(_str, laws.values()))):
                raise ShardError(f"{where}.laws must map case names to strings")
            MutantRow.from_plain(raw, where)
        elif kind == "sampling":
            _fields(raw, SAMPLING_TYPES, where)
        elif kind == "relative":
            _fields(raw, {"unit": _str, "planned": _count, "candidate": dict, "reference": dict}, where)
            for side in ("candidate", "reference"):
                _fields(raw[side], RELATIVE_TALLY_TYPES, f"{where}.{side}")
        else:
            raise ShardError(f"{where}: unknown kind of work unit {kind!r}")
    except ShardError:
        raise
    except (LoopcertError, TypeError, ValueError, KeyError, AttributeError) as e:
        raise ShardError(f"{where}: {e}") from None
    if kind in ("sampling", "relative") and raw["unit"] != uid:
        raise ShardError(f"{where}.unit is {raw['unit']!r}, not {uid!r}")


def check_shard(data: dict, folder) -> None:
    """Every field of a shard read from `folder` (its format was checked by the reader)."""
    at = f"{folder}: shard.json"
    shard = data.get("shard")
    if not (_list_of(_int, 2)(shard) and 1 <= shard[0] <= shard[1]):
        raise ShardError(f"{at}: 'shard' must be [i, n] with 1 <= i <= n, got {shard!r:.80}")
    _fields(data.get("identity"), IDENTITY_TYPES, f"{at}: identity")
    units = data.get("units")
    if not (_list_of(_str)(units) and units and len(set(units)) == len(units)):
        raise ShardError(f"{at}: 'units' must be a non-empty list of distinct unit ids, got {units!r:.80}")
    if not isinstance(data.get("sampling"), dict):
        raise ShardError(f"{at}: 'sampling' (the plan the shard sampled) must be a JSON object")
    for key, ok in (("seconds", _number), ("command", _opt(_str))):
        if key in data and not ok(data[key]):
            raise ShardError(f"{at}: {key!r} has a bad value {data[key]!r:.80}")
    results = data.get("results")
    if not isinstance(results, dict):
        raise ShardError(f"{at}: 'results' must be a JSON object of unit id -> result")
    i, n = shard
    mine = [u for k, u in enumerate(units) if k % n == i - 1]
    extra = sorted(set(results) - set(mine))
    if extra:
        raise ShardError(f"{at}: results holds unit(s) shard {i}/{n} does not take: {', '.join(extra)}")
    lost = [u for u in mine if u not in results]
    if lost:
        raise ShardError(f"{at}: results lacks unit(s) of shard {i}/{n}: {', '.join(lost)}")
    for uid in mine:
        check_unit_result(uid, results[uid], f"{at}: results[{uid!r}]")


def check_tallies(results: dict, laws: dict) -> None:
    """Each sampling tally of merged results against the law of its unit (`laws`: unit id -> the
    CaseLaw it was binned by): one count list per view, one count per bin (the engine-relative
    check's with its outside cell), no view counting more samples than were drawn. Else a
    ShardError naming the unit (merge names its shard)."""
    for uid, law in laws.items():
        raw = results.get(uid)
        if not isinstance(raw, dict) or "unit_error" in raw or "not_applicable" in raw:
            continue
        sides = [("", raw, 0)] if uid.startswith("sampling/") else [(f".{s}", raw[s], 1) for s in RELATIVE]
        for side, tally, extra in sides:
            counts = tally["counts"]
            want = [v.probs.size + extra for v in law.views]
            got = [len(c) for c in counts]
            if got != want:
                raise ShardError(
                    f"work unit {uid}: counts{side} has {got} bins per view, its law has {want}", unit=uid
                )
            over = next((k for k, c in enumerate(counts) if sum(c) > tally["samples"]), None)
            if over is not None:
                raise ShardError(
                    f"work unit {uid}: counts{side}[{over}] counts {sum(counts[over])} samples of "
                    f"{tally['samples']} drawn",
                    unit=uid,
                )


RELATIVE = ("candidate", "reference")
