"""Which decoder settings (fastdec.DecodeConfig) the speed report and the gates time.

A setting's `DecodeConfig.label` names it in every table, JSON file and gate baseline; the
baseline is the "autoregressive" setting (BASELINE). NAIVE labels proofs.decoders.naive_kv, the
honest-baseline reference loop (docs/design.md section 6).
"""

from __future__ import annotations

from fastdec import DecodeConfig
from fastdec.config import default_draft_depth, default_second_depth

BASELINE = "autoregressive"
NAIVE = "naive-kv"


def grid(R: int, quick: bool) -> list[DecodeConfig]:
    """The baseline, draft-verify, and pipelined over a (d1, d2) grid (d2 None: no second
    proposal); full mode adds more points and the lossy adaptive-verify. Depths >= R drop out."""
    out = [DecodeConfig("autoregressive")]
    dv = [(4, 4)] if quick else [(2, 4), (4, 4), (2, 8), (4, 8)]
    out += [DecodeConfig("draft-verify", draft_depth=d1, draft_ahead=k) for d1, k in dv if d1 < R]
    d1s = (1, 2, 4) if quick else (1, 2, 3, 4, 6)
    d2s = (None, 8, 16) if quick else (None, 4, 6, 8, 12, 16, 24)
    out += [
        DecodeConfig("pipelined", draft_depth=a, second_depth=b)
        for a in d1s
        for b in d2s
        if a < R and (b is None or a < b < R)
    ]
    if not quick and 2 < R // 4 < R:
        out.append(DecodeConfig("adaptive-verify", draft_depth=2, draft_ahead=4, rewind_depth=R // 4))
    return out


def gate_settings(R: int) -> list[DecodeConfig]:
    """The few settings the regression gates time (proofs.gates.baseline)."""
    out = [DecodeConfig("autoregressive")]
    if 4 < R:
        out.append(DecodeConfig("draft-verify", draft_depth=4, draft_ahead=4))
    d1 = 2 if 2 < R else 1
    out.append(DecodeConfig("pipelined", draft_depth=d1))
    d2 = min(8, R - 1)
    if d1 < d2:
        out.append(DecodeConfig("pipelined", draft_depth=d1, second_depth=d2))
    return out


def batch_settings(R: int) -> list[DecodeConfig]:
    """The batch table's settings (speed.batch_table): the gate settings, plus pipelines that
    draft deeper, at d1 = R/8 and R/4. With B sequences in the engine the calls are already wide,
    so a pipeline gains nothing from more lanes per sequence and pays for every rejected one: a
    deeper draft, rejected less often, spends fewer lane-steps per token."""
    out = gate_settings(R)
    for deep in sorted({R // 8, R // 4}):
        if not 2 < deep < R:  # checked first: below R = 8 a depth of R // 8 = 0 is no setting
            continue
        cfg = DecodeConfig("pipelined", draft_depth=deep)
        if cfg not in out:
            out.append(cfg)
    return out


def rewind_depths(R: int) -> list[int]:
    """L = R/8, R/4, R/2 (rounded down, at least 1, distinct)."""
    return sorted({max(1, R // k) for k in (8, 4, 2)})


def default_depths(R: int) -> tuple[int, int | None]:
    """(d1, d2) used by the grid: fastdec's default d1 (about R/16) and d2 (about R/4)."""
    d1 = default_draft_depth(R)
    return d1, default_second_depth(R, d1)


def fastdec_configs(R: int, full: bool) -> list[DecodeConfig]:
    """The settings of fastdec_grid (the bench's certification-throughput figure uses them too)."""
    d1, d2 = default_depths(R)
    configs = [
        DecodeConfig("autoregressive"),
        DecodeConfig("draft-verify", draft_depth=d1, draft_ahead=4),
        DecodeConfig("pipelined", draft_depth=d1, second_depth=d2),
    ]
    if full:
        deep = max(1, R // 2)
        configs += [
            DecodeConfig("draft-verify", draft_depth=deep, draft_ahead=2),
            DecodeConfig("pipelined", draft_depth=d1, draft_filter=False),
            DecodeConfig("pipelined", draft_depth=deep, rewind_depth=R - 1),
        ]
        if d2 is not None:
            configs += [
                DecodeConfig("pipelined", draft_depth=d1, second_depth=d2, gate=gate)
                for gate in (False, "inverted")
            ]
    return configs
