"""The Nanbeige folders the engine tests hand to mlx-lm and llama.cpp (tests/proofs/engines/
test_mlx_nanbeige*.py, test_llamacpp_*.py): tiny-nanbeige (two loops, a trained LM's activation
scales: refdec.model.LoopedLM._trained_scales) written by refdec in the published layout, with its
byte-level tokenizer."""

from __future__ import annotations

from pathlib import Path

MODEL_SEED = 0  # the certified model's weights
# The draft: the model's weights plus Gaussian noise of DRAFT_NOISE x each tensor's std (seed
# DRAFT_SEED), a stand-in for a distilled or quantized draft: some drafts accepted, some rejected.
DRAFT_SEED, DRAFT_NOISE = 1, 0.03
PROMPT = tuple(b"loop the stack twice: ")  # 22 byte-level tokens


def write_nanbeige(folder: Path, seed: int = MODEL_SEED, noise: float = 0.0, **changes) -> Path:
    """tiny-nanbeige (ModelConfig `changes` applied) with weights from `seed`, plus `noise` x each
    tensor's std of Gaussian noise drawn from DRAFT_SEED, in the published layout."""
    import torch

    import refdec
    from refdec.checkpoints import write_published
    from refdec.config import TINY_NANBEIGE

    model = refdec.LoopedLM(refdec.get_preset(TINY_NANBEIGE).replace(**changes)).init_weights(seed)
    if noise:
        g = torch.Generator().manual_seed(DRAFT_SEED)
        with torch.no_grad():
            for p in model.parameters():
                if p.numel() > 1:
                    p.add_(torch.randn(p.shape, generator=g) * noise * p.std().clamp_min(1e-3))
    write_published(model, folder)
    return folder
