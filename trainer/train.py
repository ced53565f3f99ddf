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
import dataclasses
import functools
import importlib
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from analysis.depth_profile import fused_attention_for, window_profile
from proofs.moved import REMOVED_IN, MovedWarning
from refdec.errors import LoopcertError
from refdec.files import write_atomic
from refdec.layers import rope_tables
from refdec.model import LoopedLM
from trainer.data import (
    build_manifest,
    collect_documents,
    concat,
    heldout_windows,
    sample_batch,
    split_documents,
    stdlib_root,
)
from trainer.export import DEFAULT_DIR, export
from trainer.recipes import CONFIGS, RECIPES, TrainConfig

DEFAULT_CKPT = Path("/tmp/loopcert-train")
LN2 = math.log(2.0)
# Names this module re-exported after its split (2026-12-03) that the docs told users to import from
# here: each read warns (MovedWarning), naming the module that holds it, until loopcert REMOVED_IN
# (docs/decoders.md, "Deprecation"; tests/test_public_api.py).
MOVED_NAMES = {"default_prompts": "trainer.export"}


def __getattr__(name: str):
    if name not in MOVED_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    home = MOVED_NAMES[name]
    warnings.warn(
        f"{__name__}.{name} is deprecated: import {name} from {home} "
        f"(it moved there; loopcert {REMOVED_IN} removes the old path)",
        MovedWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)


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
