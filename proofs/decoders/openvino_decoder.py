"""Intel's OpenVINO GenAI as a certify decoder: `--decoder openvino[:backend=pa|sdpa,spec=plain|
prompt_lookup|draft=DIR,...]` (the keys: proofs/decoders/openvino_spec.py; docs/decoders.md,
"Certify OpenVINO GenAI").

`openvino_genai.LLMPipeline` on the CPU, in this process, over the IR that optimum-intel exports
from the certified model (proofs/decoders/openvino_export.py). loopcert writes no decoding loop
here: it builds one GenerationConfig per request from the SamplingParams (with `rng_seed` = the
seed), hands the prompt's token ids as an ov.Tensor to `generate` and reads the token ids of the
EncodedResults, so the certificate is about GenAI's code: its paged-attention (default) or SDPA
backend, its sampler, its prompt-lookup and draft-model speculative decoding.

Precision: the CPU plugin computes in bf16 on a CPU with AMX / AVX512-BF16 unless told otherwise;
this decoder sets INFERENCE_PRECISION_HINT=f32 unless the spec says `precision=` (the certificate's
settings state it), and declares the dtype it computes in (`compute_dtype`: the greedy check's tie
tolerance): the hint, or for `precision=default` the plugin's own (ov.Core's
INFERENCE_PRECISION_HINT property).

The laws GenAI samples from (its LogitProcessor): top-k, then temperature and softmax, then top-p
on the renormalised law: loopcert's "temperature-first" (refdec.sampling). Greedy is argmax.

Seeds: GenerationConfig.rng_seed per request; the same seed gives the same tokens (tested).
One request at a time (a lock): the pipeline is one object. No EOS: ignore_eos, so a request
stops only at max_new_tokens (stop_token_ids must still hold valid ids: GenAI refuses -1).
Families other than Ouro are declined (NotApplicable): optimum-intel 2.2.0 exports Ouro of
loopcert's looped families.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from proofs.decoders.openvino_export import EXTRA, OURO, exported_folder, versions
from proofs.decoders.openvino_spec import BACKENDS, SELF, OpenVINOSpec, parse_openvino_spec
from proofs.decoders.protocol import NotApplicable
from refdec.decode import check_generate_args
from refdec.errors import LoopcertError
from refdec.sampling import TEMPERATURE_FIRST, SamplingParams

PRECISION_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}
_LOCK = threading.Lock()


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
    """The certificate's word on the pipeline: its properties as set (the precision hint among
    them) and the versions, e.g. "LLMPipeline ATTENTION_BACKEND=PA, INFERENCE_PRECISION_HINT=f32,
    plain; openvino-genai 2026.4.1.0, ..."."""
    settings = parse_openvino_spec(spec).settings()
    shown = ", ".join(f"{k}={v}" for k, v in settings.items() if k not in ("decoder", "mode"))
    return f"LLMPipeline {shown}, {settings['mode']}; {openvino_versions()}"


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


def plugin_properties(spec: OpenVINOSpec) -> dict:
    props = {}
    if spec.precision != "default":
        props["INFERENCE_PRECISION_HINT"] = spec.precision
    if spec.threads is not None:
        props["INFERENCE_NUM_THREADS"] = spec.threads
    return props


def plugin_precision(ov, spec: OpenVINOSpec) -> str:
    """The precision the CPU plugin computes in under `spec`: the hint, or the plugin's default."""
    if spec.precision != "default":
        return spec.precision
    return ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()  # e.g. "bf16"


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

    def __init__(self, model, spec: OpenVINOSpec):
        ov, og = import_genai()  # the extra's message before any export
        check_family(model)
        self.model, self.spec = model, spec
        self.vocab_size = model.cfg.vocab_size
        self.folder = exported_folder(model, spec.overrides)
        props = plugin_properties(spec)
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
        self.precision = plugin_precision(ov, spec)
        self.compute_dtype = PRECISION_DTYPES.get(self.precision, "float32")
        self.settings = spec.settings() | {"plugin_precision": self.precision}
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
            f"{self.precision}; {openvino_versions()}) on {self.folder}"
        )

    def generation_config(self, max_new_tokens: int, sampling: SamplingParams, seed: int):
        """A fresh GenerationConfig (not the folder's generation_config.json: its penalties or
        default top-k would change the law) holding exactly what `sampling` says."""
        _, og = import_genai()
        cfg = og.GenerationConfig()
        cfg.max_new_tokens = max_new_tokens
        cfg.ignore_eos = True
        cfg.eos_token_id = 0  # never stops: ignore_eos (GenAI refuses the default -1)
        cfg.stop_token_ids = {0}
        cfg.rng_seed = int(seed)
        if sampling.greedy:
            cfg.do_sample = False
        else:
            cfg.do_sample = True
            cfg.temperature = float(sampling.temperature)
            if sampling.top_k is not None and sampling.top_k < self.vocab_size:
                cfg.top_k = int(sampling.top_k)
            if sampling.top_p is not None and sampling.top_p < 1.0:
                cfg.top_p = float(sampling.top_p)
        if self.spec.speculative:
            cfg.num_assistant_tokens = self.spec.num_assistant
        if self.spec.prompt_lookup:
            cfg.max_ngram_size = self.spec.max_ngram
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


def first_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return " ".join(lines[-2:]) if lines else type(e).__name__


def decoder_for(spec: str, model) -> OpenVINODecoder:
    """The decoder of `spec` for `model` (the factory's, the tests' and the engines table's)."""
    return OpenVINODecoder(model, parse_openvino_spec(spec))
