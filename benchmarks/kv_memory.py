"""Peak RSS of certify's sampling decoders (fastdec's KV caches at scale).

Builds the quick plan's fastdec candidates the way certify builds its sampling decoders
(proofs.decoders.candidates.fastdec_grid on the run's float32 model, one decoder per setting, all
alive together as CertifyRun.sampling_decoders keeps them) and feeds each generate_batch calls of
the given batch sizes at the quick plan's sampling shape (a 32-token prompt, 3 new tokens), the
way proofs.decoders.draw chunks seeds. Prints the peak RSS (ru_maxrss) after loading and at the
end, and what the decoders' caches hold. Not a test: a measurement for docs/measurements.md.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/kv_memory.py /work/scale-ckpt/ouro-w512 \
        --batches 64,37,5,1
"""

from __future__ import annotations

import argparse
import resource
import time

import torch

import fastdec
import refdec
from proofs.decoders.candidates import fastdec_grid
from proofs.prompts import model_prompts
from refdec.sampling import SamplingParams


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # KiB on Linux


def held(dec) -> int:
    """Bytes of the KV caches a fastdec.Decoder keeps (counted from its engines' tensors)."""
    total = 0
    for eng in dec._engines.values():
        for t in eng.cache.timelines():
            total += sum(x.numel() * x.element_size() for x in (t.k, t.v, t.side_k, t.side_v))
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batches", default="64,37,5,1")
    ap.add_argument("--settings", type=int, default=None, help="only the first N settings of the grid")
    ap.add_argument("--tokens", type=int, default=3)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    t0 = time.perf_counter()
    print(f"fastdec from {fastdec.__file__}", flush=True)
    model = refdec.load_model(args.model, dtype=torch.float32)
    after_load = peak_gib()
    prompt = list(model_prompts(model, args.model, 1)[0])
    grid = fastdec_grid(model.cfg.recurrence, full=False)[: args.settings]
    decoders = [(c.label, c.build(model)) for c in grid]
    sampling = SamplingParams(temperature=0.7, top_k=4)
    for label, dec in decoders:
        for b in batches:
            dec.generate_batch([prompt] * b, args.tokens, sampling, list(range(b)))
        keys = sorted(dec._engines)
        print(f"{label}: engines (capacity, rows) {keys}, caches {held(dec) / 2**30:.2f} GiB", flush=True)
    total = sum(held(d) for _, d in decoders)
    print(
        f"model {args.model}, prompt {len(prompt)} tokens, batches {batches}, {len(decoders)} decoders: "
        f"peak RSS after loading {after_load:.2f} GiB, at the end {peak_gib():.2f} GiB; "
        f"caches held {total / 2**30:.2f} GiB; {time.perf_counter() - t0:.0f} s"
    )


if __name__ == "__main__":
    main()
