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

MODEL_SEED, DRAFT_SEED = 0, 1  # the certified model's weights; the draft's (other weights)


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


def write_loopcoder(folder: Path, seed: int) -> Path:
    """tiny-loopcoder (loop window 8, loop_num 2) with weights from `seed`, in the published layout."""
    import refdec
    from refdec.checkpoints import write_published

    write_published(refdec.LoopedLM(refdec.get_preset("tiny-loopcoder")).init_weights(seed), folder)
    return folder
