"""The memory a certify run needs, from the config and the safetensors headers alone, before a
byte of weights is loaded (docs/scale.md): its copies of the weights (refdec.memory.Need), the KV
caches its decoders hold at once (proofs/cost/kv_need.py), and the sampling rows a call that fit.
RunModels.load (proofs/run/run.py) refuses a run that does not fit; --predict asks the same first.
"""

from __future__ import annotations

import torch

from fastdec.decoder import MAX_BATCH
from proofs.cost.kv_need import certify_buffers
from proofs.run.plan import CertifyPlan
from refdec.memory import FREE_ENV, Need, config_of, free_bytes, parameters_of
from refdec.values import dtype_name

FIT_HINT = (
    "--dtype float64 keeps one copy of the weights through the run (no float32 copy beside the float64 "
    "reference but while bitwise runs; its decoders' KV caches are float64, and certify already samples "
    "as few rows a call as needed); "
    "or run on a machine with more memory (--shard, --executor ray with --ray-address); "
    f"{FREE_ENV} caps the memory counted as free"
)


def sampling_rows(
    name: str, dtype: torch.dtype, device: str, plan: CertifyPlan | None, fastdec_grid: bool = True
) -> int | None:
    """The most seeds a sampling call may decode together so that the run fits the memory free:
    None (fastdec's MAX_BATCH) when that fits or nothing is known, else the largest power of two
    below it that fits, 1 when none does (then the memory check refuses the run at 1 row). Fewer
    rows cost throughput, not a figure: sample i always uses seed base + i (proofs.decoders.draw),
    and on a CPU a model whose 64-row caches do not fit gains little from batching anyway."""
    free = free_bytes()
    if plan is None or free is None or torch.device(device).type != "cpu" or not fastdec_grid:
        return None
    rows = MAX_BATCH
    while rows > 1 and run_need(name, dtype, device, plan, fastdec_grid, rows).total > free:
        rows //= 2
    return None if rows == MAX_BATCH else rows


def run_need(
    name: str,
    dtype: torch.dtype,
    device: str,
    plan: CertifyPlan | None = None,
    fastdec_grid: bool = True,
    rows: int = MAX_BATCH,
) -> Need:
    """What RunModels.load and the sampling setup hold in CPU memory, from the headers alone: the
    float64 reference (on the CPU whatever the device: the exact laws), the run's dtype copy and a
    float32 copy to sample when the run's dtype is neither (on a GPU run those live on the GPU);
    with a plan, the KV caches its fastdec decoders hold at once and, in a float64 run on the CPU,
    the float32 copy the bitwise check loads for itself beside its caches (proofs/cost/kv_need.py;
    fastdec_grid: the certified decoder is fastdec's grid, not a --decoder; rows: the most seeds a
    sampling call decodes together)."""
    copies = [("float64 reference", 8)]
    cpu = torch.device(device).type == "cpu"
    if cpu and dtype != torch.float64:
        copies.append((f"{dtype_name(dtype)} copy", torch.empty(0, dtype=dtype).element_size()))
        if dtype != torch.float32:
            copies.append(("float32 copy to sample", 4))
    n = parameters_of(name)
    # bitwise runs at fixed-width float32: a float64 run loads that copy for the check alone
    # (CertifyRun.float32_model); a float32 run has its own, a bfloat16 run the one it samples with
    own = {"bitwise": ("float32 copy", 4 * n)} if cpu and dtype == torch.float64 else {}
    buffers = (
        ()
        if plan is None
        else certify_buffers(config_of(name), name, plan, dtype, device, fastdec_grid, rows, own)
    )
    return Need(n, tuple(copies), buffers)
