"""Write refdec/weights/default/MODEL_CARD.md (and card.json): measured, stamped, never by hand.

    python -m trainer.card                      # the packaged default model
    python -m trainer.card --model-dir DIR      # any folder written by trainer.train

Figures are measured on the shipped weights (stored float16, computed float32) over evenly
spaced windows of the held-out split, re-derived from the running interpreter's stdlib and
checked against the model's data_manifest.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

from proofs.stamp import stamp as make_stamp
from proofs.theorem2 import fit_depth_curve
from refdec.decode import generate
from refdec.errors import LoopcertError
from refdec.files import write_atomic
from refdec.io import DEFAULT_MODEL_DIR, load_model
from trainer.train import (
    build_manifest,
    collect_documents,
    concat,
    depth_readouts,
    evaluate,
    heldout_windows,
    split_documents,
    stdlib_root,
)

BPB_DEPTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
SAMPLE_PROMPTS = ("def ", "import ", "class ")
LONG_BUCKETS = ((0, 256), (256, 1024), (1024, 2048))
FLOAT32_TV_FLOOR = 1e-5  # below it a float32 mean TV is rounding noise


def param_counts(model) -> dict[str, int]:
    parts = {"embedding": "embed_tokens", "prelude": "prelude", "adapter": "adapter", "core": "core",
             "coda": "coda", "final norm": "norm", "lm head": "lm_head"}
    out = {k: sum(p.numel() for n, p in model.named_parameters() if n.split(".")[0] == v)
           for k, v in parts.items()}
    out["total"] = sum(p.numel() for p in model.parameters())
    return out


@torch.no_grad()
def long_context(model, held: torch.Tensor, depth: int, n: int, length: int) -> dict:
    """bits/byte at `depth` by position bucket over n windows of `length` bytes (beyond the
    training window: checks that long contexts decode without blowing up)."""
    w = heldout_windows(held, n, length + 1)
    lp = depth_readouts(model, w[:, :-1], [depth])[depth]
    nll = -lp.gather(-1, w[:, 1:, None])[..., 0] / math.log(2)  # (N, T)
    return {f"{a}-{b}": float(nll[:, a:b].mean()) for a, b in LONG_BUCKETS if b <= length}


def measure(model_dir: Path, n_windows: int, window: int, sample_tokens: int, log=print) -> dict:
    t0 = time.monotonic()
    model = load_model(model_dir, dtype=torch.float32)
    cfg = model.cfg
    R = cfg.recurrence
    manifest = json.loads((model_dir / "data_manifest.json").read_text())
    record = json.loads((model_dir / "train_record.json").read_text())
    docs = collect_documents(stdlib_root())
    here = build_manifest(docs, stdlib_root())
    held = concat(split_documents(docs)["heldout"])
    log(f"held-out: {held.numel():,} bytes; manifest match: {here['sha256'] == manifest['sha256']}")
    depths = sorted(set(range(1, R + 1)) | set(BPB_DEPTHS) | {2 * R})
    ev = evaluate(model, heldout_windows(held, n_windows, window + 1), depths, R)
    log(f"depth sweep done ({time.monotonic() - t0:.0f} s)")
    long = long_context(model, held, R, 2, 2048) if cfg.max_seq_len >= 2048 else {}
    try:  # the certificate's and the speedup report's fit; float32 curve, float32 floor
        env = fit_depth_curve([ev[r]["tv"] for r in range(1, R + 1)], floor=FLOAT32_TV_FLOOR)
        alpha, beta, fit_rs = env.alpha, env.beta, list(env.depths)
    except LoopcertError:
        alpha, beta, fit_rs = float("nan"), float("nan"), []
    samples = []
    for prompt in SAMPLE_PROMPTS:
        for depth in sorted({R, min(4, R)}, reverse=True):
            ids = generate(model, list(prompt.encode()), sample_tokens, depth=depth)
            samples.append({"prompt": prompt, "depth": depth,
                            "text": bytes(ids).decode("utf-8", errors="replace")})
    log(f"samples done ({time.monotonic() - t0:.0f} s)")
    return {
        "config": cfg.to_dict(), "params": param_counts(model),
        "weights_bytes": (model_dir / "model.safetensors").stat().st_size,
        "weights_dtype": str(next(iter(_stored_dtypes(model_dir)))),
        "manifest": {k: v for k, v in manifest.items() if k != "documents"},
        "manifest_matches_this_python": here["sha256"] == manifest["sha256"],
        "train": {k: v for k, v in record.items() if k != "history"}, "history": record.get("history", []),
        "eval": {"n_windows": n_windows, "window": window, "n_predictions": ev["n_tokens"],
                 "dtype": "float32", "per_depth": {str(r): ev[r] for r in depths}},
        "long_context_bpb": long, "envelope": {"alpha": alpha, "beta": beta, "fit_depths": fit_rs},
        "samples": samples, "card_seconds": round(time.monotonic() - t0, 1),
    }


def _stored_dtypes(model_dir: Path):
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        return {f.get_slice(k).get_dtype() for k in f.keys()}


def render(m: dict, stamp: dict) -> str:
    cfg, R = m["config"], m["config"]["recurrence"]
    per = {int(r): v for r, v in m["eval"]["per_depth"].items()}
    tr, man = m["train"], m["manifest"]
    tc = tr["train_config"]
    L = [f"# Model card: `{cfg['name']}` (loopcert's embedded default model)", "",
         f"AUTOGENERATED by `python -m trainer.card` on {stamp['date']}; commit {stamp['commit']}; "
         f"torch {stamp['torch']}; Python {stamp['python']}. Do not edit by hand.", "",
         "Load it with `refdec.load_model(\"default\")`; held-out prompts with "
         "`trainer.train.default_prompts()`.", "",
         "## Architecture", "",
         f"Raven-style looped LM (DESIGN.md section 2): prelude {cfg['n_prelude']} block, shared core of "
         f"{cfg['n_core']} blocks looped R = {R} times with adapter injection of the prelude output, coda "
         f"{cfg['n_coda']} block; `{cfg['block']}` blocks, rope `{cfg['rope']}`, initial state "
         f"`{cfg['init_state']}`. Byte-level vocabulary ({cfg['vocab_size']}), no special tokens.", ""]
    rows = [[k, str(cfg[k])] for k in ("d_model", "n_heads", "n_kv_heads", "head_dim", "intermediate_size",
                                  "n_prelude", "n_core", "n_coda", "recurrence", "max_seq_len",
                                  "rope_theta", "tie_embeddings", "embed_scale")]
    L += [tabulate(rows, ["field", "value"], tablefmt="github"), ""]
    L += [tabulate([[k, f"{v:,}"] for k, v in m["params"].items()], ["part", "parameters"],
                   tablefmt="github"), "",
          f"Weights: `model.safetensors`, {m['weights_bytes'] / 1e6:.2f} MB stored as {m['weights_dtype']}; "
          "loaded into float32 (or float64) for compute.", "",
          "## Data", "",
          f"The standard library `.py` sources of Python {man['python_version']} "
          f"({man['python_implementation']}), plus each `pydoc_data` topic rendered as text "
          f"({man['n_topics']} topics); {man['join']}.", "",
          tabulate([[s, man["n_documents"][s], f"{man['n_bytes'][s]:,}"] for s in ("train", "heldout")],
                   ["split", "documents", "bytes"], tablefmt="github"), "",
          f"Split rule: {man['split_rule']}. Manifest sha256 `{man['sha256']}` (over lines "
          "`split, name, sha256(content)`; the full list is in `data_manifest.json`). "
          + ("The running interpreter reproduces this manifest." if m["manifest_matches_this_python"] else
             "**The running interpreter does NOT reproduce this manifest: held-out figures below were "
             "measured on this interpreter's held-out split.**"), "",
          "## Training", "",
          f"Command: `{tr['command']}`, {tr['threads']} thread(s), torch {tr['torch_version']}, CPU. "
          f"Training time {tr['train_minutes']:.1f} min; {tr['steps']:,} steps of {tc['batch_size']} x "
          f"{tc['seq_len']} bytes ({tr['tokens_seen']:,} bytes seen, "
          f"{tr['tokens_seen'] / max(man['n_bytes']['train'], 1):.2f} epochs).", "",
          f"Depth per step (Huginn): r ~ Poisson(LogNormal(log {tc['mean_depth']} - sigma^2/2, "
          f"sigma={tc['depth_sigma']})), clipped to [1, {2 * R}]; gradient through the last "
          f"{tc['backprop_k']} iterations only. "
          + (f"Auxiliary shallow readout at s ~ U{{1..{tc['aux_max_depth']}}} "
             f"with gradient through its s iterations, weight {tc['aux_weight']}: CE(data) + "
             "KL(stopgrad p_r || p_s). " if tc["aux_max_depth"] else
             "No auxiliary shallow loss: a shallow depth is trained only when it is drawn as r. ")
          + "AdamW (betas 0.9, 0.95, weight decay "
          f"{tc['weight_decay']}), lr {tc['lr']} with {tc['warmup']} warmup steps and cosine decay to "
          f"{tc['min_lr_frac']} x over max(step/steps, time/max_minutes); grad clip {tc['grad_clip']}; "
          f"seed {tc['seed']}.", ""]
    hist = m["history"]
    if hist:
        pick = sorted({0, len(hist) // 4, len(hist) // 2, 3 * len(hist) // 4, len(hist) - 1})
        aux = "aux_bpb" in hist[-1]
        L += ["Training loss (running mean over the log interval, bits/byte; deep = sampled depth r"
              + (", shallow = aux depth s):" if aux else "):"), "",
              tabulate([[hist[i]["step"], hist[i]["min"], hist[i]["bpb"]]
                        + ([hist[i]["aux_bpb"]] if aux else []) for i in pick],
                       ["step", "minutes", "deep bpb"] + (["shallow bpb"] if aux else []),
                       tablefmt="github"), ""]
    ev = m["eval"]
    L += ["## Held-out evaluation", "",
          f"{ev['n_windows']} evenly spaced windows of {ev['window']} + 1 bytes of the held-out split, "
          f"{ev['n_predictions']:,} next-byte predictions (contexts of 0..{ev['window'] - 1} bytes), "
          f"{ev['dtype']}.", "",
          "### Bits per byte by depth", "",
          tabulate([[r, f"{per[r]['bpb']:.3f}"] for r in BPB_DEPTHS if r in per] +
                   ([[2 * R, f"{per[2 * R]['bpb']:.3f}"]] if 2 * R not in BPB_DEPTHS else []),
                   ["depth r", "bits/byte"], tablefmt="github"), ""]
    if m["long_context_bpb"]:
        L += [f"Beyond the {tc['seq_len']}-byte training window, at depth R, two held-out windows of "
              "2048 bytes "
              "(bits/byte by position bucket): "
              + ", ".join(f"positions {k}: {v:.3f}" for k, v in m["long_context_bpb"].items()) + ".", ""]
    L += [f"### Agreement with depth R = {R}", "",
          "TV = mean total-variation distance TV(p_r, p_R) over predictions (temperature 1, full "
          "vocabulary); agree = share of predictions whose greedy top-1 at depth r equals that at R.", "",
          tabulate([[f"{r} (R)" if r == R else r, f"{per[r]['bpb']:.3f}", f"{per[r]['tv']:.2e}",
                     f"{100 * per[r]['agree']:.1f}%"] for r in sorted(per)],
                   ["depth r", "bits/byte", f"TV(p_r, p_{R})", "greedy agree"], tablefmt="github"), "",
          "Power-law envelope TV <= beta r^-alpha (DESIGN.md Theorem 2; `proofs.theorem2.fit_depth_curve`, "
          f"the certificate's fit) over depths {m['envelope']['fit_depths']} (r < R with TV >= "
          f"{FLOAT32_TV_FLOOR:g}; smaller TV is float32 noise): "
          f"alpha = {m['envelope']['alpha']:.3f}, beta = {m['envelope']['beta']:.3f}.", "",
          "## Greedy samples", "",
          "Reference decoder (`refdec.generate`, no cache), greedy, from the bare prompt:", ""]
    for s in m["samples"]:
        L += [f"Prompt `{s['prompt']!r}`, depth {s['depth']}:", "", "```", s["prompt"] + s["text"], "```", ""]
    L += ["## Limits", "",
          f"A {m['params']['total'] / 1e6:.2f}M-parameter byte-level model trained for minutes on CPU: it "
          "writes Python-looking text, not working programs. Trained on windows of "
          f"{tc['seq_len']} bytes; longer contexts run (RoPE table {cfg['max_seq_len']}) but are out of "
          "distribution. It exists to make the decoders' acceptance rates, speedups and certificates "
          "meaningful on any machine, not to be used as a language model.", "",
          f"Card generated in {m['card_seconds']:.0f} s.", ""]
    return "\n".join(L)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.card", description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default=str(DEFAULT_MODEL_DIR))
    p.add_argument("--out", default=None, help="default: MODEL_CARD.md in the model folder")
    p.add_argument("--windows", type=int, default=32, help="held-out windows")
    p.add_argument("--window", type=int, default=256, help="bytes per window")
    p.add_argument("--sample-tokens", type=int, default=120)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        model_dir = Path(args.model_dir)
        m = measure(model_dir, args.windows, args.window, args.sample_tokens)
    except LoopcertError as e:
        print(f"trainer.card: error: {e}", file=sys.stderr)
        return 2
    stamp = make_stamp(model_dir.name, "cpu", torch.float32,
                       {"training": m["train"]["train_config"]["seed"], "evaluation": "none (fixed windows)"})
    out = Path(args.out) if args.out else model_dir / "MODEL_CARD.md"
    write_atomic(out, lambda f: Path(f).write_text(render(m, stamp)))
    write_atomic(out.with_name("card.json"),
                 lambda f: Path(f).write_text(json.dumps({"stamp": stamp, **m}, indent=1) + "\n"))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
