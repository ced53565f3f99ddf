"""Save and load models: config.json + model.safetensors. Never pickle.

A folder whose config.json carries a published `model_type` is read by
refdec.checkpoints (published key layouts); loopcert's own format carries
"format": "loopcert" and the ModelConfig fields. The file plumbing both use (atomic writes,
config.json, pickle refusal, dtype names) is refdec.files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from refdec import checkpoints
from refdec.checkpoint_files import DTYPE_NAMES, check_finite, check_header, check_representable, read_header
from refdec.checkpoint_keys import meta_model
from refdec.config import PRESETS, ModelConfig
from refdec.errors import LoopcertError
from refdec.files import FORMAT, parse_dtype, read_config, refuse_pickles, write_atomic
from refdec.model import LoopedLM
from refdec.validate import check_seed
from refdec.values import dtype_name

DEFAULT_MODEL_DIR = checkpoints.DEFAULT_MODEL_DIR  # the shipped model's folder (defined below load)
not_a_model = checkpoints.not_a_model


def save_model(model: LoopedLM, folder, *, dtype=None) -> Path:
    """Write config.json and model.safetensors; `dtype` (e.g. bfloat16) stores a smaller copy."""
    folder = Path(folder)
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if dtype is not None:
        tensors = {k: v.to(parse_dtype(dtype)) for k, v in tensors.items()}
    config = {"format": FORMAT, **model.cfg.to_dict()}
    write_atomic(folder / "model.safetensors", lambda p: save_file(tensors, p))
    write_atomic(folder / "config.json", lambda p: Path(p).write_text(json.dumps(config, indent=2) + "\n"))
    return folder


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise LoopcertError(f"cannot read safetensors file {path}: {e}") from None


def load_state(model: LoopedLM, tensors: dict[str, torch.Tensor], source) -> LoopedLM:
    """Copy `tensors` into `model`, naming any missing, unexpected, mis-shaped, non-float
    (checkpoint_files.check_header, as for a file's header) or non-finite key."""
    expected = model.state_dict()
    stored = {k: (DTYPE_NAMES.get(v.dtype, dtype_name(v.dtype)), tuple(v.shape)) for k, v in tensors.items()}
    check_header({k: tuple(p.shape) for k, p in expected.items()}, stored, source)
    for k, v in tensors.items():
        check_finite(k, v, source)
    with torch.no_grad():
        for k, p in expected.items():
            p.copy_(tensors[k].to(p.dtype))
            check_representable(k, p, p.dtype, source)
    return model


def load_folder(folder: Path, dtype: torch.dtype) -> LoopedLM:
    refuse_pickles(folder)
    raw = read_config(folder)
    if raw.get("format") != FORMAT:  # a published layout: Ouro, Huginn, retrofitted
        return checkpoints.load_published(folder, raw, dtype)
    try:
        cfg = ModelConfig.from_dict({k: v for k, v in raw.items() if k != "format"})
    except LoopcertError as e:  # name the file the bad field is in
        raise LoopcertError(f"{folder / 'config.json'}: {e}") from None
    path = folder / "model.safetensors"
    if not path.is_file():
        raise LoopcertError(f"{folder}: no model.safetensors")
    shapes = {k: tuple(v.shape) for k, v in meta_model(cfg).state_dict().items()}
    check_header(shapes, read_header(path), path)
    model = LoopedLM(cfg).to(dtype)
    return load_state(model, read_safetensors(path), path).eval()


def load_model(name_or_path, *, seed: int = 0, dtype=torch.float32) -> LoopedLM:
    """A preset name gives random weights from `seed`; "default" the packaged trained model;
    a folder gives a saved model."""
    dtype = parse_dtype(dtype)
    name = str(name_or_path)
    if name in PRESETS:
        check_seed(seed, "weights seed")
        return LoopedLM(PRESETS[name]).init_weights(seed).to(dtype).eval()
    if name == "default":  # the trained model shipped in the package (trainer.train)
        if not (DEFAULT_MODEL_DIR / "config.json").is_file():
            raise LoopcertError(
                f"the default model is missing from {DEFAULT_MODEL_DIR}: "
                "run `python -m trainer.train` to build it"
            )
        name_or_path = DEFAULT_MODEL_DIR
    folder = Path(name_or_path)
    if folder.is_dir():
        model = load_folder(folder, dtype)
        # where it came from: an engine that loads checkpoints itself (mlx-lm) reads this folder
        model.source_folder = folder.resolve()
        return model
    raise not_a_model(name)


# Two fingerprints, for two questions:
# - model_fingerprint: which model, whatever dtype it was loaded in (a certificate, a server);
# - exact_fingerprint: which exact tensors, dtype included (a speed baseline: the bytes timed).


def model_fingerprint(model) -> str:
    """sha256 of the config and every parameter rounded to float32 (a float64 copy of float32
    weights rounds back exactly, so certify's float64 oracle and a float32 server agree)."""
    h = hashlib.sha256(repr(model.cfg).encode())
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        h.update(name.encode())
        h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def exact_fingerprint(model) -> str:
    """sha256 of the state dict as held (names, dtypes, shapes, bytes), 16 hex digits: a float64
    copy of the same model differs, unlike model_fingerprint."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]
