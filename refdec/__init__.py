"""refdec: the looped-LM oracle. Plain PyTorch, no cache, float64-capable, slow on purpose."""

from refdec.config import PRESETS, ModelConfig, get_preset
from refdec.decode import generate
from refdec.errors import LoopcertError
from refdec.load import load_model, save_model
from refdec.model import LoopedLM
from refdec.sampling import SamplingParams, transform

__all__ = [
    "PRESETS",
    "LoopcertError",
    "LoopedLM",
    "ModelConfig",
    "SamplingParams",
    "generate",
    "get_preset",
    "load_model",
    "save_model",
    "transform",
]
