"""llama.cpp as a certify decoder, in process through xllamacpp: `--decoder llama.cpp[:KEY=VALUE,...]`
(the keys: proofs/decoders/llamacpp_spec.py; docs/decoders.md, "Certify llama.cpp").

loopcert writes no decoding loop here: it converts the certified model to the GGUF file llama.cpp
loads (proofs/decoders/llamacpp_gguf.py: float32 weights, arch `nanbeige`), starts llama.cpp's own
server in this process (`xllamacpp.Server`, no HTTP) with the spec's speculative mode, and sends
each sequence as one completion request of token ids, reading the token ids back
(`choices[0].logprobs.content[].id`). So the certificate is about llama.cpp's code: its forward,
its KV cache, its sampler chain and its speculative decoding.

Which models: llama.cpp in xllamacpp 2026.10.11549 loads the Nanbeige arch of loopcert's looped
families (Ouro's arch is on llama.cpp's master, PR #29823, in no wheel yet; Huginn/Raven and
LoopCoder have none). Any other model is declined (NotApplicable: "not applicable" on a tiny
preset, a failure on the certified model), as is a Nanbeige with llama3 RoPE scaling (the
converter does not write it).

What each request sends. Every sampling field llama.cpp has, so no server default decides the law
(its defaults are top_k 40, top_p 0.95, min_p 0.05, temperature 0.8, repeat_last_n 64): temperature,
top_k (0: off), top_p, typical_p 1, no dry, xtc, mirostat or dynamic temperature, and the sampler
chain itself, `samplers: ["penalties", "top_p", "min_p", "top_k", "temperature"]`: the penalties,
then top-p on the temperature-1 law, min-p and top-k masks on the same law, then the temperature.
That is refdec's "filters-first" convention (refdec.sampling), which this decoder declares
(llama.cpp's own default chain runs top-k before top-p, which neither refdec convention is).
`ignore_eos: true`: llama.cpp then sets the logits of end-of-generation tokens to -inf, and the
converter's only such token is one it appends past the model's vocabulary (llamacpp_gguf's
docstring), so the law over the model's tokens is untouched. `cache_prompt: false`: no request
reuses another's KV cache.

The engines' other parameters (refdec.sampling; docs/certify.md#sampling-parameters): all but
min_tokens (`sampling_fields`), each through its request field, under conventions measured against
refdec's exact law (tests/proofs/engines/test_llamacpp_decoder.py, from llama.cpp's
`post_sampling_probs`: the law each token was drawn from). `logit_bias` ([id, bias] pairs) is
added first, before the chain (common/sampling's logit-bias sampler); then the penalties sampler:
`repeat_penalty` divides a counted logit > 0 by r and multiplies the others, `frequency_penalty`
and `presence_penalty` subtract f x count and e, all three over the last `repeat_last_n` tokens of
prompt + output (the server accepts every prompt token into the sampler before the first token):
refdec's `penalty_scope = "context"`, with `penalty_window` sent as repeat_last_n (the declared
window is the server's default, 64; None: the model's context length, all of it; 0, "off", is
what a request without penalties sends). `min_p` keeps the tokens whose temperature-1 probability
is >= min_p x the largest (refdec's filters-first min-p). Stop tokens: llama.cpp's `stop` is a
list of strings, and each token's piece is "<id>" (llamacpp_gguf), which the text of a sequence
holds only as that token: so `stop_token_ids` are sent as their pieces, and llama.cpp ends the
sequence at the first (finish_reason "stop"), the stop token the last of the returned ids.
llama.cpp has no minimum length: `min_tokens` is refused by name, and so is a penalty under the
"split" scope (`check_honoured`). Greedy (temperature 0) runs the same chain: the argmax of the
biased, penalised logits. Speculative decoding samples the target with the same sampler at each
drafted position and accepts a draft token only when it is the one sampled, the penalties
counting the tokens kept (greedy under penalties is refdec's token for token in each mode).

Seeds: llama.cpp seeds its sampler's generator from the request's `seed` (a uint32; 0xFFFFFFFF
means "random", so seeds >= 2**32 - 1 are refused), so the same seed gives the same tokens.

Precision: the weights are float32; the KV cache is llama.cpp's default f16 unless kv= says
otherwise, so attention reads keys and values rounded to f16: the decoder declares that dtype as
its compute_dtype and the greedy check classifies near-ties at it.

Speculative statistics: each response's `timings.draft_n` / `draft_n_accepted` (present when the
server drafted) are summed in `stats`, so a run shows that drafting happened.
One request at a time (a lock; the server has one slot): results never depend on other requests.
"""

from __future__ import annotations

import importlib.metadata as md
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from proofs.decoders.llamacpp_gguf import piece, write_gguf
from proofs.decoders.llamacpp_spec import EXTRA, KV_TYPES, NGRAM_KINDS, LlamaCppSpec, parse_llamacpp_spec
from proofs.decoders.protocol import NotApplicable, refuse_unhonoured
from refdec.decode import check_generate_args
from refdec.errors import LoopcertError
from refdec.load import model_fingerprint
from refdec.sampling import CONTEXT_SCOPE, ENGINE_FIELDS, FILTERS_FIRST, SamplingParams

SEED_LIMIT = 2**32 - 1  # llama.cpp's LLAMA_DEFAULT_SEED (0xFFFFFFFF) draws a random seed
# the sampler chain (module docstring): filters-first, the penalties on the biased logits first
SAMPLERS = ["penalties", "top_p", "min_p", "top_k", "temperature"]
# The engines' other parameters llama.cpp honours through its request (module docstring): all but
# min_tokens, which it has no field for
SAMPLING_FIELDS = tuple(f for f in ENGINE_FIELDS if f != "min_tokens")
PENALTY_WINDOW = 64  # the server's default repeat_last_n (common_params_sampling.penalty_last_n)


def import_xllamacpp():
    """The xllamacpp module; a LoopcertError naming the extra to install when it is missing."""
    try:
        import xllamacpp
    except ImportError as e:
        raise LoopcertError(f"--decoder llama.cpp needs xllamacpp ({e}): {EXTRA}") from None
    return xllamacpp


def llamacpp_versions() -> str:
    """ "xllamacpp 2026.10.11549 (llama.cpp build 0, commit unknown)": what a certificate's stamp
    names (the wheel's BUILD_INFO)."""
    try:
        version = md.version("xllamacpp")
    except md.PackageNotFoundError:
        return "xllamacpp not installed"
    try:
        info = import_xllamacpp().BUILD_INFO
        build = f"build {info.get('build_number')}, commit {info.get('commit')}"
    except (LoopcertError, AttributeError):
        build = "build unknown"
    return f"xllamacpp {version} (llama.cpp {build})"


def llamacpp_factory(spec: str):
    """--decoder llama.cpp[:...] -> factory(model) -> LlamaCppDecoder (the spec is parsed now: a
    bad one is a usage error before any check)."""
    parsed = parse_llamacpp_spec(spec)

    def factory(model):
        return LlamaCppDecoder(model, parsed)

    factory.sampler_order = FILTERS_FIRST
    return factory


def check_servable(model) -> None:
    """NotApplicable for a model llama.cpp (this wheel) cannot run (module docstring)."""
    cfg = model.cfg
    if cfg.family != "nanbeige":
        raise NotApplicable(
            "llama.cpp (xllamacpp's wheel) loads the Nanbeige arch of loopcert's looped families "
            f"(Ouro's is on llama.cpp master, PR #29823, in no wheel yet); {cfg.name} is {cfg.family}"
        )
    if cfg.rope_scaling is not None:
        raise NotApplicable(f"{cfg.name}: llama3 RoPE scaling is not converted to GGUF here")


# -- GGUF files and servers, once per process ----------------------------------------------------
_DIR: list[tempfile.TemporaryDirectory] = []
_GGUF: dict[tuple, Path] = {}  # (fingerprint, num_loops, overrides) -> its file
_SERVERS: dict[tuple, object] = {}
_LOCK = threading.Lock()


def gguf_of(model, num_loops: int | None = None, overrides: dict | None = None) -> Path:
    """The GGUF file of `model` (written once per process, float32), with `num_loops` loops and the
    spec's config overrides."""
    overrides = dict(overrides or {})
    loops = overrides.pop("num_loops", num_loops)
    skip = overrides.pop("skip_loop_final_norm", None)
    key = (model_fingerprint(model), loops, skip)
    if key not in _GGUF:
        if not _DIR:
            _DIR.append(tempfile.TemporaryDirectory(prefix="loopcert-llamacpp-"))
        path = Path(_DIR[0].name) / f"model-{len(_GGUF)}.gguf"
        target = model if skip is None else _with_skip(model, skip)
        _GGUF[key] = write_gguf(target, path, num_loops=loops)
    return _GGUF[key]


def _with_skip(model, skip: bool):
    """The same weights under the other readout convention (config.skip_loop_final_norm=)."""
    from refdec.model import LoopedLM

    other = LoopedLM(model.cfg.replace(skip_loop_final_norm=skip))
    other.load_state_dict(model.state_dict())
    return other


@dataclass
class SpecStats:
    """Speculative decoding's counts since the decoder was built, from the responses' timings."""

    requests: int = 0
    tokens: int = 0
    proposed: int = 0  # timings.draft_n
    accepted: int = 0  # timings.draft_n_accepted

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.proposed if self.proposed else None


def request(
    ids: Sequence[int], max_new_tokens: int, s: SamplingParams, seed: int, vocab_size: int, max_len: int
) -> dict:
    """The completion request of one sequence (module docstring: every field sent). `max_len`: the
    model's context length, the penalties' window when s.penalty_window is None (the whole context)."""
    if s.order_matters and s.order != FILTERS_FIRST:
        raise LoopcertError(
            f"SamplingParams.order {s.order!r}: this decoder runs llama.cpp's sampler chain as "
            f"{SAMPLERS} ({FILTERS_FIRST}); it has no temperature-first chain"
        )
    check_honoured(s)
    top_k = s.top_k if s.top_k is not None and s.top_k < vocab_size else 0
    top_p = s.top_p if s.top_p is not None else 1.0
    window = (int(max_len) if s.penalty_window is None else s.penalty_window) if s.penalized else 0  # 0: off
    return {
        "prompt": [int(i) for i in ids],
        "n_predict": int(max_new_tokens),
        "seed": int(seed),
        "temperature": float(s.temperature),
        "top_k": int(top_k),
        "top_p": float(top_p),
        "min_p": float(s.min_p),
        "typical_p": 1.0,
        "top_n_sigma": -1.0,
        "dynatemp_range": 0.0,
        "repeat_penalty": float(s.repetition_penalty),
        "repeat_last_n": int(window),
        "presence_penalty": float(s.presence_penalty),
        "frequency_penalty": float(s.frequency_penalty),
        "logit_bias": [[int(t), float(b)] for t, b in s.logit_bias],
        "stop": [piece(t) for t in s.stop_token_ids],
        "dry_multiplier": 0.0,
        "xtc_probability": 0.0,
        "mirostat": 0,
        "samplers": list(SAMPLERS),
        "ignore_eos": True,
        "cache_prompt": False,
        "logprobs": 1,
        "n": 1,
        "stream": False,
    }


def check_honoured(s: SamplingParams) -> None:
    """A LoopcertError naming what `s` sets that llama.cpp's request cannot carry: a minimum length
    (it has no such field), or penalties under a scope or sign other than its own."""
    lacks = "llama.cpp's completion request has no such field"
    refuse_unhonoured(s, SAMPLING_FIELDS, "llama.cpp", lacks, scope=CONTEXT_SCOPE)


class LlamaCppDecoder:
    """A loopcert Decoder over llama.cpp (module docstring)."""

    sampler_order = FILTERS_FIRST  # proofs.decoder_attributes.declared_sampler_order
    # proofs.decoder_attributes.declared_sampling: the fields llama.cpp's request carries, its scope
    sampling_fields = SAMPLING_FIELDS
    penalty_scope = CONTEXT_SCOPE
    penalty_window = PENALTY_WINDOW

    def __init__(self, model, spec: LlamaCppSpec):
        self.xl = import_xllamacpp()  # the extra's message before any conversion
        check_servable(model)
        self.model, self.spec = model, spec
        self.vocab_size = model.cfg.vocab_size
        self.compute_dtype = KV_TYPES[spec.kv]
        self.gguf = gguf_of(model, overrides=spec.overrides)
        self.draft_gguf = self._draft()
        self.server = self._server()
        self.stats = SpecStats()

    def _draft(self) -> Path | None:
        spec = self.spec
        if spec.draft_loops is not None:
            if spec.draft_loops >= self.model.cfg.recurrence:
                raise LoopcertError(
                    f"--decoder {spec.spec!r}: draft_loops={spec.draft_loops} must be below the model's "
                    f"num_loops={self.model.cfg.recurrence} (a draft runs fewer loops)"
                )
            return gguf_of(self.model, num_loops=spec.draft_loops)
        if spec.draft is not None:
            import refdec

            draft = refdec.load_model(spec.draft)
            check_servable(draft)
            if draft.cfg.vocab_size != self.vocab_size:
                raise LoopcertError(
                    f"--decoder {spec.spec!r}: the draft {spec.draft} has vocab_size "
                    f"{draft.cfg.vocab_size}, the model {self.vocab_size}"
                )
            return gguf_of(draft)
        return None

    def _server(self):
        spec = self.spec
        key = (str(self.gguf), str(self.draft_gguf), spec.mode, spec.ngram, spec.ngram_n, spec.num_draft)
        key += (spec.kv, spec.threads)
        if key not in _SERVERS:
            xl = self.xl
            p = xl.CommonParams()
            p.model.path = str(self.gguf)
            p.n_ctx = self.model.cfg.max_seq_len + spec.num_draft + 1  # room for a last draft
            p.n_parallel = 1
            p.cpuparams.n_threads = spec.threads
            p.cpuparams_batch.n_threads = spec.threads
            p.warmup = False
            p.verbosity = -1  # llama.cpp logs every request otherwise
            kv = {"f16": "F16", "f32": "F32", "bf16": "BF16"}[spec.kv]
            p.cache_type_k = p.cache_type_v = getattr(xl.ggml_type, f"GGML_TYPE_{kv}")
            kinds = xl.common_speculative_type
            if spec.mode == "draft":
                p.speculative.types = [kinds.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
                p.speculative.draft.mparams.path = str(self.draft_gguf)
                p.speculative.draft.n_max = spec.num_draft
                p.speculative.draft.cpuparams.n_threads = spec.threads
                p.speculative.draft.cpuparams_batch.n_threads = spec.threads
                p.speculative.draft.cache_type_k = p.speculative.draft.cache_type_v = p.cache_type_k
            elif spec.mode == "ngram":
                p.speculative.types = [getattr(kinds, f"COMMON_SPECULATIVE_TYPE_{NGRAM_KINDS[spec.ngram]}")]
                for g in (p.speculative.ngram_simple, p.speculative.ngram_map_k, p.speculative.ngram_map_k4v):
                    g.size_n, g.size_m = spec.ngram_n, spec.num_draft
            try:
                _SERVERS[key] = xl.Server(p)
            except RuntimeError as e:
                raise NotApplicable(
                    f"llama.cpp ({llamacpp_versions()}) cannot load {self.gguf}: {e}"
                ) from None
        return _SERVERS[key]

    @property
    def description(self) -> str:
        spec = self.spec
        how = {
            "plain": "plain",
            "draft": f"draft model {spec.draft or f'{spec.draft_loops} loop(s) of itself'}, "
            f"{spec.num_draft} draft tokens",
            "ngram": f"n-gram {spec.ngram} (n={spec.ngram_n}), up to {spec.num_draft} draft tokens",
        }[spec.mode]
        return f"llama.cpp {llamacpp_versions()} ({how}; f32 weights, {spec.kv} KV cache)"

    def generate(
        self, prompt, max_new_tokens: int, sampling: SamplingParams = SamplingParams(), seed: int = 0
    ) -> list[int]:
        ids, _ = check_generate_args(self.model, prompt, max_new_tokens, sampling, seed, None)
        if seed >= SEED_LIMIT:
            raise LoopcertError(
                f"seed {seed} >= 2**32 - 1: llama.cpp's seed is a uint32 and 0xFFFFFFFF is random"
            )
        if max_new_tokens == 0:
            return []
        body = request(ids, max_new_tokens, sampling, seed, self.vocab_size, self.model.cfg.max_seq_len)
        with _LOCK:
            r = self.server.handle_completions(body)
        return self._tokens(r, max_new_tokens, sampling.stop_token_ids)

    def _tokens(self, r: dict, n: int, stops: Sequence[int] = ()) -> list[int]:
        """The token ids of a response; anything else (an error, a short run that did not end at a
        stop token, an id outside the model's vocabulary) is a LoopcertError quoting it. Tokens past
        a stop are returned as llama.cpp sent them: certify's checks judge them."""
        if not isinstance(r, dict) or "choices" not in r:
            raise LoopcertError(f"llama.cpp answered without choices: {str(r)[:300]}")
        choice = r["choices"][0]
        try:
            out = [int(e["id"]) for e in choice["logprobs"]["content"]]
        except (KeyError, TypeError, ValueError) as e:
            raise LoopcertError(f"llama.cpp's answer has no token ids ({e}): {str(choice)[:300]}") from None
        reason = choice.get("finish_reason")
        stopped = reason == "stop" and 0 < len(out) <= n and out[-1] in stops
        if not stopped and (len(out) != n or reason != "length"):
            raise LoopcertError(
                f"llama.cpp returned {len(out)} of {n} tokens (finish_reason {reason!r}"
                + (f", the last {out[-1]} no stop of {sorted(stops)})" if reason == "stop" and out else ")")
            )
        bad = [t for t in out if not 0 <= t < self.vocab_size]
        if bad:
            raise LoopcertError(
                f"llama.cpp returned token {bad[0]} outside the model's vocabulary [0, {self.vocab_size})"
            )
        timings = r.get("timings") or {}
        self.stats.requests += 1
        self.stats.tokens += len(out)
        self.stats.proposed += int(timings.get("draft_n", 0))
        self.stats.accepted += int(timings.get("draft_n_accepted", 0))
        return out


def decoder_for(spec: str, model) -> LlamaCppDecoder:
    """The decoder of `spec` for `model` (the factory's, the tests' and the engines table's)."""
    return LlamaCppDecoder(model, parse_llamacpp_spec(spec))
