"""fastdec eager against compiled (fastdec/compiled.py), one run, one thread: greedy tokens/s of each
strategy at batch 1 and 16, and certify's sampling rate (samples/s of the quick plan's first case,
in generate_batch calls of 16 rows), with what compiling cost; beside llama.cpp's plain greedy
rate at batch 1 on the same checkpoint when xllamacpp is importable and the model is one it loads
(`tiny-nanbeige`: written to a temporary folder in the published layout, then loaded from it).
Not a test: the measurement behind docs/speed.md#compiled-steps and docs/measurements.md#compiled-steps.

    OMP_NUM_THREADS=1 python benchmarks/compiled.py tiny-loopcoder [--json out.json]
    OMP_NUM_THREADS=1 python benchmarks/compiled.py tiny-nanbeige   # in an env with xllamacpp

Every rate comes after warm-up calls of its own batch shapes (the compiles happen there, timed
apart as compile seconds); the eager and compiled decoders of a strategy (and llama.cpp) are timed
alternately, round by round, so the host's load falls on all of them (the ratios are the figures).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

import fastdec
import refdec
from proofs.run.plan import QUICK_CASES
from refdec.config import TINY_NANBEIGE
from refdec.sampling import SamplingParams
from speed.engines import NEW_TOKENS, prompts
from speed.settings import fastdec_configs

GREEDY = SamplingParams()
SAMPLING_ROWS = 16  # certify's sampling calls: rows of one prompt, one seed each


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def load(name: str):
    """refdec's model of `name`; tiny-nanbeige through a published folder (what llama.cpp reads)."""
    if name != TINY_NANBEIGE:
        return refdec.load_model(name, dtype=torch.float32)
    from refdec.checkpoints import write_published

    folder = Path(tempfile.mkdtemp(prefix="loopcert-nanbeige-"))
    write_published(refdec.LoopedLM(refdec.get_preset(TINY_NANBEIGE)).init_weights(0), folder)
    return refdec.load_model(str(folder), dtype=torch.float32)


def llamacpp(model):
    """llama.cpp's plain decoder of `model` (proofs.decoders.llamacpp_decoder), or None where
    xllamacpp is not importable or does not load the model's family."""
    try:
        import xllamacpp  # noqa: F401

        from proofs.decoders.llamacpp_decoder import decoder_for

        return decoder_for("llama.cpp", model)
    except Exception as e:  # noqa: BLE001 (the benchmark goes on without it, saying why)
        print(f"no llama.cpp row: {type(e).__name__}: {e}", flush=True)
        return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="tiny-loopcoder")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = load(args.model)
    ps = prompts(model.cfg.vocab_size)
    batches = {1: ps[:1], 16: ps[:16]}
    name, case, n_new = QUICK_CASES[0]
    rows = []
    llama = llamacpp(model)
    llama_secs = [0.0, 0]  # seconds, tokens
    if llama is not None:
        for p in ps[:2]:
            llama.generate(p, NEW_TOKENS, GREEDY, 0)
    for config in fastdec_configs(model.cfg.recurrence, full=False):
        decs = {c: fastdec.Decoder(model, config, compile=c, max_batch=16) for c in (False, True)}
        warm = {}
        for c, dec in decs.items():  # every shape the timed calls use, compiled here
            warm[c] = timed(
                lambda dec=dec: [
                    dec.generate_batch(b, NEW_TOKENS, GREEDY, list(range(len(b)))) for b in batches.values()
                ]
            )
            warm[c] += timed(
                lambda dec=dec: dec.generate_batch(
                    [ps[0]] * SAMPLING_ROWS, n_new, case, list(range(SAMPLING_ROWS))
                )
            )
        secs = {(c, k): 0.0 for c in decs for k in (1, 16, "samples")}
        for r in range(args.rounds):
            if llama is not None:
                llama_secs[0] += timed(lambda: llama.generate(batches[1][0], NEW_TOKENS, GREEDY, 0))
                llama_secs[1] += NEW_TOKENS
            for c, dec in decs.items():
                for b, batch in batches.items():
                    secs[c, b] += timed(
                        lambda dec=dec, batch=batch: dec.generate_batch(
                            batch, NEW_TOKENS, GREEDY, list(range(len(batch)))
                        )
                    )
                seeds = list(range(r * SAMPLING_ROWS, (r + 1) * SAMPLING_ROWS))
                secs[c, "samples"] += timed(
                    lambda dec=dec, seeds=seeds: dec.generate_batch(
                        [ps[0]] * SAMPLING_ROWS, n_new, case, seeds
                    )
                )
        for c, dec in decs.items():
            rows.append(
                {
                    "strategy": config.label,
                    "compiled": c,
                    "tok_s_b1": args.rounds * NEW_TOKENS / secs[c, 1],
                    "tok_s_b16": args.rounds * 16 * NEW_TOKENS / secs[c, 16],
                    "samples_s": args.rounds * SAMPLING_ROWS / secs[c, "samples"],
                    "warmup_s": warm[c],
                    "compile_s": dec.compile_seconds,
                }
            )
            row = rows[-1]
            print(
                f"{row['strategy']:<40} {'compiled' if c else 'eager   '} b=1 {row['tok_s_b1']:7.0f} tok/s  "
                f"b=16 {row['tok_s_b16']:7.0f} tok/s  sampling {row['samples_s']:6.1f} samples/s  "
                f"warm-up {row['warmup_s']:6.1f}s (compile {row['compile_s']:.1f}s)",
                flush=True,
            )
    if llama is not None:
        rate = llama_secs[1] / llama_secs[0]
        rows.append({"strategy": "llama.cpp plain", "compiled": None, "tok_s_b1": rate})
        print(f"{'llama.cpp plain (xllamacpp)':<40} b=1 {rate:7.0f} tok/s", flush=True)
    if args.json:
        meta = {
            "model": args.model,
            "torch": torch.__version__,
            "rounds": args.rounds,
            "case": name,
            "new_tokens": NEW_TOKENS,
            "date": time.strftime("%Y-%m-%d %H:%M"),
        }
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
