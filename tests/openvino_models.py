"""What the openvino-marked tests share (tests/proofs/engines/test_openvino_*.py): the skip rule and
the Ouro folders refdec writes for optimum-intel to export.

OpenVINO lives in its own environment (constraints-openvino.txt, `tox -e openvino`): outside it the
openvino tests skip, unless LOOPCERT_REQUIRE_OPENVINO=1 (tox -e openvino sets it), which turns a
missing OpenVINO into an error.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

MODEL_SEED = 0  # the certified model's weights (tiny-ouro's: R = 4, vocab 13)
# The draft: the model's weights plus Gaussian noise of DRAFT_NOISE x each tensor's std (seed
# DRAFT_SEED), a stand-in for a distilled or quantized draft, so that GenAI both accepts and
# rejects its drafts (docs/measurements.md has the rates).
DRAFT_SEED, DRAFT_NOISE = 1, 0.1
MODULES = ("openvino", "openvino_genai", "openvino_tokenizers", "optimum.intel", "transformers")


def require_openvino() -> None:
    """Skip the calling module when OpenVINO GenAI or optimum-intel is missing; fail under
    LOOPCERT_REQUIRE_OPENVINO=1."""
    missing = [m for m in MODULES if not _found(m)]
    if not missing:
        return
    if os.environ.get("LOOPCERT_REQUIRE_OPENVINO") == "1":
        raise RuntimeError(
            f"tox -e openvino: {', '.join(missing)} not installed in {sys.executable}'s environment"
        )
    pytest.skip("OpenVINO GenAI is not installed here (tox -e openvino installs it)", allow_module_level=True)


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def write_ouro(folder: Path, seed: int = MODEL_SEED, noise: float = 0.0) -> Path:
    """tiny-ouro with weights from `seed`, plus `noise` x each tensor's std of Gaussian noise drawn
    from DRAFT_SEED, in Ouro's published layout (with loopcert's modeling code: refdec/hf/)."""
    import torch

    import refdec
    from refdec.checkpoints import write_published

    model = refdec.LoopedLM(refdec.get_preset("tiny-ouro")).init_weights(seed)
    if noise:
        g = torch.Generator().manual_seed(DRAFT_SEED)
        with torch.no_grad():
            for p in model.parameters():
                if p.numel() > 1:
                    p.add_(torch.randn(p.shape, generator=g) * noise * p.std().clamp_min(1e-3))
    write_published(model, folder)
    return folder
