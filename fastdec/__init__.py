"""fastdec: the static-shape self-speculative decoder for looped LMs (docs/design.md section 5)."""

from fastdec.config import LOSSLESS, STRATEGIES, DecodeConfig, default_draft_depth
from fastdec.continuous import ContinuousBatch
from fastdec.decoder import Decoder, GenerateResult
from fastdec.engine import WIDTHS, Engine, Lane
from fastdec.telemetry import Stats

__all__ = [
    "LOSSLESS",
    "STRATEGIES",
    "WIDTHS",
    "ContinuousBatch",
    "DecodeConfig",
    "Decoder",
    "Engine",
    "GenerateResult",
    "Lane",
    "Stats",
    "default_draft_depth",
]
