"""A decoder behind an HTTP API (loopcert serve, vLLM, SGLang, any OpenAI-compatible server),
certified like any other (docs/decoders.md "Certify a vLLM or SGLang server").

`loopcert certify MODEL --decoder http://HOST:PORT/v1` builds an HTTPDecoder. It finds out
what serves the URL (proofs/decoders/server_info.py: `--server auto`, or the kind named),
checks that it serves MODEL, and speaks that server's dialect (proofs/decoders/dialects.py:
every sampling field explicit, every answer validated) over one HTTPClient
(proofs/decoders/http_client.py: timeouts, bounded retries, a progress line).

`generate_batch` covers its samples with requests of up to `choices` samples each, up to the
transport's concurrency in flight (the server batches them): runs of consecutive seeds of one
prompt as one request with `n` choices (openai, vllm: choice j decodes with seed + j), or
`choices` items of SGLang's /generate, each with its own sampling_seed.

Seeds. loopcert serve states the seed each choice decoded for, and every answer is checked.
vLLM (and a plain OpenAI-compatible server) does not, so the first sampled request with n > 1
is cross-checked: choices 1 and m-1 of (seed s, n m) must equal choice 0 of (seed s+1, n 1)
and (seed s+m-1, n 1). When they do not, the decoder says so on stderr and sends one sample
per request from then on: every sample is still drawn from its law, and a server that ignores
seeds altogether is then what the reproducibility check reports (NON-REPRODUCIBLE).

Compute dtype. vLLM and SGLang compute in the dtype they were started with (`--dtype`); the
decoder declares float32 for them (or --decoder-dtype), so the greedy check treats a tie
within float32 noise as it treats any float32 decoder (proofs.checks.greedy.compute_dtype).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from proofs.decoders.dialects import VLLM, Ask, Dialect, OpenAI, SGLang
from proofs.decoders.http_client import Answered, HTTPClient, Transport, httpx_module, stderr_line
from proofs.decoders.protocol import Refused
from proofs.decoders.server_info import SERVERS, ServerInfo, check_identity, detect
from refdec.errors import LoopcertError
from refdec.progress import Progress
from refdec.sampling import (
    ENGINE_FIELDS,
    MIN_P_FIRST,
    MIN_P_LAST,
    SPLIT_SCOPE,
    SUBTRACT,
    TEMPERATURE_FIRST,
    SamplingParams,
)
from refdec.validate import is_int

CHOICES = 16  # samples per request in generate_batch
ENGINE_DTYPE = "float32"  # what vLLM / SGLang servers are declared to compute in by default
DTYPES = ("float32", "float64", "bfloat16", "float16")
# what a plain OpenAI-compatible server is asked of the engines' other parameters: none (the
# OpenAI dialect sends them only to loopcert serve, proofs/decoders/dialects.py)
OPENAI_FIELDS: tuple[str, ...] = ()
REFUSALS = (400, 422)  # a client error answering parameters the server does not take


@dataclass(frozen=True)
class HTTPOptions:
    """certify's HTTP flags: --server, --http-timeout, --api-key, --decoder-dtype, --served-model."""

    server: str = "auto"
    transport: Transport = field(default_factory=Transport)
    compute_dtype: str | None = (
        None  # None: float32 for vLLM / SGLang / OpenAI, undeclared for loopcert serve
    )
    served_model: str | None = None  # what the server calls the certified model, when not MODEL
    # --boundaries: positions where the server's state changes shape (its KV block size, its
    # prefill chunk size, ...): certify's checks at depth cross each (proofs/boundaries.py)
    boundaries: tuple[int, ...] = ()
    model: str | None = None  # certify's MODEL as given (a folder or a name)
    choices: int = CHOICES

    def __post_init__(self):
        if any(not is_int(b, 1) for b in self.boundaries):
            raise LoopcertError(f"--boundaries must be positions (integers >= 1), got {self.boundaries!r}")
        if self.server not in SERVERS:
            raise LoopcertError(f"--server must be one of {', '.join(SERVERS)}, got {self.server!r}")
        if self.compute_dtype is not None and self.compute_dtype not in DTYPES:
            raise LoopcertError(
                f"--decoder-dtype must be one of {', '.join(DTYPES)}, got {self.compute_dtype!r}"
            )
        if not isinstance(self.choices, int) or self.choices < 1:
            raise LoopcertError(f"HTTP choices per request must be an int >= 1, got {self.choices!r}")


def dialect_for(info: ServerInfo) -> Dialect:
    if info.kind == "vllm":
        return VLLM(token_ids=info.token_ids)
    if info.kind == "sglang":
        return SGLang()
    return OpenAI(loopcert=info.kind == "loopcert")


class HTTPDecoder:
    """generate() / generate_batch() over the server at `url`, in its dialect.

    Every dialect (vLLM, SGLang, loopcert serve) samples temperature-first, and none has a field
    to ask otherwise: the decoder declares it (`sampler_order`) and refuses SamplingParams of
    another order by name rather than sending a request whose law the server would not follow."""

    sampler_order = TEMPERATURE_FIRST  # proofs.decoder_attributes.declared_sampler_order

    @property
    def sampling_fields(self) -> tuple[str, ...]:
        """The engines' other parameters its dialect sends (proofs.decoder_attributes.declared_sampling):
        vLLM, SGLang and loopcert serve take every one; a plain OpenAI server only OpenAI's own."""
        if isinstance(self.dialect, OpenAI) and not self.dialect.loopcert:
            return OPENAI_FIELDS
        return ENGINE_FIELDS

    @property
    def min_p_order(self) -> str:
        """SGLang masks min-p jointly with top-k / top-p (min-p-last); vLLM and loopcert serve
        apply it first (refdec.sampling's docstring)."""
        return MIN_P_LAST if isinstance(self.dialect, SGLang) else MIN_P_FIRST

    def __init__(
        self,
        url: str,
        options: HTTPOptions = HTTPOptions(),
        say: Progress = stderr_line,
        http: HTTPClient | None = None,
    ):
        """http: the transport to use (tests hand one over a mock); default one of its own."""
        self.url = url.rstrip("/")
        root = self.url.removesuffix("/v1")
        self.v1 = self.url[len(root) :]  # "/v1", or "" when the URL is the OpenAI base itself
        self.options, self.say = options, say
        self.http = http if http is not None else HTTPClient(root, options.transport, say)
        self.server = detect(self.http, self.url, self.v1, options.server)
        self.dialect = dialect_for(self.server)
        self.label = self.server.label
        if options.compute_dtype is not None:
            self.compute_dtype = options.compute_dtype
        elif self.server.kind != "loopcert":
            self.compute_dtype = ENGINE_DTYPE
        self.seed_hint = self.dialect.seed_hint
        self.server_boundaries = options.boundaries  # proofs/boundaries.py: source "server"
        # what the server reports of itself (loopcert serve's decoder, vLLM's KV block): declared
        self.boundaries = self.server.boundaries
        if self.server.speculation_widths:
            self.speculation_widths = self.server.speculation_widths
        self.vocab: int | None = None  # set by check_model
        self.choices = options.choices
        self._seed_lock = threading.Lock()
        self._choice_seeds: bool | None = None  # the cross-check's verdict, once made

    @property
    def description(self) -> str:
        """What the certificate's stamp says was certified: server, dialect, seed rule."""
        if isinstance(self.dialect, SGLang):
            seeds = "one item per sample, sampling_seed each"
        elif not self.dialect.unverified_choice_seeds:
            seeds = "choice k: seed + k, stated in each answer"
        elif self._choice_seeds is False:
            seeds = "n 1 per sample (choice k of a request did not decode with seed + k)"
        else:
            seeds = "choice k: seed + k" + (", cross-checked" if self._choice_seeds else "")
        ids = "" if self.server.token_ids else ", ids through logprobs"
        return f"{self.label}, {self.dialect.name} dialect{ids}, seeds: {seeds}"

    def check_model(self, model) -> None:
        check_identity(self.server, model, self.options.model, self.options.served_model)
        self.vocab = model.cfg.vocab_size

    # -- decoding --------------------------------------------------------------------------------
    def generate(
        self, prompt, max_new_tokens: int, sampling: SamplingParams = SamplingParams(), seed: int = 0
    ) -> list[int]:
        ask = Ask((tuple(int(t) for t in prompt),), (int(seed),), int(max_new_tokens), _ordered(sampling))
        return self._post(ask)[0]

    def generate_batch(
        self, prompts, max_new_tokens: int, sampling: SamplingParams, seeds, eos_token_id=None
    ) -> list[list[int]]:
        """Requests of up to `choices` samples, in flight together; results in input order."""
        if eos_token_id is not None:
            raise LoopcertError("HTTPDecoder.generate_batch: EOS is not part of the certify protocol")
        sampling = _ordered(sampling)
        prompts = [tuple(int(t) for t in p) for p in prompts]
        seeds = [int(s) for s in seeds]
        if len(prompts) != len(seeds):
            raise LoopcertError(f"{len(prompts)} prompts but {len(seeds)} seeds")
        most = 1 if self._choice_seeds is False else self.choices
        asks = self.dialect.requests(prompts, seeds, int(max_new_tokens), sampling, most)
        self.http.begin(len(seeds))
        futures = [self.http.pool.submit(self._request, ask) for ask in asks]
        return [tokens for f in futures for tokens in f.result()]

    def _request(self, ask: Ask) -> list[list[int]]:
        """One request's tokens; the first sampled request of several choices is cross-checked
        when the dialect cannot state each choice's seed (module docstring)."""
        if not self.dialect.unverified_choice_seeds or ask.n < 2 or ask.sampling.greedy:
            if self._choice_seeds is False and ask.n > 1:
                return [self._post(ask.one(j))[0] for j in range(ask.n)]
            return self._post(ask)
        with self._seed_lock:
            if self._choice_seeds is None:
                got = self._post(ask)
                self._choice_seeds = all(got[j] == self._post(ask.one(j))[0] for j in sorted({1, ask.n - 1}))
                if not self._choice_seeds:
                    self.say(
                        f"{self.label}: choice j of a request (seed {ask.seeds[0]}, n {ask.n}) did not "
                        f"decode with seed {ask.seeds[0]} + j as vLLM's parallel sampling does: sending "
                        "one sample per request from now on"
                    )
                return got
        if self._choice_seeds is False:
            return [self._post(ask.one(j))[0] for j in range(ask.n)]
        return self._post(ask)

    def _post(self, ask: Ask) -> list[list[int]]:
        d = self.dialect
        path = d.path if d.at_root else self.v1 + d.path
        try:
            answer = self.http.post(path, d.body(self.server.model_id, ask), ask.what("POST " + path), ask.n)
        except Answered as e:
            # a client error on a request that sets the engines' other parameters: the server
            # refuses them (vLLM 0.32 answers 400 to min_p under speculative decoding); on a plain
            # request it stays a failure (proofs.decoders.protocol.Refused)
            if e.status in REFUSALS and ask.sampling.engine_fields():
                raise Refused(f"HTTP {e.status}: {e.text}") from None
            raise
        return d.tokens(answer, ask, self.label, self.vocab)

    def close(self) -> None:
        self.http.close()


def _ordered(sampling: SamplingParams) -> SamplingParams:
    """`sampling` when its conventions are the servers' (temperature-first; vLLM's min-p before
    top-k / top-p, and penalties "split": refdec.sampling's docstring); else a LoopcertError."""
    if sampling.order != TEMPERATURE_FIRST:
        raise LoopcertError(
            f"SamplingParams.order {sampling.order!r}: an HTTP server samples {TEMPERATURE_FIRST} "
            "(vLLM, SGLang and loopcert serve have no field to ask for another order)"
        )
    if sampling.penalized and (sampling.penalty_scope != SPLIT_SCOPE or sampling.penalty_window is not None):
        raise LoopcertError(
            f"SamplingParams.penalty_scope {sampling.penalty_scope!r}: vLLM, SGLang and loopcert serve count "
            f"the penalties {SPLIT_SCOPE!r} (repetition over prompt and output, frequency and presence "
            "over the output) and have no field to ask otherwise"
        )
    if sampling.penalty_sign != SUBTRACT:
        raise LoopcertError(
            f"SamplingParams.penalty_sign {sampling.penalty_sign!r}: vLLM, SGLang and loopcert serve "
            f"subtract the frequency and presence penalties ({SUBTRACT!r}) and have no field to ask otherwise"
        )
    return sampling


def is_http_spec(spec: str | None) -> bool:
    return isinstance(spec, str) and spec.startswith(("http://", "https://"))


URL_FORM = "the form is http://HOST:PORT/v1"


def check_url(spec: str) -> str:
    """`spec` when it is a server URL loopcert can reach: scheme http(s), a host, a port in
    1..65535 when one is given; else a LoopcertError naming what is wrong, before any check (a
    typo must not read as "connection refused" or a transport's traceback)."""
    from urllib.parse import urlsplit

    try:
        url = urlsplit(spec)
        port = url.port
    except ValueError as e:
        raise LoopcertError(f"decoder URL {spec!r} is not a URL ({e}); {URL_FORM}") from None
    if url.scheme not in ("http", "https"):
        raise LoopcertError(f"decoder URL {spec!r}: the scheme must be http or https; {URL_FORM}")
    host = url.hostname
    if not host or any(c.isspace() for c in host):
        raise LoopcertError(f"decoder URL {spec!r} has no valid host; {URL_FORM}")
    if port is not None and not 1 <= port <= 65535:
        raise LoopcertError(f"decoder URL {spec!r}: port {port} is outside 1..65535; {URL_FORM}")
    try:  # what the transport will parse: anything it refuses is refused here, by name
        httpx = httpx_module()
    except LoopcertError:
        return spec
    try:
        httpx.URL(spec)
    except (httpx.InvalidURL, ValueError, TypeError) as e:
        raise LoopcertError(f"decoder URL {spec!r} is not a URL ({e}); {URL_FORM}") from None
    return spec


# The decoders built in this process, by spec: a run's decoders share one connection per spec, the
# next run (connect=True) closes the last one's, and the command stamps what it found (`built`).
# The options are each factory's own (http_factory), never read from here.
_BUILT: dict[str, HTTPDecoder] = {}


def built(spec: str) -> HTTPDecoder | None:
    """The decoder this process built last for `spec`, if any (the stamp names the server it found)."""
    return _BUILT.get(spec)


def http_factory(spec: str, connect: bool = True, options: HTTPOptions | None = None):
    """--decoder http://HOST:PORT/v1 with its options (certify's HTTP flags; None: the defaults)
    -> factory(model) that checks the server serves `model`.

    connect=True reaches the server now (an unreachable one is a usage error before any check);
    False waits for the first build (`loopcert merge` assembles shards without a server). A URL
    that cannot be one is a usage error either way (check_url)."""
    check_url(spec)
    options = HTTPOptions() if options is None else options

    def decoder() -> HTTPDecoder:
        dec = _BUILT.get(spec)
        if dec is None or dec.options != options:
            _BUILT[spec] = dec = HTTPDecoder(spec, options)
        return dec

    if connect:
        old = _BUILT.pop(spec, None)  # a new run reaches the server afresh
        if old is not None:
            old.close()
        decoder()

    def factory(model):
        dec = decoder()
        dec.check_model(model)
        return dec

    return factory
