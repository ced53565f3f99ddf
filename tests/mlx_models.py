"""What the mlx-marked tests share (tests/proofs/engines/test_mlx_*.py): the skip rule and the
LoopCoder folders refdec writes for mlx-lm to load.

mlx lives in its own environment (constraints-mlx.txt, `tox -e mlx`): outside it the mlx tests
skip, unless LOOPCERT_REQUIRE_MLX=1 (tox -e mlx sets it), which turns a missing mlx into an error.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

MODEL_SEED = 0  # the certified model's weights
# The draft: the model's weights plus Gaussian noise of DRAFT_NOISE x each tensor's std (seed
# DRAFT_SEED), a stand-in for a distilled or quantized draft: mlx-lm accepts about half its greedy
# drafts (0.54 on the engines table's prompts), so both accepted and rejected drafts happen.
DRAFT_SEED, DRAFT_NOISE = 1, 0.03


def require_mlx() -> None:
    """Skip the calling module when mlx / mlx-lm are missing; fail under LOOPCERT_REQUIRE_MLX=1."""
    missing = [m for m in ("mlx", "mlx_lm") if importlib.util.find_spec(m) is None]
    if not missing:
        return
    if os.environ.get("LOOPCERT_REQUIRE_MLX") == "1":
        raise RuntimeError(
            f"tox -e mlx: {', '.join(missing)} not installed in {sys.executable}'s environment"
        )
    pytest.skip("mlx-lm is not installed here (tox -e mlx installs it)", allow_module_level=True)


def write_loopcoder(folder: Path, seed: int = MODEL_SEED, noise: float = 0.0, **changes) -> Path:
    """tiny-loopcoder (loop window 8, loop_num 2) with weights from `seed`, plus `noise` x each
    tensor's std of Gaussian noise drawn from DRAFT_SEED, in the published layout; `changes`
    replace config fields (the published window: loop_window_size=64, max_seq_len=512)."""
    import torch

    import refdec
    from refdec.checkpoints import write_published

    model = refdec.LoopedLM(refdec.get_preset("tiny-loopcoder").replace(**changes)).init_weights(seed)
    if noise:
        g = torch.Generator().manual_seed(DRAFT_SEED)
        with torch.no_grad():
            for p in model.parameters():
                if p.numel() > 1:
                    p.add_(torch.randn(p.shape, generator=g) * noise * p.std().clamp_min(1e-3))
    write_published(model, folder)
    return folder
