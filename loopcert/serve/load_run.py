"""`loopcert bench --serve-load`: the load test against a `loopcert serve` subprocess, beside
the same decoder's in-process figures, measured in one run.

The server and the in-process decoder are built from the same `loopcert serve` arguments, so
every response can be compared with `generate` for its seed, and the throughput through HTTP
can be read against decoding the same requests in process: one after another (`generate`)
and, when the decoder has it, `clients` at a time (`generate_batch`).

Timing: wall clock (time.perf_counter) throughout, not speed.timing's protocol. That
protocol times one process's decode calls interleaved against a baseline and reports ratios;
here the work is split between two processes (the server decodes, this one waits on HTTP), so
only wall time measures it, and latency percentiles under concurrent load have no baseline to
interleave with.
"""

from __future__ import annotations

import argparse
import time

import torch

from loopcert.commands import serve as serve_cmd
from loopcert.commands.common import decoder_from_args, load_from_args
from loopcert.serve.loadtest import LoadPlan, run_load, verify
from loopcert.serve.process import ServerProcess
from proofs.decoders.protocol import BatchDecoder, tokens_of
from proofs.prompts import model_prompts
from refdec.progress import Progress


def serve_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="loopcert serve")
    serve_cmd.add_arguments(p)
    return p.parse_args(argv)


def in_process_batched(dec, records, prompts, plan: LoadPlan, batch: int) -> float | None:
    """tokens/s of generate_batch over the same requests, `batch` at a time (None without it)."""
    if not isinstance(dec, BatchDecoder) or not records:
        return None
    recs = sorted(records, key=lambda r: r["index"])
    tokens, t0 = 0, time.perf_counter()
    for lo in range(0, len(recs), batch):
        chunk = recs[lo : lo + batch]
        out = dec.generate_batch(
            [list(prompts[r["index"] % len(prompts)]) for r in chunk],
            plan.max_tokens,
            plan.sampling,
            [r["seed"] for r in chunk],
        )
        tokens += sum(len(tokens_of(o)) for o in out)
    return tokens / (time.perf_counter() - t0)


def serve_load(argv: list[str], plan: LoadPlan, progress: Progress) -> dict:
    args = serve_args(argv)
    torch.set_num_threads(args.threads)
    model = load_from_args(args)
    dec = decoder_from_args(args, model, max_batch=max(args.max_batch, plan.clients))
    prompts = model_prompts(model, args.model, 8)
    progress(f"serve-load: starting loopcert serve {' '.join(argv)}")
    with ServerProcess(argv) as server:
        model_id = server.health()["model"]
        progress(
            f"serve-load: {plan.clients} clients x {plan.seconds:g} s (at most {plan.max_requests} requests) "
            f"against {server.url}"
        )
        load = run_load(server.url, model_id, prompts, plan)
        health = server.health()
    s = load["summary"]
    progress(
        f"serve-load: {s['completed']}/{s['sent']} answered, {s['tokens_per_s']:.1f} tokens/s, "
        f"p50 {s['latency_p50_s']:.3f} s, p99 {s['latency_p99_s']:.3f} s; checking every response"
    )

    def generate(prompt, seed):
        return dec.generate(prompt, plan.max_tokens, plan.sampling, seed=seed).tokens

    check = verify(load["records"], prompts, plan, generate)
    batched = in_process_batched(dec, load["records"], prompts, plan, plan.clients)
    passed = (
        not s["lost"]
        and not s["duplicated"]
        and not s["failed"]
        and not check["mismatches"]
        and s["completed"] > 0
    )
    return {
        "passed": passed,
        "command_args": argv,
        "plan": plan.__dict__,
        "summary": s,
        "server_health": health,
        "verify": {k: v for k, v in check.items() if k != "mismatches"},
        "mismatches": check["mismatches"][:20],
        "mismatch_count": len(check["mismatches"]),
        "in_process": {
            "sequential_tokens_per_s": check["in_process_sequential_tokens_per_s"],
            "batched_tokens_per_s": batched,
            "batch": plan.clients,
        },
    }
