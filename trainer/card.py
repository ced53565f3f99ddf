"""Write refdec/weights/default/MODEL_CARD.md (and card.json): measured, stamped, never by hand.

    python -m trainer.card                      # the packaged default model
    python -m trainer.card --model-dir DIR      # any folder written by trainer.train

Figures are measured on the shipped weights (stored float16, computed float32) over evenly
spaced windows of the held-out split, re-derived from the running interpreter's stdlib and
checked against the model's data_manifest.json. This module measures and judges (a
reports.model_card.ModelCard); reports.model_card renders it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import torch

from analysis.cost_model import FLOAT32_TV_FLOOR, fit_depth_curve
from analysis.depth_profile import window_profile
from analysis.state_dynamics import init_sensitivity, iteration_gain, step_sizes, summarize_steps
from refdec.decode import generate
from refdec.errors import LoopcertError
from refdec.files import write_atomic, write_json
from refdec.load import DEFAULT_MODEL_DIR, load_model
from refdec.stamp import stamp as make_stamp
from refdec.tokenizer import byte_decode
from reports.model_card import ModelCard, render_card
from trainer.data import (
    build_manifest,
    collect_documents,
    concat,
    heldout_windows,
    split_documents,
    stdlib_root,
)

BPB_DEPTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
SAMPLE_PROMPTS = ("def ", "import ", "class ")
LONG_BUCKETS = ((0, 256), (256, 1024), (1024, 2048))
SHORT_BUCKETS = ((0, 16), (16, 64), (64, 256))
EXIT_KL = 5e-4  # Huginn's exit rule: stop at the first r with KL(p_r || p_{r-1}) < 5e-4
# The default model's targets on the held-out split (MODEL_CARD.md "Targets"): a usable bits/byte
# at R; depth must matter (bits/byte falls with r, a gap to R at depths 1 and 2); the TV envelope
# and the depth-2 greedy agreement in a Raven-like range; long contexts no worse than short ones.
TARGETS = {
    "bpb_R_max": 1.80,
    "monotone_depths": (1, 2, 3, 4, 6, 8),
    "gap1_min": 0.25,
    "gap2_min": 0.10,
    "alpha": (0.8, 2.5),
    "agree2": (0.75, 0.93),
    "long_ratio_max": 1.15,
}


def param_counts(model) -> dict[str, int]:
    parts = {
        "embedding": "embed_tokens",
        "prelude": "prelude",
        "adapter": "adapter",
        "core": "core",
        "coda": "coda",
        "final norm": "norm",
        "lm head": "lm_head",
    }
    out = {
        k: sum(p.numel() for n, p in model.named_parameters() if n.split(".")[0] == v)
        for k, v in parts.items()
    }
    out["total"] = sum(p.numel() for p in model.parameters())
    return out


def targets(card: ModelCard) -> list[dict]:
    """The TARGETS lines on a measured card: target, measured value, rule, pass."""
    R = card.config["recurrence"]
    bpb = {int(r): v for r, v in card.eval["bpb"].items()}
    agree = {int(r): v for r, v in card.eval["agree"].items()}
    mono = TARGETS["monotone_depths"]
    seq = [bpb[r] for r in mono]
    alpha = card.envelope["alpha"]
    long = card.long_context
    ratio = (long["bpb"]["1024-2048"] / long["bpb"]["0-256"]) if long and "1024-2048" in long["bpb"] else None
    lo, hi = TARGETS["alpha"]
    alo, ahi = TARGETS["agree2"]
    return [
        {
            "target": f"bits/byte at depth R = {R}",
            "value": f"{bpb[R]:.3f}",
            "rule": f"<= {TARGETS['bpb_R_max']}",
            "pass": bpb[R] <= TARGETS["bpb_R_max"],
        },
        {
            "target": f"bits/byte strictly decreasing over r = {', '.join(map(str, mono))}",
            "value": " > ".join(f"{v:.3f}" for v in seq),
            "rule": "strictly decreasing",
            "pass": all(a > b for a, b in zip(seq, seq[1:])),
        },
        {
            "target": "bpb(1) - bpb(R)",
            "value": f"{bpb[1] - bpb[R]:.3f}",
            "rule": f">= {TARGETS['gap1_min']}",
            "pass": bpb[1] - bpb[R] >= TARGETS["gap1_min"],
        },
        {
            "target": "bpb(2) - bpb(R)",
            "value": f"{bpb[2] - bpb[R]:.3f}",
            "rule": f">= {TARGETS['gap2_min']}",
            "pass": bpb[2] - bpb[R] >= TARGETS["gap2_min"],
        },
        {
            "target": "TV(p_r, p_R) envelope exponent alpha",
            "value": f"{alpha:.3f}",
            "rule": f"in [{lo}, {hi}]",
            "pass": math.isfinite(alpha) and lo <= alpha <= hi,
        },
        {
            "target": "greedy agreement, depth 2 vs R",
            "value": f"{agree[2]:.3f}",
            "rule": f"in [{alo}, {ahi}]",
            "pass": alo <= agree[2] <= ahi,
        },
        {
            "target": "bits/byte at positions 1024-2048 / positions 0-256 (depth R)",
            "value": "n/a" if ratio is None else f"{ratio:.3f}",
            "rule": f"<= {TARGETS['long_ratio_max']}",
            "pass": ratio is not None and ratio <= TARGETS["long_ratio_max"],
        },
    ]


def measure(
    model_dir: Path,
    n_windows: int,
    window: int,
    sample_tokens: int,
    log=print,
    long_windows: int = 2,
    samples: bool = True,
) -> ModelCard:
    """Measure the folder's model on held-out windows of its data and judge the TARGETS."""
    t0 = time.monotonic()
    model = load_model(model_dir, dtype=torch.float32)
    cfg = model.cfg
    R = cfg.recurrence
    manifest = json.loads((model_dir / "data_manifest.json").read_text())
    record = json.loads((model_dir / "train_record.json").read_text())
    root = Path(record["train_config"].get("data_root") or stdlib_root())
    docs = collect_documents(root)
    here = build_manifest(docs, root)
    held = concat(split_documents(docs)["heldout"])
    log(f"held-out: {held.numel():,} bytes; manifest match: {here['sha256'] == manifest['sha256']}")
    depths = sorted(set(range(1, R + 1)) | set(BPB_DEPTHS) | {2 * R})
    windows = heldout_windows(held, n_windows, window + 1)
    prof = window_profile(
        model,
        windows,
        depths,
        R,
        buckets=[b for b in SHORT_BUCKETS if b[0] < window],
        exit_kl=EXIT_KL,
        batch=4,
    )
    log(f"depth sweep done ({time.monotonic() - t0:.0f} s)")
    try:  # the certificate's and the speedup report's fit; float32 curve, float32 floor
        env = fit_depth_curve([prof.tv[r] for r in range(1, R + 1)], floor=FLOAT32_TV_FLOOR)
        alpha, beta, fit_rs = env.alpha, env.beta, list(env.depths)
    except LoopcertError:
        alpha, beta, fit_rs = float("nan"), float("nan"), []
    long = {}
    long_len = min(2048, cfg.max_seq_len - 1, held.numel() - 2)
    if long_windows and long_len > LONG_BUCKETS[0][1]:
        lp = window_profile(
            model,
            heldout_windows(held, long_windows, long_len + 1),
            sorted({1, 2, 4, 8, R}),
            R,
            buckets=[b for b in LONG_BUCKETS if b[1] <= long_len],
            batch=1,
        )
        long = {
            "n_windows": long_windows,
            "length": long_len,
            "bpb": {f"{a}-{b}": d["bpb"][R] for (a, b), d in lp.by_bucket.items()},
            "by_bucket": lp.to_dict()["by_bucket"],
        }
        log(f"long context done ({time.monotonic() - t0:.0f} s)")
    dyn_ids = windows[:4, :-1]
    steps = step_sizes(model, dyn_ids, 2 * R)
    dynamics = {
        "step_sizes": steps,
        **summarize_steps(steps),
        "gain_at_R": iteration_gain(model, windows[:1, : min(window, 128)], R),
        "init_sensitivity": {
            k: {str(r): v for r, v in d.items()}
            for k, d in init_sensitivity(model, dyn_ids, sorted({1, 2, 4, 8, 16, R, 2 * R})).items()
        },
    }
    log(f"state dynamics done ({time.monotonic() - t0:.0f} s)")
    sample_rows = []
    for prompt in SAMPLE_PROMPTS if samples else ():
        for depth in sorted({R, min(4, R)}, reverse=True):
            ids = generate(model, list(prompt.encode()), sample_tokens, depth=depth)
            sample_rows.append({"prompt": prompt, "depth": depth, "text": byte_decode(ids)})
    log(f"samples done ({time.monotonic() - t0:.0f} s)")
    card = ModelCard(
        config=cfg.to_dict(),
        params=param_counts(model),
        weights_bytes=(model_dir / "model.safetensors").stat().st_size,
        weights_dtype=str(next(iter(_stored_dtypes(model_dir)))),
        manifest={k: v for k, v in manifest.items() if k != "documents"},
        manifest_matches_this_python=here["sha256"] == manifest["sha256"],
        train={k: v for k, v in record.items() if k != "history"},
        history=record.get("history", []),
        eval={"n_windows": n_windows, "window": window, "dtype": "float32", **prof.to_dict()},
        long_context=long,
        envelope={"alpha": alpha, "beta": beta, "fit_depths": fit_rs},
        dynamics=dynamics,
        samples=sample_rows,
        card_seconds=round(time.monotonic() - t0, 1),
        targets=[],
    )
    return dataclasses.replace(card, targets=targets(card))


def _stored_dtypes(model_dir: Path):
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        return {f.get_slice(k).get_dtype() for k in f.keys()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.card", description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default=str(DEFAULT_MODEL_DIR))
    p.add_argument("--out", default=None, help="default: MODEL_CARD.md in the model folder")
    p.add_argument("--windows", type=int, default=32, help="held-out windows")
    p.add_argument("--window", type=int, default=256, help="bytes per window")
    p.add_argument("--sample-tokens", type=int, default=120)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--long-windows", type=int, default=2, help="held-out windows of 2048 bytes")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        model_dir = Path(args.model_dir)
        card = measure(
            model_dir, args.windows, args.window, args.sample_tokens, long_windows=args.long_windows
        )
    except LoopcertError as e:
        print(f"trainer.card: error: {e}", file=sys.stderr)
        return 2
    stamp = make_stamp(
        model_dir.name,
        "cpu",
        torch.float32,
        {"training": card.train["train_config"]["seed"], "evaluation": "none (fixed windows)"},
    )
    out = Path(args.out) if args.out else model_dir / "MODEL_CARD.md"
    write_atomic(out, lambda f: Path(f).write_text(render_card(card, stamp)))
    write_json(out.with_name("card.json"), {"stamp": stamp, **card.to_dict()})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
