"""Tokens/s of every strategy against the autoregressive baseline, measured in one run.

A quick developer's probe (whole generate() calls, settings timed one after another). The
speedup report and the regression gates are `loopcert bench` (proofs/speedup.py, proofs/gates.py):
interleaved rounds, decode-only times, ideal speedup and efficiency.

    python -m fastdec.bench tiny-raven --depth 8 --draft-depth 2 --second-depth 4 --tokens 100

MODEL is a preset (random weights), "default" (the packaged trained model) or a folder.
Random weights make every depth disagree, so drafts are rejected and speculation only costs;
`--damp-state F` (Raven only) multiplies the adapter's state half by F, which makes depths
agree the way a trained looped model's readouts converge: a speed-only knob, never used by
any correctness check. Each setting is timed over `--repeats` runs after a warm-up; the
median is reported. Set OMP_NUM_THREADS=1 for tiny models: threads only add overhead.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

import torch

from fastdec.config import DecodeConfig, default_draft_depth
from fastdec.decoder import Decoder
from refdec.errors import LoopcertError
from refdec.io import load_model
from refdec.sampling import SamplingParams


def settings(d1: int, d2: int | None, rewind: int | None, ahead: int) -> list[DecodeConfig]:
    rows = [DecodeConfig("autoregressive"),
            DecodeConfig("draft-verify", draft_depth=d1, draft_ahead=ahead),
            DecodeConfig("pipelined", draft_depth=d1)]
    if d2 is not None:
        rows.append(DecodeConfig("pipelined", draft_depth=d1, second_depth=d2))
    if rewind is not None:
        rows.append(DecodeConfig("adaptive-verify", draft_depth=d1, rewind_depth=rewind))
    return rows


def bench(model, depth: int, rows, prompt: list[int], n_tokens: int, repeats: int,
          sampling: SamplingParams, device: str = "cpu", fixed_width: int | None = None) -> list[dict]:
    out = []
    for config in rows:
        dec = Decoder(model, dataclasses.replace(config, depth=depth), device=device, fixed_width=fixed_width)
        label = config.label + ("" if config.lossless else " (LOSSY)")
        dec.generate(prompt, n_tokens, sampling, seed=0)  # warm-up (and CUDA graph capture)
        walls, res = [], None
        for r in range(repeats):
            if dec.device.type == "cuda":
                torch.cuda.synchronize()
            res = dec.generate(prompt, n_tokens, sampling, seed=r)
            walls.append(res.stats.seconds)
        s = res.stats
        wall = statistics.median(walls)
        out.append({"setting": label, "tokens_per_s": s.tokens / wall, "acceptance": s.acceptance_rate,
                    "gamma": s.gamma, "lanes": s.mean_live_lanes, "steps": s.steps,
                    "second": s.from_second})
    base = out[0]["tokens_per_s"]
    for row in out:
        row["speedup"] = row["tokens_per_s"] / base
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fastdec.bench", description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", default="tiny-raven")
    p.add_argument("--seed-weights", type=int, default=0)
    p.add_argument("--depth", type=int, default=None, help="target depth R (default the model's)")
    p.add_argument("--draft-depth", type=int, default=None, help="d1 (default: max(1, round(R/16)))")
    p.add_argument("--second-depth", type=int, default=None)
    p.add_argument("--rewind-depth", type=int, default=None, help="adds adaptive-verify at this depth")
    p.add_argument("--draft-ahead", type=int, default=4)
    p.add_argument("--tokens", type=int, default=100)
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--damp-state", type=float, default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--fixed-width", type=int, default=None)
    args = p.parse_args(argv)
    try:
        model = load_model(args.model, seed=args.seed_weights)
        if args.damp_state is not None:
            if model.adapter is None:
                raise LoopcertError("--damp-state needs a Raven model (it scales the adapter)")
            with torch.no_grad():
                model.adapter.weight[:, :model.cfg.d_model] *= args.damp_state
        depth = args.depth or model.cfg.recurrence
        prompt = [(7 * i + 3) % model.cfg.vocab_size for i in range(args.prompt_len)]
        d1 = args.draft_depth or default_draft_depth(depth)
        rows = bench(model, depth, settings(d1, args.second_depth, args.rewind_depth,
                                            args.draft_ahead),
                     prompt, args.tokens, args.repeats, SamplingParams(temperature=args.temperature),
                     args.device, args.fixed_width)
    except LoopcertError as e:
        print(f"fastdec.bench: error: {e}", file=sys.stderr)
        return 2
    print(f"model {args.model} R={depth} device={args.device} threads={torch.get_num_threads()} "
          f"tokens={args.tokens} T={args.temperature}")
    head = ("tok/s", 8), ("speedup", 8), ("accept", 7), ("gamma", 6), ("lanes", 6), ("steps", 6)
    print(f"{'setting':40s} " + " ".join(f"{h:>{w}s}" for h, w in head))
    for r in rows:
        print(f"{r['setting']:40s} {r['tokens_per_s']:8.1f} {r['speedup']:8.2f} {r['acceptance']:7.2f} "
              f"{r['gamma']:6.2f} {r['lanes']:6.2f} {r['steps']:6d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
