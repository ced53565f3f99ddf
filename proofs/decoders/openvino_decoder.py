"""Intel's OpenVINO GenAI as a certify decoder: `--decoder openvino[:backend=pa|sdpa,spec=plain|
prompt_lookup|draft=DIR,...]` (the keys: proofs/decoders/openvino_spec.py; docs/decoders.md,
"Certify OpenVINO GenAI").

`openvino_genai.LLMPipeline` on the CPU, in this process, over the IR that optimum-intel exports
from the certified model (proofs/decoders/openvino_export.py). loopcert writes no decoding loop
here: it builds one GenerationConfig per request from the SamplingParams (with `rng_seed` = the
seed), hands the prompt's token ids as an ov.Tensor to `generate` and reads the token ids of the
EncodedResults, so the certificate is about GenAI's code: its paged-attention (default) or SDPA
backend, its sampler, its prompt-lookup and draft-model speculative decoding.

Precision: every CPU plugin property that changes what it computes is set from the spec or left to
OpenVINO (openvino_spec.PROPERTIES: INFERENCE_PRECISION_HINT, KV_CACHE_PRECISION, KEY_ / VALUE_
CACHE_PRECISION and their group sizes, DYNAMIC_QUANTIZATION_GROUP_SIZE, EXECUTION_MODE_HINT,
CPU_DENORMALS_OPTIMIZATION), passed to LLMPipeline and the draft alike, and read back: the IR is
compiled once with the same properties and each one's effective value is stated (`effective`, in the
settings, the description, and the certificate's stamp when this process built the decoder: under
certify --jobs N the workers build it and the stamp states the properties as set). loopcert's
defaults are f32 compute, an f32 KV cache and no dynamic quantization; `precision=default` leaves
every property the spec does not give to OpenVINO. OpenVINO's own are lossy here (OpenVINO 2026.4.1
on this AVX512-BF16 CPU): bf16 compute, and the KV cache the IR's runtime option says,
KV_CACHE_PRECISION=f16 in optimum-intel 2.2.0's exports (the plugin's own default is u8), which the
f32 hint alone leaves in place (tested: the finding in docs/decoders.md). The decoder declares the
coarsest float it computes or caches in (`compute_dtype`: the greedy check's tie tolerance); a
quantized cache (u8, u4, u3) widens nothing, so its error shows.

The laws GenAI samples from (its LogitProcessor): the penalties on the logits, then top-k, the
temperature's softmax, min-p, top-p on what is left: loopcert's "temperature-first"
(refdec.sampling). Greedy is the argmax of the penalised logits.

The engines' other parameters (refdec.sampling; docs/certify.md#sampling-parameters): all but
logit_bias (GenerationConfig has none: refused by name), each a GenerationConfig field, under
conventions measured against refdec's exact law (tests/proofs/engines/test_openvino_decoder.py).
`repetition_penalty` divides a logit >= 0 of a token of the prompt or the output by r and
multiplies a negative one; `presence_penalty`, then `frequency_penalty` (x count) count the
output's tokens only (refdec's `penalty_scope = "split"`), and each is subtracted from a logit >= 0
and added to a negative one, the second judged on what the first left (refdec's `penalty_sign =
"by-sign"`: a penalised negative logit rises); GenAI refuses either outside [-2, 2] (`Refused`).
`min_p` keeps the tokens of the tempered top-k law >= min_p x its largest, unrenormalised, and
top-p judges the mass that is left: refdec's `min_p_order = "min-p-last"`. Stop tokens: GenAI
stops at `stop_token_ids` only without ignore_eos, and its EOS must be one of them, so a request
with stops sends them with ignore_eos off and the EOS the least of them (the stop is the last id
returned); `min_tokens` is min_new_tokens, which masks every stop token with -inf until then.
The model's EOS never reaches GenAI (certify hands none): `ignore_eos` is honoured as it is. In
speculative decoding the penalties count the tokens kept (greedy under penalties is refdec's token
for token in every mode), but min_new_tokens is misplaced: prompt lookup lets a stop through
before it, a draft model holds it back past it (a finding, pinned).

Seeds: GenerationConfig.rng_seed per request; the same seed gives the same tokens (tested).
One request at a time (a lock): the pipeline is one object. Without stop tokens: ignore_eos, so a
request stops only at max_new_tokens (stop_token_ids must still hold valid ids: GenAI refuses -1).
Families other than Ouro are declined (NotApplicable): optimum-intel 2.2.0 exports Ouro of
loopcert's looped families.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from proofs.decoders.openvino_export import EXTRA, OURO, exported_folder, versions
from proofs.decoders.openvino_spec import BACKENDS, PLUGIN_PROPERTIES, SELF, OpenVINOSpec, parse_openvino_spec
from proofs.decoders.protocol import NotApplicable, Refused, refuse_unhonoured
from refdec.decode import check_generate_args
from refdec.errors import LoopcertError
from refdec.sampling import BY_SIGN, MIN_P_LAST, SPLIT_SCOPE, TEMPERATURE_FIRST, SamplingParams

# coarsest last: the greedy check's tie tolerance is the coarsest float the plugin computes or caches in
PRECISION_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
# The engines' other parameters GenerationConfig carries (module docstring): all but logit_bias
SAMPLING_FIELDS = (
    "min_p",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "stop_token_ids",
    "min_tokens",
    "ignore_eos",
)
_LOCK = threading.Lock()
_EFFECTIVE: dict[str, dict[str, str]] = {}  # spec -> the plugin's effective properties (the stamp's)


def import_genai():
    """(openvino, openvino_genai); a LoopcertError naming the extra when either is missing."""
    try:
        import openvino as ov
        import openvino_genai as og
    except ImportError as e:
        raise LoopcertError(f"--decoder openvino needs openvino-genai ({e}): {EXTRA}") from None
    return ov, og


def openvino_versions() -> str:
    """ "openvino-genai 2026.4.1.0, openvino 2026.4.1, optimum-intel 2.2.0": the stamp's."""
    v = versions()
    dists = ("openvino-genai", "openvino", "optimum-intel")
    return ", ".join(f"{d} {v[d] or 'not installed'}" for d in dists)


def openvino_stamp(spec: str) -> str:
    """The certificate's word on the pipeline: its properties as set (each precision property
    among them), the plugin's effective values when a decoder of `spec` was built in this process,
    and the versions, e.g. "LLMPipeline ATTENTION_BACKEND=PA, INFERENCE_PRECISION_HINT=f32,
    KV_CACHE_PRECISION=f32, ..., plain; effective: INFERENCE_PRECISION_HINT=f32, ...;
    openvino-genai 2026.4.1.0, ..."."""
    settings = parse_openvino_spec(spec).settings()
    shown = ", ".join(f"{k}={v}" for k, v in settings.items() if k not in ("decoder", "mode"))
    effective = _EFFECTIVE.get(spec)
    said = f"; effective: {shown_properties(effective)}" if effective else ""
    return f"LLMPipeline {shown}, {settings['mode']}{said}; {openvino_versions()}"


def shown_properties(props: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in props.items())


def openvino_factory(spec: str):
    """--decoder openvino[:...] -> factory(model) -> OpenVINODecoder (the spec is parsed now: a bad
    one is a usage error before any check)."""
    parsed = parse_openvino_spec(spec)

    def factory(model):
        return OpenVINODecoder(model, parsed)

    return factory


def check_family(model) -> None:
    if model.cfg.family != OURO:
        raise NotApplicable(
            f"OpenVINO GenAI (optimum-intel's export) implements Ouro of loopcert's looped families; "
            f"{model.cfg.name} is {model.cfg.family}"
        )


def effective_properties(ov, folder: Path, props: dict) -> dict[str, str]:
    """What the CPU plugin makes of `props` for the IR in `folder`: the model compiled with them
    (the IR's own runtime options, e.g. optimum-intel's KV_CACHE_PRECISION=f16, apply where
    `props` does not say), each of PLUGIN_PROPERTIES read back from the compiled model, e.g.
    {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f16", ...}. One compilation of
    the model, released before the pipeline compiles it."""
    compiled = ov.Core().compile_model(str(folder / "openvino_model.xml"), "CPU", props)
    out = {}
    for name in PLUGIN_PROPERTIES:
        v = compiled.get_property(name)
        if hasattr(v, "get_type_name"):
            v = v.get_type_name()  # an element type: "f32", "u8"
        elif hasattr(v, "name"):
            v = v.name  # an enum: ExecutionMode.PERFORMANCE
        out[name] = str(v)
    del compiled
    return out


def coarsest_dtype(effective: dict[str, str]) -> str:
    """The coarsest float the plugin computes or caches in (PRECISION_DTYPES' order): the greedy
    check's tie tolerance. A quantized cache (u8, u4, u3) has no float and widens nothing."""
    got = [effective[k] for k in ("INFERENCE_PRECISION_HINT", "KEY_CACHE_PRECISION", "VALUE_CACHE_PRECISION")]
    order = list(PRECISION_DTYPES)
    return PRECISION_DTYPES[max((t for t in got if t in order), key=order.index, default="f32")]


@dataclass
class DraftStats:
    """Draft-model speculative decoding's counts since the decoder was built, read from GenAI's
    SDPerModelsPerfMetrics (prompt lookup reports none)."""

    drafted: int = 0
    accepted: int = 0

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


class OpenVINODecoder:
    """A loopcert Decoder over openvino_genai.LLMPipeline (module docstring)."""

    sampler_order = TEMPERATURE_FIRST  # proofs.decoder_attributes.declared_sampler_order
    # proofs.decoder_attributes.declared_sampling (module docstring): what GenerationConfig
    # carries, under GenAI's conventions
    sampling_fields = SAMPLING_FIELDS
    min_p_order = MIN_P_LAST
    penalty_scope = SPLIT_SCOPE
    penalty_sign = BY_SIGN

    def __init__(self, model, spec: OpenVINOSpec):
        ov, og = import_genai()  # the extra's message before any export
        check_family(model)
        self.model, self.spec = model, spec
        self.vocab_size = model.cfg.vocab_size
        self.folder = exported_folder(model, spec.overrides)
        props = spec.plugin_properties()
        self.effective = effective_properties(ov, self.folder, props)
        kwargs = dict(props, ATTENTION_BACKEND=BACKENDS[spec.backend])
        if spec.prompt_lookup:
            kwargs["prompt_lookup"] = True
        self.draft_folder = None
        if spec.draft is not None:
            self.draft_folder = self.folder if spec.draft == SELF else self._draft_folder(spec.draft)
            kwargs["draft_model"] = og.draft_model(str(self.draft_folder), "CPU", **props)
        try:
            self.pipe = og.LLMPipeline(str(self.folder), "CPU", **kwargs)
        except RuntimeError as e:  # a combination GenAI refuses (SDPA with a draft model)
            raise LoopcertError(f"--decoder {spec.spec!r}: LLMPipeline refused it: {first_line(e)}") from None
        self.precision = self.effective["INFERENCE_PRECISION_HINT"]
        self.compute_dtype = coarsest_dtype(self.effective)
        self.settings = spec.settings() | {"plugin_precision": self.precision, "effective": self.effective}
        _EFFECTIVE[spec.spec] = self.effective
        self.stats = DraftStats()

    def _draft_folder(self, folder: str) -> Path:
        import refdec

        draft = refdec.load_model(folder)
        check_family(draft)
        if draft.cfg.vocab_size != self.vocab_size:
            raise LoopcertError(
                f"--decoder {self.spec.spec!r}: the draft {folder} has vocab_size {draft.cfg.vocab_size}, "
                f"the model {self.vocab_size}"
            )
        return exported_folder(draft, {})

    @property
    def description(self) -> str:
        return (
            f"OpenVINO GenAI LLMPipeline ({self.spec.mode}, {BACKENDS[self.spec.backend]}, "
            f"{shown_properties(self.effective)}; {openvino_versions()}) on {self.folder}"
        )

    def generation_config(self, max_new_tokens: int, sampling: SamplingParams, seed: int):
        """A fresh GenerationConfig (not the folder's generation_config.json: its penalties or
        default top-k would change the law) holding exactly what `sampling` says, validated by
        GenAI (a value it refuses, e.g. a presence penalty outside [-2, 2], raises Refused)."""
        check_honoured(sampling)
        _, og = import_genai()
        cfg = og.GenerationConfig()
        cfg.max_new_tokens = max_new_tokens
        stops = set(sampling.stop_token_ids)
        if stops:  # GenAI stops at stop_token_ids unless ignore_eos; its EOS must be one of them
            cfg.ignore_eos = False
            cfg.stop_token_ids = stops
            cfg.eos_token_id = min(stops)
            cfg.min_new_tokens = int(sampling.min_tokens)  # masks every stop token (-inf) until then
        else:
            cfg.ignore_eos = True
            cfg.eos_token_id = 0  # never stops: ignore_eos (GenAI refuses the default -1)
            cfg.stop_token_ids = {0}
        cfg.rng_seed = int(seed)
        cfg.repetition_penalty = float(sampling.repetition_penalty)
        cfg.presence_penalty = float(sampling.presence_penalty)
        cfg.frequency_penalty = float(sampling.frequency_penalty)
        if sampling.greedy:
            cfg.do_sample = False
        else:
            cfg.do_sample = True
            cfg.temperature = float(sampling.temperature)
            if sampling.top_k is not None and sampling.top_k < self.vocab_size:
                cfg.top_k = int(sampling.top_k)
            if sampling.top_p is not None and sampling.top_p < 1.0:
                cfg.top_p = float(sampling.top_p)
            cfg.min_p = float(sampling.min_p)
        if self.spec.speculative:
            cfg.num_assistant_tokens = self.spec.num_assistant
        if self.spec.prompt_lookup:
            cfg.max_ngram_size = self.spec.max_ngram
        try:
            cfg.validate()
        except RuntimeError as e:
            raise Refused(
                f"GenAI's GenerationConfig refused {sampling.describe()}: {first_line(e)}"
            ) from None
        return cfg

    def generate(
        self, prompt, max_new_tokens: int, sampling: SamplingParams = SamplingParams(), seed: int = 0
    ) -> list[int]:
        ids, _ = check_generate_args(self.model, prompt, max_new_tokens, sampling, seed, None)
        if max_new_tokens == 0:
            return []
        import numpy as np

        ov, _ = import_genai()
        cfg = self.generation_config(max_new_tokens, sampling, seed)
        with _LOCK:
            out = self.pipe.generate(ov.Tensor(np.asarray([ids], dtype=np.int64)), cfg)
        metrics = out.extended_perf_metrics
        if metrics is not None and hasattr(metrics, "get_num_accepted_tokens"):
            self.stats.accepted += int(metrics.get_num_accepted_tokens())
            self.stats.drafted += int(metrics.get_num_draft_tokens())
        return [int(t) for t in out.tokens[0]]


def check_honoured(s: SamplingParams) -> None:
    """A LoopcertError naming what `s` sets that GenerationConfig cannot carry (a logit bias: it
    has none) or a convention other than GenAI's (module docstring)."""
    if s.order_matters and s.order != TEMPERATURE_FIRST:
        raise LoopcertError(
            f"SamplingParams.order {s.order!r}: GenAI's sampler is {TEMPERATURE_FIRST} (top-k, the "
            "temperature's softmax, min-p, top-p), and it has no other order"
        )
    lacks = "OpenVINO GenAI's GenerationConfig has no such field"
    refuse_unhonoured(
        s, SAMPLING_FIELDS, "OpenVINO GenAI", lacks, scope=SPLIT_SCOPE, sign=BY_SIGN, min_p_order=MIN_P_LAST
    )


def first_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return " ".join(lines[-2:]) if lines else type(e).__name__


def decoder_for(spec: str, model) -> OpenVINODecoder:
    """The decoder of `spec` for `model` (the factory's, the tests' and the engines table's)."""
    return OpenVINODecoder(model, parse_openvino_spec(spec))
