"""A decoder behind an OpenAI-compatible completions API, certified like any other (issue 13).

`loopcert certify MODEL --decoder http://HOST:PORT/v1` builds an HTTPDecoder: every
generate() is one POST /v1/completions with the prompt as token ids, `n` 1 and the call's
seed, and `generate_batch` keeps up to `concurrency` such requests in flight at once (the
server batches them). The new token ids are read from the response's `loopcert` extension
(`loopcert.choices[i].tokens`): text does not map back to ids in general.

Mapping of refdec.SamplingParams onto the API (the server maps it back the same way,
loopcert/serve/app.py):

    SamplingParams           request field
    temperature = 0          temperature 0           (greedy: argmax, lowest id on ties)
    temperature = t > 0      temperature t           (the API allows 0..2)
    top_k = None / k         top_k absent / k        (an extension; vLLM spells it the same)
    top_p = None / p         top_p 1.0 / p
    (no EOS in the protocol) ignore_eos true         (certify compares fixed-length outputs)
    seed                     seed                    (one request per seed, n = 1)

The server must serve the model being certified: the factory compares the fingerprint the
server reports in /v1/models (`model_fingerprint`: the float32 weights and the config) with
the model certify gives it, and refuses any other model, naming both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams

TIMEOUT_S = 600.0
CONCURRENCY = 64


def model_fingerprint(model) -> str:
    """sha256 of the config and every parameter rounded to float32 (a float64 copy of float32
    weights rounds back exactly, so certify's float64 oracle and a float32 server agree)."""
    h = hashlib.sha256(repr(model.cfg).encode())
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        h.update(name.encode())
        h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def request_body(
    model_id: str, prompt: Sequence[int], max_new_tokens: int, sampling: SamplingParams, seed: int
) -> dict:
    body = {
        "model": model_id,
        "prompt": [int(t) for t in prompt],
        "max_tokens": int(max_new_tokens),
        "n": 1,
        "seed": int(seed),
        "ignore_eos": True,
        "temperature": float(sampling.temperature),
    }
    if not sampling.greedy:
        if sampling.top_k is not None:
            body["top_k"] = int(sampling.top_k)
        if sampling.top_p is not None:
            body["top_p"] = float(sampling.top_p)
    return body


def _httpx():
    try:
        import httpx
    except ImportError:
        raise LoopcertError("--decoder http://...: needs httpx: pip install 'loopcert[serve]'") from None
    return httpx


class HTTPDecoder:
    """generate() / generate_batch() over POST {base_url}/completions."""

    def __init__(self, base_url: str, concurrency: int = CONCURRENCY, timeout: float = TIMEOUT_S):
        httpx = _httpx()
        self.base_url = base_url.rstrip("/")
        self.concurrency = concurrency
        self.client = httpx.Client(
            timeout=timeout,
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="loopcert-http")
        info = self._get("/models")
        data = info.get("data") or []
        if len(data) != 1:
            raise LoopcertError(f"{self.base_url}/models lists {len(data)} models; certify needs exactly one")
        self.model_id = data[0].get("id")
        self.info = data[0].get("loopcert") or {}
        self.fingerprint = self.info.get("fingerprint")
        self.label = f"{self.base_url} ({self.model_id})"

    def _get(self, path: str) -> dict:
        httpx = _httpx()
        try:
            r = self.client.get(self.base_url + path)
        except httpx.HTTPError as e:
            raise LoopcertError(
                f"--decoder {self.base_url}: cannot reach {path} ({type(e).__name__}: {e})"
            ) from None
        if r.status_code != 200:
            raise LoopcertError(
                f"--decoder {self.base_url}: GET {path} answered HTTP {r.status_code}: {r.text[:300]}"
            )
        return r.json()

    def check_model(self, model) -> None:
        if self.fingerprint is None:
            raise LoopcertError(
                f"{self.base_url} does not report a model fingerprint (/v1/models "
                "loopcert.fingerprint): cannot tell which model it serves"
            )
        mine = model_fingerprint(model)
        if mine != self.fingerprint:
            raise LoopcertError(
                f"{self.base_url} serves {self.model_id!r} (fingerprint "
                f"{self.fingerprint[:12]}), not {model.cfg.name!r} (fingerprint {mine[:12]})"
            )

    def generate(
        self, prompt, max_new_tokens: int, sampling: SamplingParams = SamplingParams(), seed: int = 0
    ) -> list[int]:
        r = self.client.post(
            self.base_url + "/completions",
            json=request_body(self.model_id, prompt, max_new_tokens, sampling, seed),
        )
        if r.status_code != 200:
            raise LoopcertError(
                f"POST /completions (seed {seed}) answered HTTP {r.status_code}: {r.text[:300]}"
            )
        ext = r.json().get("loopcert")
        if not ext or not ext.get("choices"):
            raise LoopcertError(
                "the response has no loopcert.choices[].tokens extension: certify needs the new token ids"
            )
        return [int(t) for t in ext["choices"][0]["tokens"]]

    def generate_batch(
        self, prompts, max_new_tokens: int, sampling: SamplingParams, seeds, eos_token_id=None
    ) -> list[list[int]]:
        """One request per sequence, up to `concurrency` in flight; results in input order."""
        if eos_token_id is not None:
            raise LoopcertError("HTTPDecoder.generate_batch: EOS is not part of the certify protocol")
        if len(prompts) != len(seeds):
            raise LoopcertError(f"{len(prompts)} prompts but {len(seeds)} seeds")
        futures = [
            self._pool.submit(self.generate, p, max_new_tokens, sampling, s) for p, s in zip(prompts, seeds)
        ]
        return [f.result() for f in futures]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()


def is_http_spec(spec: str | None) -> bool:
    return isinstance(spec, str) and spec.startswith(("http://", "https://"))


def http_factory(spec: str, connect: bool = True):
    """--decoder http://HOST:PORT/v1 -> factory(model) that checks the server serves `model`.

    connect=True reaches the server now (an unreachable one is a usage error before any check);
    False waits for the first build (`loopcert merge` assembles shards without a server)."""
    decs: list[HTTPDecoder] = [HTTPDecoder(spec)] if connect else []

    def factory(model):
        if not decs:
            decs.append(HTTPDecoder(spec))
        decs[0].check_model(model)
        return decs[0]

    return factory
