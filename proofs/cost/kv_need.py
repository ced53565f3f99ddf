"""The KV caches a certify run's fastdec decoders hold at once, counted from the model's config and
the plan before a byte of weights is loaded: the "KV caches" of refdec.memory.Need (docs/scale.md).

Which decoders are alive together (proofs/run/run.py):

    sampling   one decoder per setting (and per setting on the family's tiny preset in the FULL
               plan), built once and kept for the rest of the run (CertifyRun.sampling_decoders);
               proofs.decoders.draw hands generate_batch chunks of seeds, so each makes engines of
               up to fastdec's MAX_BATCH rows at the sampling cases' capacity
    one check  beside them, the decoders of the check running: greedy (every setting, on the
               certified model and the greedy presets, float64 and the run's dtype), bitwise (the
               settings and the autoregressive baseline, float32, fixed width), reproducibility,
               speed (the settings and the baseline): one sequence at a time (generate), each at
               its check's capacity

Each decoder holds at most fastdec.kept.held_bound of the engines it can make (every power-of-two
row count up to its rows, every capacity up to its longest sequence), so the sum of the sampling
decoders' bounds and the largest check's is an upper bound of what the caches hold. A user's
decoder (--decoder) is not fastdec: only the fastdec baselines it is compared with are counted.
The mutation and false-alarm checks decode tiny presets (caches of kilobytes, within the headroom).
A check may also load a copy of the weights for itself while it runs: bitwise's fixed-width float32
copy in a float64 run (a float32 run uses its own copy; a bfloat16 or float16 run the float32 copy
it samples with). That copy is counted with its check's caches (certify_buffers' own_copies), so the
largest check is the one whose caches and copy together are largest: at Ouro-1.4B's shape in float64
that is bitwise, 5.34 GiB of float32 weights beside the float64 reference.
Prompts are the checks' (proofs.prompts: PROMPT_LEN tokens, the speed workload's prompt_len).
"""

from __future__ import annotations

import torch

from fastdec.config import DecodeConfig
from fastdec.decoder import MAX_BATCH, MIN_CAPACITY, capacity_for, engine_bytes, rows_for
from fastdec.kept import held_bound
from proofs.prompts import PROMPT_LEN
from proofs.run.plan import REPRO_TOKENS, CertifyPlan, case_options, sampling_preset
from refdec.config import ModelConfig, get_preset
from speed.settings import fastdec_configs

BASELINE = DecodeConfig("autoregressive")  # the bitwise and speed checks' fastdec baseline


def decoder_bound(cfg: ModelConfig, config: DecodeConfig, itemsize: int, positions: int, rows: int) -> int:
    """The most bytes of KV caches a default fastdec.Decoder of `config` on a model of `cfg` (on the
    CPU, in a dtype of `itemsize` bytes) holds when no call has more than `positions` positions
    (prompt + new tokens) or `rows` sequences decoding together."""
    c = config.resolve(cfg.recurrence)
    capacities = [MIN_CAPACITY]
    while capacities[-1] < capacity_for(positions):
        capacities.append(capacities[-1] * 2)
    row_counts = [1]
    while row_counts[-1] < rows_for(rows):
        row_counts.append(row_counts[-1] * 2)
    sizes = [engine_bytes(cfg, c, cap, r, itemsize) for cap in capacities for r in row_counts]
    return held_bound(None, False, sizes)


def _caches(
    cfg: ModelConfig,
    model_name: str,
    plan: CertifyPlan,
    dtype: torch.dtype,
    device: str,
    fastdec_grid: bool,
    rows: int,
) -> tuple[int, dict[str, int]]:
    """(bytes the sampling decoders hold, {check: bytes its decoders hold}), all at their bounds;
    0 and zeros on an accelerator."""
    if torch.device(device).type != "cpu":
        return 0, {"none": 0}
    full = plan.mode == "full"

    def settings(c: ModelConfig) -> list[DecodeConfig]:
        return fastdec_configs(c.recurrence, full) if fastdec_grid else []

    run_size = torch.empty(0, dtype=dtype).element_size()
    sample_size = 8 if dtype == torch.float64 else 4  # the sampling decoders' copy (run.sampling_setup)
    tokens = [spec[2] for entry in plan.sampling_cases for spec in case_options(entry)]
    sampled = [cfg]
    tiny = sampling_preset(plan, model_name, cfg.family)
    if tiny is not None:
        sampled.append(get_preset(tiny))
    positions = PROMPT_LEN + max(tokens)
    sampling = sum(decoder_bound(c, s, sample_size, positions, rows) for c in sampled for s in settings(c))
    presets = [get_preset(p) for p in plan.greedy_presets if p != model_name]
    greedy = PROMPT_LEN + plan.greedy_tokens
    checks = {  # check -> [(model config, setting, itemsize, positions)], rows 1 each
        "greedy_float64": [(c, s, 8, greedy) for c in [cfg, *presets] for s in settings(c)],
        "greedy_low": [(cfg, s, run_size, greedy) for s in settings(cfg)] if run_size != 8 else [],
        "bitwise": [(cfg, s, 4, PROMPT_LEN + plan.bitwise_tokens) for s in [BASELINE, *settings(cfg)]],
        "reproducibility": [(cfg, s, run_size, PROMPT_LEN + REPRO_TOKENS) for s in settings(cfg)],
        "speed": [
            (cfg, s, run_size, plan.speed.prompt_len + plan.speed.tokens)
            for s in [BASELINE, *(s for s in settings(cfg) if s != BASELINE)]
        ],
    }
    held = {
        name: sum(decoder_bound(c, s, size, n, 1) for c, s, size, n in runs) for name, runs in checks.items()
    }
    return sampling, held


def certify_buffers(
    cfg: ModelConfig,
    model_name: str,
    plan: CertifyPlan,
    dtype: torch.dtype,
    device: str,
    fastdec_grid: bool = True,
    rows: int = MAX_BATCH,
    own_copies: dict[str, tuple[str, int]] | None = None,
) -> tuple[tuple[str, int], ...]:
    """What a certify run of `plan` holds in CPU memory beyond the weights it keeps for the whole
    run, at most at once, as refdec.memory.Need's buffers: the KV caches of the sampling decoders
    and of the largest check beside them, and that check's own copy of the weights where it loads
    one (own_copies: check -> (what, bytes); the check is largest by caches and copy together)."""
    sampling, held = _caches(cfg, model_name, plan, dtype, device, fastdec_grid, rows)
    own = own_copies or {}
    largest = max(held, key=lambda name: held[name] + own.get(name, ("", 0))[1])
    out = [("KV caches", sampling + held[largest])]
    if largest in own:
        what, size = own[largest]
        out.append((f"{what} while {largest} runs", size))
    return tuple((what, size) for what, size in out if size)


def certify_caches(
    cfg: ModelConfig,
    model_name: str,
    plan: CertifyPlan,
    dtype: torch.dtype,
    device: str,
    fastdec_grid: bool = True,
    rows: int = MAX_BATCH,
) -> int:
    """Bytes of KV caches in CPU memory a certify run of `plan` holds at most at once (0 on an
    accelerator, where the caches live in its memory). fastdec_grid: the certified decoder is
    fastdec's grid (no --decoder); rows: the most seeds one sampling call decodes together (certify
    lowers it from MAX_BATCH where those caches would not fit: proofs/cost/need.py sampling_rows)."""
    sampling, held = _caches(cfg, model_name, plan, dtype, device, fastdec_grid, rows)
    return sampling + max(held.values())
