"""A decoder behind an OpenAI-compatible completions API, certified like any other.

`loopcert certify MODEL --decoder http://HOST:PORT/v1` builds an HTTPDecoder: every
generate() is one POST /v1/completions with the prompt as token ids, `n` 1 and the call's
seed. `generate_batch` sends each run of consecutive seeds of one prompt as requests of up to
`choices` samples each, through the API's `n` with the per-choice seed rule (below), and
keeps up to `concurrency` requests in flight at once (the server batches them): per-request
costs (HTTP, JSON, validation) are paid once per `choices` samples. The new token ids are
read from the response's `loopcert` extension (`loopcert.choices[i].tokens`): text does not
map back to ids in general.

Seeds. Choice k of a request with one prompt, `seed` s and `n` m decodes with seed s + k
(k = 0 .. m-1): the samples for seeds s .. s+m-1 are one request. This is `loopcert serve`'s
rule (choice i = p * n + k of a request decodes with seed + i, loopcert/serve/app.py); each
choice's extension entry states the seed it was asked for (`requested_seed`), and the decoder
refuses a response whose choices were not decoded for s + k.

Mapping of refdec.SamplingParams onto the API (the server maps it back the same way,
loopcert/serve/app.py):

    SamplingParams           request field
    temperature = 0          temperature 0           (greedy: argmax, lowest id on ties)
    temperature = t > 0      temperature t           (the API allows 0..2)
    top_k = None / k         top_k absent / k        (an extension; vLLM spells it the same)
    top_p = None / p         top_p 1.0 / p
    (no EOS in the protocol) ignore_eos true         (certify compares fixed-length outputs)
    seed (one sample)        seed, n 1
    seeds s .. s+m-1         seed s, n m             (choice k decodes with seed s + k)

The server must serve the model being certified: the factory compares the fingerprint the
server reports in /v1/models (`model_fingerprint`: the float32 weights and the config) with
the model certify gives it, and refuses any other model, naming both.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from refdec.errors import LoopcertError
from refdec.load import model_fingerprint
from refdec.sampling import SamplingParams

TIMEOUT_S = 600.0
CONCURRENCY = 16  # requests in flight
CHOICES = 16  # samples per request (the API's n) in generate_batch


def request_body(
    model_id: str, prompt: Sequence[int], max_new_tokens: int, sampling: SamplingParams, seed: int, n: int = 1
) -> dict:
    """One request for the samples of seeds seed .. seed + n - 1 (choice k: seed + k)."""
    body = {
        "model": model_id,
        "prompt": [int(t) for t in prompt],
        "max_tokens": int(max_new_tokens),
        "n": int(n),
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

    def __init__(
        self,
        base_url: str,
        concurrency: int = CONCURRENCY,
        timeout: float = TIMEOUT_S,
        choices: int = CHOICES,
    ):
        self.base_url = base_url.rstrip("/")
        self.concurrency, self.choices, self.timeout = concurrency, choices, timeout
        self._connect()
        info = self._get("/models")
        data = info.get("data") or []
        if len(data) != 1:
            raise LoopcertError(f"{self.base_url}/models lists {len(data)} models; certify needs exactly one")
        self.model_id = data[0].get("id")
        self.info = data[0].get("loopcert") or {}
        self.fingerprint = self.info.get("fingerprint")
        self.label = f"{self.base_url} ({self.model_id})"

    def _connect(self) -> None:
        """A connection pool and request threads of this process's own: a forked certify worker
        (--jobs, proofs/run/jobs.py) inherits neither a usable socket nor live threads."""
        httpx = _httpx()
        self._pid = os.getpid()
        self._client = httpx.Client(
            timeout=self.timeout,
            limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency),
        )
        self._threads = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="loopcert-http")

    @property
    def client(self):
        if self._pid != os.getpid():
            self._connect()
        return self._client

    @client.setter
    def client(self, client) -> None:  # tests hand it a mock transport
        self._client = client

    @property
    def _pool(self) -> ThreadPoolExecutor:
        if self._pid != os.getpid():
            self._connect()
        return self._threads

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
        return self._request(prompt, max_new_tokens, sampling, seed, 1)[0]

    def _request(
        self, prompt, max_new_tokens: int, sampling: SamplingParams, seed: int, n: int
    ) -> list[list[int]]:
        """The new tokens of seeds seed .. seed + n - 1: one request with `n` choices."""
        r = self.client.post(
            self.base_url + "/completions",
            json=request_body(self.model_id, prompt, max_new_tokens, sampling, seed, n),
        )
        what = f"POST /completions (seed {seed}" + (f", n {n})" if n > 1 else ")")
        if r.status_code != 200:
            raise LoopcertError(f"{what} answered HTTP {r.status_code}: {r.text[:300]}")
        choices = (r.json().get("loopcert") or {}).get("choices")
        if not choices:
            raise LoopcertError(
                "the response has no loopcert.choices[].tokens extension: certify needs the new token ids"
            )
        if len(choices) != n:
            raise LoopcertError(f"{what} answered {len(choices)} choices")
        for k, c in enumerate(choices):
            asked = c.get("requested_seed", seed + k)
            if asked != seed + k:
                raise LoopcertError(
                    f"{what}: choice {k} was decoded for seed {asked}, not {seed + k} "
                    "(the per-choice seed rule is seed + k)"
                )
        return [[int(t) for t in c["tokens"]] for c in choices]

    def generate_batch(
        self, prompts, max_new_tokens: int, sampling: SamplingParams, seeds, eos_token_id=None
    ) -> list[list[int]]:
        """Runs of consecutive seeds of one prompt as requests of up to `choices` samples, up to
        `concurrency` requests in flight; results in input order."""
        if eos_token_id is not None:
            raise LoopcertError("HTTPDecoder.generate_batch: EOS is not part of the certify protocol")
        prompts, seeds = [list(p) for p in prompts], list(seeds)
        if len(prompts) != len(seeds):
            raise LoopcertError(f"{len(prompts)} prompts but {len(seeds)} seeds")
        groups: list[tuple[int, int]] = []  # (first index, samples)
        for i in range(len(seeds)):
            if groups:
                start, m = groups[-1]
                if m < self.choices and prompts[i] == prompts[start] and seeds[i] == seeds[start] + m:
                    groups[-1] = (start, m + 1)
                    continue
            groups.append((i, 1))
        futures = [
            self._pool.submit(self._request, prompts[i], max_new_tokens, sampling, seeds[i], m)
            for i, m in groups
        ]
        return [tokens for f in futures for tokens in f.result()]

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
