"""Train the embedded default model: a small byte-level Raven-style looped LM.

    OMP_NUM_THREADS=1 python -m trainer.train --recipe huginn --max-minutes 90 \
        --ckpt-dir /tmp/loopcert-train --out DIR   # the shipped model's recipe (MODEL_CARD.md)
    python -m trainer.train --max-minutes 36 --out DIR            # recipe v1: the first shipped model
    python -m trainer.train --resume ...                          # continue from --ckpt-dir

Nothing is exported without --out (the shipped model lives in refdec/weights/default; pass
that folder explicitly to replace it); every file is written atomically.

Data: the running interpreter's standard library `.py` sources plus the rendered `pydoc_data`
topics; a fixed sorted document list, split by a hash of each name (`split_of`), recorded in
data_manifest.json with its sha256 and the Python version. A different Python gives different
data: the manifest says which.

Recipes (RECIPES; explicit flags override a recipe's values):
- `huginn`, after Huginn-0125 (Geiping et al. 2025, section 3; recpre's samplers):
  a pre-norm residual core; the initial state drawn fresh from noise each step (like-init; the
  shipped model uses init_state "seeded", one draw of that law per (state_seed, position));
  r ~ Poisson(LogNormal(log mean - sigma^2/2, sigma)) + 1 with gradient through the last
  min(k, r) iterations (k = 8); no loss that pulls shallow depths toward deep ones; windows
  growing 256 -> 1024 -> 2048 bytes at constant bytes per step (`--seq-schedule`).
- `v1`: sandwich core, zero initial state, r ~ Poisson(LogNormal) clipped to >= 1,
  k = 4, and an auxiliary shallow loss CE(labels) + KL(stopgrad p_r || p_s) at s ~ U{1..3}.
  Its depth profile was flat (the core reached a fixed point within a few iterations), and a
  1-block-core variant (`--model core1 --aux-max-depth 0 --backprop-k 8 --depth-sigma 0.75`)
  hardly less: hence `huginn`.

Schedule: AdamW, linear warmup, cosine decay over `progress` = max(step/steps,
elapsed/max_minutes). With --max-minutes the run ends on time whatever the CPU contention;
the step count is then a result, recorded in train_record.json. Checkpoints are safetensors
+ JSON (model, AdamW moments, data RNG), never pickles.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import hashlib
import json
import math
import os
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from analysis.depth_profile import fused_attention_for, window_profile
from refdec.config import ModelConfig
from refdec.errors import LoopcertError
from refdec.files import write_atomic
from refdec.layers import rope_tables
from refdec.load import DEFAULT_MODEL_DIR, save_model
from refdec.model import LoopedLM
from refdec.validate import is_int, is_number

DEFAULT_DIR = DEFAULT_MODEL_DIR
DEFAULT_CKPT = Path("/tmp/loopcert-train")
HELDOUT_EVERY = 20  # one document in 20 is held out (split_of)
LN2 = math.log(2.0)

V1 = ModelConfig(
    family="raven",
    block="sandwich",
    rope="half",
    vocab_size=256,
    d_model=128,
    n_heads=4,
    n_kv_heads=1,  # MQA: one KV timeline per lane per depth (docs/design.md section 5)
    head_dim=32,
    intermediate_size=352,
    n_prelude=1,
    n_core=2,
    n_coda=1,
    recurrence=32,
    max_seq_len=4096,
    init_state="zeros",
    name="default",
)
TINY = V1.replace(  # a few steps train it in seconds (the tests' model)
    d_model=32, head_dim=8, intermediate_size=64, n_core=1, recurrence=4, max_seq_len=512, name="tiny-trained"
)
# The huginn recipe's block, initial state and readout (Huginn-0125; see "huginn" below)
HUGINN_CORE = dict(block="prenorm", ln_f_before_coda=True, init_state="seeded")
CONFIGS = {
    "default": V1,
    # the default with a 1-block core: each iteration does less (a try at a less flat depth profile)
    "core1": V1.replace(n_core=1, name="core1"),
    # the huginn recipe's model (Huginn-0125, Geiping et al. 2025): a pre-norm residual core (the
    # sandwich core contracted to a fixed point within a few iterations), GQA with 2 KV heads, the
    # initial state a seeded truncated normal (trained on fresh noise each step: like-init).
    "huginn": V1.replace(
        **HUGINN_CORE, d_model=192, n_heads=6, n_kv_heads=2, intermediate_size=512, n_core=1
    ),
    "tiny": TINY,
    "tiny-huginn": TINY.replace(**HUGINN_CORE, name="tiny-huginn"),
}

# Named recipes: TrainConfig defaults per recipe (explicit flags override). "v1" reproduces the
# first shipped model; "huginn" the shipped one: no shallow loss, fresh-noise initial state,
# r ~ Poisson(LogNormal(log mean - s^2/2, s)) + 1, gradient through the last min(8, r)
# iterations, windows growing 256 -> 1024 -> 2048 bytes at constant bytes per step.
# Mean depth 32 (Huginn's): at a smaller mean the core converged well before R and depth stopped
# mattering, while mean 32 used its depth and reached a lower bpb(R) too, although each step costs
# more. Sigma 0.5 (Huginn's): a wider sigma with a smaller mean drew many shallow depths and its
# depth profile stayed flat (docs/measurements.md has the runs).
RECIPES: dict[str, dict] = {
    "v1": {},
    "huginn": dict(
        model="huginn",
        seq_len=256,
        batch_size=8,
        mean_depth=32.0,
        depth_sigma=0.5,
        depth_offset=1,
        backprop_k=8,
        aux_max_depth=0,
        noise_init=True,
        lr=2e-3,
        warmup=50,
        threads=1,
        seq_schedule=((0.0, 256), (0.35, 1024), (0.85, 2048)),
    ),
}


@dataclass(frozen=True)
class TrainConfig:
    model: str = "default"  # key of CONFIGS
    seq_len: int = 256  # training window (bytes); longer contexts decode but are unseen
    batch_size: int = 8
    steps: int = 100000  # upper bound; with max_minutes the clock usually ends the run
    max_minutes: float | None = None
    lr: float = 3e-3
    min_lr_frac: float = 0.1
    warmup: int = 30
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    mean_depth: float = 16.0  # E[r]; R/2 for R = 32
    depth_sigma: float = 0.5  # Huginn's; larger gives more shallow (and very deep) draws
    backprop_k: int = 4
    aux_max_depth: int = 3  # 0 disables the shallow auxiliary loss
    aux_weight: float = 0.5
    depth_offset: int = 0  # r = Poisson(tau) + depth_offset (Huginn: 1); 0 clips r = 0 up to 1
    max_depth: int | None = None  # r is clipped to this; None = 2R
    noise_init: bool = False  # Huginn's like-init: h(0) fresh noise each step (init_state "seeded")
    # ((progress_from, seq_len), ...): the window grows with training progress at constant
    # bytes per step (batch = batch_size * seq_len // window); () = seq_len throughout
    seq_schedule: tuple = ()
    seed: int = 0
    threads: int = 2
    log_every: int = 10
    ckpt_minutes: float = 3.0
    data_root: str | None = None  # default: the running interpreter's stdlib

    def __post_init__(self):
        if self.model not in CONFIGS:
            raise LoopcertError(f"TrainConfig.model={self.model!r}: choose one of {sorted(CONFIGS)}")
        for name in ("seq_len", "batch_size", "steps", "backprop_k", "threads", "log_every"):
            v = getattr(self, name)
            if not is_int(v, 1):
                raise LoopcertError(
                    f"TrainConfig.{name}={v!r} (--{name.replace('_', '-')}): must be an integer >= 1"
                )
        if self.max_minutes is not None and not is_number(self.max_minutes, 0, low_open=True):
            raise LoopcertError(f"TrainConfig.max_minutes={self.max_minutes!r}: must be a finite number > 0")
        if not is_number(self.mean_depth, 1):
            raise LoopcertError(
                f"TrainConfig.mean_depth={self.mean_depth!r} (--mean-depth): must be a finite number >= 1"
            )
        if not is_number(self.depth_sigma, 0):
            raise LoopcertError(
                f"TrainConfig.depth_sigma={self.depth_sigma!r} (--depth-sigma): must be a finite number >= 0"
            )
        if not is_int(self.aux_max_depth, 0):
            raise LoopcertError(f"TrainConfig.aux_max_depth={self.aux_max_depth!r}: must be an integer >= 0")
        cfg = CONFIGS[self.model]
        if self.seq_len + 1 > cfg.max_seq_len:
            raise LoopcertError(
                f"TrainConfig.seq_len={self.seq_len} (--seq-len): the window + 1 exceeds "
                f"the model's max_seq_len={cfg.max_seq_len}"
            )
        if self.depth_offset not in (0, 1):
            raise LoopcertError(f"TrainConfig.depth_offset={self.depth_offset!r}: must be 0 or 1")
        md = self.max_depth
        if md is not None and not is_int(md, 1):
            raise LoopcertError(f"TrainConfig.max_depth={md!r} (--max-depth): must be an integer >= 1")
        if self.mean_depth > self.depth_cap:
            raise LoopcertError(
                f"TrainConfig.mean_depth={self.mean_depth!r} (--mean-depth) exceeds the "
                f"max depth {self.depth_cap}"
            )
        if self.backprop_k > self.depth_cap:
            raise LoopcertError(
                f"TrainConfig.backprop_k={self.backprop_k!r} (--backprop-k) exceeds the "
                f"max depth {self.depth_cap} (--max-depth)"
            )
        if self.noise_init and cfg.init_state != "seeded":
            raise LoopcertError(
                f"TrainConfig.noise_init: model {self.model!r} has init_state="
                f"{cfg.init_state!r}; like-init noise needs 'seeded'"
            )
        sched = tuple(tuple(x) for x in self.seq_schedule)
        object.__setattr__(self, "seq_schedule", sched)
        if sched:
            froms = [f for f, _ in sched]
            in_range = all(is_number(f, 0, 1, high_open=True) for f in froms)
            if not in_range or froms[0] != 0.0 or froms != sorted(froms):
                raise LoopcertError(
                    f"TrainConfig.seq_schedule={sched!r} (--seq-schedule): progress points "
                    "must start at 0 and increase within [0, 1)"
                )
            for _, t in sched:
                if not is_int(t, 1) or t + 1 > cfg.max_seq_len:
                    raise LoopcertError(
                        f"TrainConfig.seq_schedule window {t!r} (--seq-schedule): must be "
                        f"an integer >= 1 with window + 1 <= max_seq_len={cfg.max_seq_len}"
                    )

    @property
    def depth_cap(self) -> int:
        return self.max_depth if self.max_depth is not None else 2 * CONFIGS[self.model].recurrence

    def window_at(self, progress: float) -> tuple[int, int]:
        """(window bytes, batch size) at training progress in [0, 1]."""
        if not self.seq_schedule:
            return self.seq_len, self.batch_size
        t = [w for f, w in self.seq_schedule if progress >= f][-1]
        return t, max(1, self.batch_size * self.seq_len // t)


# -- data ---------------------------------------------------------------------------------
def split_of(name: str) -> str:
    """'heldout' for one document name in HELDOUT_EVERY (by sha256 of the name), else 'train'."""
    return "heldout" if hashlib.sha256(name.encode()).digest()[0] % HELDOUT_EVERY == 0 else "train"


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def collect_documents(root: Path | None = None) -> list[tuple[str, bytes]]:
    """Sorted (name, bytes): every .py under root (no site-packages, no caches), and, for the
    real stdlib, each pydoc_data topic rendered as text under the name 'pydoc_data/topics/<key>'."""
    root = Path(root) if root is not None else stdlib_root()
    if not root.is_dir():
        raise LoopcertError(f"data root {str(root)!r} is not a directory")
    docs = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if "site-packages" in rel.split("/") or "__pycache__" in rel.split("/") or not path.is_file():
            continue
        docs.append((rel, path.read_bytes()))
    topics = root / "pydoc_data" / "topics.py"
    if topics.is_file():
        for key, text in pydoc_topics(topics).items():
            docs.append((f"pydoc_data/topics/{key}", text.encode("utf-8")))
    docs.sort()
    if not docs:
        raise LoopcertError(f"no .py files under {root}")
    return docs


def pydoc_topics(path: Path) -> dict[str, str]:
    """The `topics = {...}` dict of a pydoc_data/topics.py, read as data (ast.literal_eval of the
    assigned literal: nothing in the file runs). A file without that literal gives {}; one whose
    `topics` is not a dict of strings is refused by name."""
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (SyntaxError, ValueError) as e:
        raise LoopcertError(f"{path}: not Python source ({e})") from None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "topics" for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                raise LoopcertError(
                    f"{path}: `topics` is not a literal (refused: it is read as data)"
                ) from None
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise LoopcertError(f"{path}: `topics` must be a dict of strings")
            return value
    return {}


def split_documents(docs) -> dict[str, list[tuple[str, bytes]]]:
    out: dict[str, list[tuple[str, bytes]]] = {"train": [], "heldout": []}
    for name, data in docs:
        out[split_of(name)].append((name, data))
    return out


def concat(docs) -> torch.Tensor:
    """Documents joined by a blank line, as a uint8 tensor of bytes."""
    return torch.frombuffer(bytearray(b"\n\n".join(d for _, d in docs)), dtype=torch.uint8)


def build_manifest(docs, root: Path) -> dict:
    splits = split_documents(docs)
    listing = "".join(f"{split_of(n)}\t{n}\t{hashlib.sha256(d).hexdigest()}\n" for n, d in docs)
    return {
        "python_version": sys.version.split()[0],
        "python_implementation": sys.implementation.name,
        "stdlib_root": str(root),
        "split_rule": f"heldout iff sha256(name)[0] % {HELDOUT_EVERY} == 0",
        "join": "documents joined by b'\\n\\n' in sorted name order",
        "n_documents": {k: len(v) for k, v in splits.items()},
        "n_bytes": {k: sum(len(d) for _, d in v) for k, v in splits.items()},
        "n_topics": sum(1 for n, _ in docs if n.startswith("pydoc_data/topics/")),
        # sha256 of the lines "split<TAB>name<TAB>sha256(content)\n": the list and the contents.
        "sha256": hashlib.sha256(listing.encode()).hexdigest(),
        "documents": [[n, split_of(n), len(d), hashlib.sha256(d).hexdigest()] for n, d in docs],
    }


def sample_batch(data: torch.Tensor, batch_size: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
    """(B, seq_len + 1) random windows of `data` as int64 token ids."""
    starts = torch.randint(0, data.numel() - seq_len - 1, (batch_size,), generator=gen)
    return data[starts[:, None] + torch.arange(seq_len + 1)].long()


def heldout_windows(data: torch.Tensor, n: int, length: int) -> torch.Tensor:
    """(n, length) evenly spaced windows of the held-out bytes: deterministic, no RNG."""
    if data.numel() < length + 1:
        raise LoopcertError(f"held-out text of {data.numel()} bytes is shorter than one window")
    step = (data.numel() - length - 1) // max(n - 1, 1)
    return torch.stack([data[i * step : i * step + length] for i in range(n)]).long()


# -- the batched forward used for training and evaluation ---------------------------------
def sample_depth(gen: torch.Generator, mean: float, sigma: float, r_max: int, offset: int = 0) -> int:
    """Huginn's log-normal Poisson: tau ~ LogNormal(log mean - sigma^2/2, sigma) (so E[tau] = mean),
    r ~ Poisson(tau) + offset, clipped to [1, r_max]. Huginn (recpre) uses offset 1."""
    z = float(torch.randn((), generator=gen, dtype=torch.float64))
    tau = math.exp(math.log(mean) - sigma * sigma / 2 + sigma * z)
    r = int(torch.poisson(torch.tensor([tau], dtype=torch.float64), generator=gen)) + offset
    return min(max(r, 1), r_max)


def depth_law(mean: float, sigma: float, r_max: int, offset: int = 0) -> list[float]:
    """The exact law of sample_depth: [P(r = 1), ..., P(r = r_max)], by Gauss-Hermite quadrature
    over the log-normal (E_tau of the Poisson pmf), with the clipping at 1 and r_max folded in."""
    import numpy as np

    x, w = np.polynomial.hermite_e.hermegauss(160)  # nodes/weights for the standard normal
    w = w / w.sum()
    tau = np.exp(math.log(mean) - sigma * sigma / 2 + sigma * x)  # (Q,)
    n = np.arange(r_max + 1)
    logpmf = n[:, None] * np.log(tau)[None] - tau[None] - np.array([math.lgamma(k + 1) for k in n])[:, None]
    pois = np.exp(logpmf) @ w  # P(Poisson = n), n = 0..r_max
    pmf = np.zeros(r_max + 1)
    for k in range(r_max + 1):
        pmf[min(max(k + offset, 1), r_max)] += pois[k]
    pmf[r_max] += max(0.0, 1.0 - pois.sum())  # Poisson mass beyond r_max clips to r_max
    return pmf[1:].tolist()


def noise_state(shape, gen: torch.Generator, init_scale: float) -> torch.Tensor:
    """Huginn's like-init, drawn fresh: the law of refdec.layers.seeded_state (normal clipped at
    3 std, std sqrt(2/5) * init_scale) but from the training RNG, so inference's seeded state is
    one draw of the law the core was trained on."""
    return torch.randn(shape, generator=gen).clamp(-3.0, 3.0) * (math.sqrt(2.0 / 5.0) * init_scale)


def training_loss(
    model: LoopedLM,
    batch: torch.Tensor,
    r: int,
    k: int,
    s: int,
    aux_weight: float,
    h0: torch.Tensor | None = None,
):
    """Loss in nats at depth r (grad through the last k iterations) plus the shallow aux at s.
    h0 (B, T, d): the initial state (like-init noise); None = the model's own initial_state."""
    x, y = batch[:, :-1], batch[:, 1:]  # (B, T)
    pos = torch.arange(x.shape[1])
    cos, sin = rope_tables(model.cfg, pos)
    net = model.net()
    e = net.embed(x, cos, sin, fused_attention_for)  # (B, T, d)
    h = net.initial_state(e, pos) if h0 is None else h0.to(e.dtype)
    shallow = None
    for i in range(1, r + 1):
        with torch.set_grad_enabled(i > r - k or i <= s):
            h = net.recur(h, e, cos, sin, fused_attention_for)
        if i == s:
            shallow = net.readout(h, cos, sin, fused_attention_for)
    deep = net.readout(h, cos, sin, fused_attention_for)  # (B, T, V)
    main = F.cross_entropy(deep.flatten(0, 1), y.flatten())
    if shallow is None:
        return main, main.detach(), None
    lp_s = F.log_softmax(shallow.flatten(0, 1), -1)
    lp_r = F.log_softmax(deep.detach().flatten(0, 1), -1)
    ce_s = F.nll_loss(lp_s, y.flatten())
    kl = (lp_r.exp() * (lp_r - lp_s)).sum(-1).mean()
    return main + aux_weight * (ce_s + kl), main.detach(), ce_s.detach()


# -- setup, checkpoints -------------------------------------------------------------------
@torch.no_grad()
def init_for_training(model: LoopedLM, seed: int) -> LoopedLM:
    """Norms 1; embeddings N(0, 1); linears N(0, 1/fan_in), output projections halved, head small."""
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        if "norm" in name:
            p.fill_(1.0)
            continue
        z = torch.randn(p.shape, generator=g)
        if name.endswith("embed_tokens.weight"):
            p.copy_(z)
        elif name.startswith("lm_head"):
            p.copy_(z * 0.2 / math.sqrt(p.shape[1]))
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            p.copy_(z * 0.5 / math.sqrt(p.shape[1]))
        else:
            p.copy_(z / math.sqrt(p.shape[1]))
    return model


def make_optimizer(model: LoopedLM, tc: TrainConfig) -> torch.optim.AdamW:
    decay = [p for n, p in sorted(model.named_parameters()) if p.dim() == 2 and "embed" not in n]
    other = [p for n, p in sorted(model.named_parameters()) if not (p.dim() == 2 and "embed" not in n)]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": tc.weight_decay}, {"params": other, "weight_decay": 0.0}],
        lr=tc.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )


def lr_at(tc: TrainConfig, step: int, progress: float) -> float:
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    cos = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return tc.lr * (tc.min_lr_frac + (1 - tc.min_lr_frac) * cos)


def save_training_state(folder: Path, model, opt, gen, state: dict, tc: TrainConfig) -> None:
    tensors = {f"model.{k}": v.detach().clone() for k, v in model.state_dict().items()}
    names = {id(p): n for n, p in model.named_parameters()}
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p)
            if st:
                for key in ("exp_avg", "exp_avg_sq"):
                    tensors[f"opt.{key}.{names[id(p)]}"] = st[key].clone()
                state.setdefault("opt_step", {})[names[id(p)]] = float(st["step"])
    tensors["rng.data"] = gen.get_state().clone()
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "state.safetensors", lambda p: save_file(tensors, p))
    meta = {"train_config": dataclasses.asdict(tc), **state}
    write_atomic(folder / "state.json", lambda p: Path(p).write_text(json.dumps(meta, indent=1)))


def load_training_state(folder: Path, model, opt, gen) -> dict:
    if not (folder / "state.json").is_file():
        raise LoopcertError(f"--resume: no checkpoint in {folder}")
    meta = json.loads((folder / "state.json").read_text())
    tensors = load_file(str(folder / "state.safetensors"))
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    params = dict(model.named_parameters())
    for name, step in meta.get("opt_step", {}).items():
        p = params[name]
        opt.state[p] = {
            "step": torch.tensor(step),
            "exp_avg": tensors[f"opt.exp_avg.{name}"],
            "exp_avg_sq": tensors[f"opt.exp_avg_sq.{name}"],
        }
    gen.set_state(tensors["rng.data"])
    return meta


# -- the loop -----------------------------------------------------------------------------
def keeps_callers_threads(fn):
    """The recipe's thread count is set for the run and the caller's restored after it: the Python
    API never changes torch's global thread count behind the caller's back."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        threads = torch.get_num_threads()
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    return wrapper


@keeps_callers_threads
def train(
    tc: TrainConfig,
    ckpt_dir: Path,
    out_dir: Path | None,
    resume: bool = False,
    log=print,
    command: str | None = None,
    until_step: int | None = None,
) -> dict:
    """Train (or resume) per `tc`; checkpoint to ckpt_dir; export the shipped files to out_dir.

    `until_step` pauses early (checkpoint written, schedule unchanged): what an interrupted run
    looks like to --resume.
    """
    torch.set_num_threads(tc.threads)
    cfg = CONFIGS[tc.model]
    root = Path(tc.data_root) if tc.data_root else stdlib_root()
    docs = collect_documents(root)
    splits = split_documents(docs)
    if not splits["train"] or not splits["heldout"]:
        raise LoopcertError(f"data under {root} gives an empty train or held-out split")
    data, held = concat(splits["train"]), concat(splits["heldout"])
    manifest = build_manifest(docs, root)
    log(
        f"data: {len(docs)} documents, train {data.numel():,} B, held-out {held.numel():,} B, "
        f"manifest sha256 {manifest['sha256'][:16]}, python {manifest['python_version']}"
    )

    torch.manual_seed(tc.seed)
    model = init_for_training(LoopedLM(cfg), tc.seed).train()
    opt = make_optimizer(model, tc)
    gen = torch.Generator().manual_seed(tc.seed)
    state = {"step": 0, "elapsed_s": 0.0, "history": []}
    if resume:
        meta = load_training_state(ckpt_dir, model, opt, gen)
        loose = ("steps", "max_minutes", "log_every", "ckpt_minutes")
        # compared as JSON round-trips them (tuples come back as lists)
        now = json.loads(json.dumps(dataclasses.asdict(tc)))
        if {k: v for k, v in meta["train_config"].items() if k not in loose} != {
            k: v for k, v in now.items() if k not in loose
        }:
            log("warning: resuming with a different TrainConfig than the checkpoint's")
        state = {k: meta[k] for k in ("step", "elapsed_s", "history", "runs") if k in meta} | (
            {"tokens": meta["tokens"]} if "tokens" in meta else {}
        )
        log(f"resumed at step {state['step']} after {state['elapsed_s'] / 60:.1f} min")
    n_params = sum(p.numel() for p in model.parameters())
    log(
        f"model {cfg.name}: {n_params:,} parameters; R={cfg.recurrence}, mean depth {tc.mean_depth}, "
        f"k={tc.backprop_k}, aux depth 1..{tc.aux_max_depth} x{tc.aux_weight}, noise init {tc.noise_init}, "
        f"windows {tc.seq_schedule or tc.seq_len}"
    )

    # every command that trained this model, with the steps it ran: a resumed run's record lists
    # the runs before it, so the shipped record reproduces the whole model, not its last leg
    runs = state.setdefault("runs", [])
    runs.append({"command": command or command_line(sys.argv[1:]), "from_step": state["step"]})
    budget = tc.max_minutes * 60 if tc.max_minutes else None
    t0, base = time.monotonic(), state["elapsed_s"]
    last_ckpt = time.monotonic()
    run_nll, run_aux, run_n = 0.0, 0.0, 0
    while True:
        elapsed = base + time.monotonic() - t0
        progress = max(state["step"] / tc.steps, elapsed / budget if budget else 0.0)
        if progress >= 1.0 or (until_step is not None and state["step"] >= until_step):
            break
        step = state["step"]
        lr = lr_at(tc, step, progress)
        for group in opt.param_groups:
            group["lr"] = lr
        r = sample_depth(gen, tc.mean_depth, tc.depth_sigma, tc.depth_cap, tc.depth_offset)
        s = int(torch.randint(1, tc.aux_max_depth + 1, (), generator=gen)) if tc.aux_max_depth else 0
        window, bsz = tc.window_at(progress)
        batch = sample_batch(data, bsz, window, gen)
        h0 = noise_state((bsz, window, cfg.d_model), gen, cfg.init_scale) if tc.noise_init else None
        loss, main, aux = training_loss(model, batch, r, tc.backprop_k, s, tc.aux_weight, h0)
        state["tokens"] = state.get("tokens", 0) + bsz * window
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        state["step"] = step + 1
        run_nll += float(main)
        run_aux += float(aux) if aux is not None else 0.0
        run_n += 1
        if state["step"] % tc.log_every == 0:
            elapsed = base + time.monotonic() - t0
            rec = {
                "step": state["step"],
                "min": round(elapsed / 60, 2),
                "bpb": round(run_nll / run_n / LN2, 4),
                "lr": round(lr, 6),
            }
            if tc.seq_schedule:
                rec["window"] = window
            if tc.aux_max_depth:
                rec["aux_bpb"] = round(run_aux / run_n / LN2, 4)
            state["history"].append(rec)
            shallow = f"  shallow {rec['aux_bpb']:.3f}" if tc.aux_max_depth else ""
            log(
                f"step {rec['step']:6d}  {rec['min']:6.2f} min  train bpb {rec['bpb']:.3f} (deep, r~{r:2d})"
                f"{shallow}  lr {lr:.2e}  T={window}  {elapsed / state['step']:.2f} s/step",
                flush=True,
            )
            run_nll, run_aux, run_n = 0.0, 0.0, 0
        runs[-1]["to_step"] = state["step"]
        if time.monotonic() - last_ckpt > tc.ckpt_minutes * 60:
            state["elapsed_s"] = base + time.monotonic() - t0
            save_training_state(ckpt_dir, model, opt, gen, state, tc)
            last_ckpt = time.monotonic()
    state["elapsed_s"] = base + time.monotonic() - t0
    save_training_state(ckpt_dir, model, opt, gen, state, tc)
    model.eval()
    quick = window_profile(
        model, heldout_windows(held, 8, min(tc.seq_len, 256) + 1), sorted({1, 2, 4, cfg.recurrence})
    )
    log(
        "held-out (quick): "
        + "  ".join(f"r={r}: {quick.bpb[r]:.3f} bpb, agree {quick.agree[r]:.3f}" for r in quick.depths)
    )
    record = {
        "command": runs[-1]["command"],
        "runs": runs,
        "train_config": dataclasses.asdict(tc),
        "steps": state["step"],
        "train_minutes": round(state["elapsed_s"] / 60, 2),
        "n_params": n_params,
        "tokens_seen": state.get("tokens", state["step"] * tc.batch_size * tc.seq_len),
        "torch_version": torch.__version__,
        "threads": tc.threads,
        "history": state["history"],
    }
    if out_dir is not None:
        export(model, out_dir, manifest, held, splits["heldout"], record)
        log(f"wrote {out_dir}")
    return {"record": record, "quick_eval": quick, "model": model}


# -- shipping -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Prompt:
    name: str  # "<held-out document>:<byte offset>"
    text: str
    ids: tuple[int, ...]  # the UTF-8 bytes of text


def make_prompts(heldout_docs, n: int = 16, length: int = 192) -> list[dict]:
    """n snippets of about `length` bytes from distinct held-out .py files, each starting at the
    first line of a top-level `def`/`class` (or the file start), cut at a line end, valid UTF-8."""
    files = [(name, d) for name, d in heldout_docs if name.endswith(".py") and len(d) >= 4 * length]
    step = max(len(files) // n, 1)
    out = []
    for name, data in files[::step]:
        text = data.decode("utf-8", errors="ignore")
        at = min((i for i in (text.find("\ndef "), text.find("\nclass ")) if i >= 0), default=0)
        snippet = text[at + 1 if at else 0 :][:length]
        snippet = snippet[: snippet.rfind("\n") + 1] or snippet
        if len(snippet) < length // 3:
            continue
        out.append(
            {
                "name": f"{name}:{len(text[: at + 1 if at else 0].encode())}",
                "text": snippet,
                "ids": list(snippet.encode("utf-8")),
            }
        )
        if len(out) == n:
            break
    return out


def export(
    model: LoopedLM, out_dir: Path, manifest: dict, held: torch.Tensor, heldout_docs, record: dict
) -> None:
    out_dir = Path(out_dir)
    save_model(model, out_dir, dtype="float16")  # computed in float32/64 on load
    text = lambda obj: lambda p: Path(p).write_text(json.dumps(obj, indent=1) + "\n")  # noqa: E731
    write_atomic(out_dir / "data_manifest.json", text(manifest))
    write_atomic(
        out_dir / "prompts.json",
        text({"source": "held-out split of data_manifest.json", "prompts": make_prompts(heldout_docs)}),
    )
    write_atomic(out_dir / "train_record.json", text(record))


def default_prompts(folder: Path | str | None = None) -> list[Prompt]:
    """The fixed held-out prompts shipped with the default model (refdec/weights/default/prompts.json)."""
    path = Path(folder or DEFAULT_DIR) / "prompts.json"
    if not path.is_file():
        raise LoopcertError(f"no prompts file at {path}")
    raw = json.loads(path.read_text())
    return [Prompt(p["name"], p["text"], tuple(p["ids"])) for p in raw["prompts"]]


# -- command line -------------------------------------------------------------------------
def parse_schedule(text: str) -> tuple:
    """'0:256,0.35:1024,0.85:2048' -> ((0.0, 256), (0.35, 1024), (0.85, 2048))."""
    try:
        return tuple((float(f), int(t)) for f, t in (item.split(":") for item in text.split(",")))
    except ValueError:
        raise LoopcertError(
            f"--seq-schedule {text!r}: expected PROGRESS:WINDOW,... e.g. 0:256,0.35:1024"
        ) from None


# flag -> TrainConfig field (every flag defaults to None: unset flags take the recipe's value)
FLAGS = {
    "model": str,
    "steps": int,
    "max_minutes": float,
    "seed": int,
    "batch_size": int,
    "seq_len": int,
    "lr": float,
    "warmup": int,
    "mean_depth": float,
    "depth_sigma": float,
    "depth_offset": int,
    "max_depth": int,
    "backprop_k": int,
    "aux_max_depth": int,
    "aux_weight": float,
    "threads": int,
    "log_every": int,
    "ckpt_minutes": float,
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--recipe",
        default="v1",
        choices=sorted(RECIPES),
        help="named training recipe (defaults below); v1 = the first shipped model",
    )
    for name, typ in FLAGS.items():
        flag = "--" + name.replace("_", "-")
        if name == "model":
            p.add_argument(flag, default=None, choices=sorted(CONFIGS), help="model shape")
        else:
            p.add_argument(flag, type=typ, default=None, help=f"TrainConfig.{name}")
    p.add_argument(
        "--noise-init",
        default=None,
        action=argparse.BooleanOptionalAction,
        help="fresh-noise initial state each step (Huginn's like-init)",
    )
    p.add_argument(
        "--seq-schedule",
        default=None,
        type=parse_schedule,
        help="window by training progress, e.g. 0:256,0.35:1024,0.85:2048",
    )
    p.add_argument("--data-root", default=None, help="folder of .py files (default: this Python's stdlib)")
    p.add_argument("--ckpt-dir", default=str(DEFAULT_CKPT), help="resumable checkpoint folder")
    p.add_argument(
        "--out",
        default=None,
        help="where the trained model is written (nothing is exported without it; "
        f"the shipped model lives in {DEFAULT_DIR})",
    )
    p.add_argument("--resume", action="store_true", help="continue from --ckpt-dir")


def config_from_args(args) -> TrainConfig:
    kw = dict(RECIPES[args.recipe])
    for name in (*FLAGS, "noise_init", "seq_schedule", "data_root"):
        v = getattr(args, name, None)
        if v is not None:
            kw[name] = v
    return TrainConfig(**kw)


def run_args(args, command: str | None = None) -> int:
    train(
        config_from_args(args),
        Path(args.ckpt_dir),
        Path(args.out) if args.out else None,
        resume=args.resume,
        command=command,
    )
    return 0


RECORDED_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")


def command_line(argv) -> str:
    """The command as run, prefixed by the OpenMP settings in effect (they decide the step time:
    multi-thread OpenMP with the default busy-wait policy on a shared CPU runs many times slower)."""
    env = " ".join(f"{k}={os.environ[k]}" for k in RECORDED_ENV if k in os.environ)
    return (env + " " if env else "") + "python -m trainer.train " + " ".join(argv)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.train", description=__doc__.splitlines()[0])
    add_arguments(p)
    argv = sys.argv[1:] if argv is None else argv
    try:
        return run_args(p.parse_args(argv), command_line(argv))
    except LoopcertError as e:
        print(f"trainer.train: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    sys.exit(main())
