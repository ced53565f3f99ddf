"""A bounded loopback load test of `loopcert serve`: fixed clients, time and count.

`clients` concurrent clients (one asyncio task each, one HTTP connection each) send requests
for `seconds` or until `max_requests` were sent, whichever comes first. Request i carries
prompt i mod len(prompts) and seed base_seed + i, so every response can be checked against
the in-process decoder: `verify` decodes each (prompt, seed) with `generate` and compares the
tokens. Lost = sent but never answered 200; duplicated = a request index or completion id
answered twice. Latency is per request, send to last byte; aggregate tokens/s is completion
tokens over the wall time of the whole run.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from refdec.sampling import SamplingParams
from refdec.validate import check_int, check_number


@dataclass(frozen=True)
class LoadPlan:
    clients: int = 32  # concurrent clients, one HTTP connection each
    seconds: float = 30.0  # clients send requests this long ...
    max_requests: int = 5000  # ... or until this many were sent
    max_tokens: int = 16  # new tokens per request (EOS ignored)
    temperature: float = 0.8
    top_p: float = 0.95  # 1: no top-p
    base_seed: int = 1000  # request i samples with seed base_seed + i

    def __post_init__(self):
        for name in ("clients", "max_requests", "max_tokens"):
            check_int(f"LoadPlan.{name}", getattr(self, name), 1)
        check_int("LoadPlan.base_seed", self.base_seed, 0)
        check_number("LoadPlan.seconds", self.seconds, 0, low_open=True)
        check_number("LoadPlan.temperature", self.temperature, 0)
        check_number("LoadPlan.top_p", self.top_p, 0, 1, low_open=True)

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p if self.top_p < 1 else None)


def percentile(xs: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty sample."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 100)) - 1))
    return s[k]


async def _run(url: str, model_id: str, prompts: Sequence[Sequence[int]], plan: LoadPlan) -> dict:
    import httpx

    next_index = 0
    deadline = time.perf_counter() + plan.seconds
    records: list[dict] = []
    failures: list[dict] = []

    async def client(c: int) -> None:
        nonlocal next_index
        async with httpx.AsyncClient(base_url=url, timeout=max(120.0, 4 * plan.seconds)) as http:
            while time.perf_counter() < deadline and next_index < plan.max_requests:
                i = next_index
                next_index += 1  # one event loop: no other task runs between the read and the write
                body = {
                    "model": model_id,
                    "prompt": list(prompts[i % len(prompts)]),
                    "max_tokens": plan.max_tokens,
                    "temperature": plan.temperature,
                    "top_p": plan.top_p,
                    "seed": plan.base_seed + i,
                    "ignore_eos": True,
                }
                t0 = time.perf_counter()
                try:
                    r = await http.post("/completions", json=body)
                except httpx.HTTPError as e:
                    failures.append({"index": i, "client": c, "error": f"{type(e).__name__}: {e}"})
                    continue
                latency = time.perf_counter() - t0
                if r.status_code != 200:
                    failures.append(
                        {"index": i, "client": c, "error": f"HTTP {r.status_code}: {r.text[:200]}"}
                    )
                    continue
                data = r.json()
                ext = data["loopcert"]["choices"][0]
                records.append(
                    {
                        "index": i,
                        "id": data["id"],
                        "seed": ext["seed"],
                        "tokens": ext["tokens"],
                        "latency": latency,
                        "batch_size": ext["batch_size"],
                        "round": ext["round"],
                        "batched": ext["batched"],
                        "stats": ext["stats"],
                    }
                )

    t0 = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(plan.clients)))
    wall = time.perf_counter() - t0
    return {"sent": next_index, "records": records, "failures": failures, "wall_seconds": wall}


def run_load(url: str, model_id: str, prompts: Sequence[Sequence[int]], plan: LoadPlan) -> dict:
    """Drive the server; the raw records and the summary (no verification yet)."""
    raw = asyncio.run(_run(url, model_id, prompts, plan))
    recs = raw["records"]
    indices = [r["index"] for r in recs]
    ids = [r["id"] for r in recs]
    answered = set(indices)
    lost = sorted(set(range(raw["sent"])) - answered)
    duplicated = sorted({i for i in indices if indices.count(i) > 1} | {i for i in ids if ids.count(i) > 1})
    lat = [r["latency"] for r in recs]
    tokens = sum(len(r["tokens"]) for r in recs)
    summary = {
        "clients": plan.clients,
        "seconds": plan.seconds,
        "max_requests": plan.max_requests,
        "max_tokens": plan.max_tokens,
        "sent": raw["sent"],
        "completed": len(recs),
        "failed": len(raw["failures"]),
        "lost": lost,
        "duplicated": duplicated,
        "wall_seconds": raw["wall_seconds"],
        "completion_tokens": tokens,
        "tokens_per_s": tokens / raw["wall_seconds"] if raw["wall_seconds"] > 0 else 0.0,
        "requests_per_s": len(recs) / raw["wall_seconds"] if raw["wall_seconds"] > 0 else 0.0,
        "latency_p50_s": percentile(lat, 50) if lat else None,
        "latency_p99_s": percentile(lat, 99) if lat else None,
        "latency_max_s": max(lat) if lat else None,
        "mean_batch_size": statistics.fmean(r["batch_size"] for r in recs) if recs else None,
        "largest_batch": max((r["batch_size"] for r in recs), default=None),
        "rounds": len({r["round"] for r in recs}),
        "batched_share": sum(r["batched"] for r in recs) / len(recs) if recs else None,
        "acceptance_rate": statistics.fmean(r["stats"]["acceptance_rate"] for r in recs) if recs else None,
        "gamma": statistics.fmean(r["stats"]["gamma"] for r in recs) if recs else None,
        "failures": raw["failures"][:20],
    }
    return {"summary": summary, "records": recs}


def verify(
    records: Sequence[dict],
    prompts: Sequence[Sequence[int]],
    plan: LoadPlan,
    generate: Callable[[list[int], int], list[int]],
) -> dict:
    """Every response against generate(prompt, seed) in process; the mismatches, listed."""
    mismatches = []
    t0 = time.perf_counter()
    tokens = 0
    for r in sorted(records, key=lambda r: r["index"]):
        prompt = list(prompts[r["index"] % len(prompts)])
        want = generate(prompt, r["seed"])
        tokens += len(want)
        if want != r["tokens"]:
            mismatches.append(
                {"index": r["index"], "seed": r["seed"], "served": r["tokens"], "generate": want}
            )
    seconds = time.perf_counter() - t0
    return {
        "checked": len(records),
        "mismatches": mismatches,
        "in_process_sequential_tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
        "in_process_seconds": seconds,
    }
