"""fastdec: the static-shape self-speculative decoder for looped LMs (DESIGN.md section 5)."""

from fastdec.decoder import LOSSLESS, STRATEGIES, Decoder, GenerateResult
from fastdec.engine import WIDTHS, Engine, Lane
from fastdec.stats import Stats

__all__ = ["LOSSLESS", "STRATEGIES", "WIDTHS", "Decoder", "Engine", "GenerateResult", "Lane", "Stats"]
