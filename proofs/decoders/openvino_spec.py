"""`--decoder openvino[:KEY=VALUE,...]`: what the spec string says, parsed and validated.

Intel's OpenVINO GenAI `LLMPipeline`, in this process (proofs/decoders/openvino_decoder.py builds
it; docs/decoders.md, "Certify OpenVINO GenAI"). The keys:

    backend=pa|sdpa        the attention backend (LLMPipeline's ATTENTION_BACKEND): pa, paged
                           attention, GenAI's default, which continuous batching and its speculative
                           decoding run on; sdpa, the stateful model as exported
    spec=plain|prompt_lookup
                           plain decoding (default), or prompt-lookup speculative decoding (drafts
                           are n-grams of the context)
    draft=DIR              draft-model speculative decoding with the Ouro folder DIR (exported as
                           the model is) as the draft; draft=self: the certified model drafts for
                           itself
    num_assistant=N        draft tokens per step (GenerationConfig.num_assistant_tokens, default 3);
                           only with spec=prompt_lookup or draft=
    max_ngram=N            prompt lookup's n-gram size (GenerationConfig.max_ngram_size, default 3)
    precision=f32|bf16|f16|default
                           the CPU plugin's INFERENCE_PRECISION_HINT (default f32: loopcert
                           certifies at f32 unless told). `default` leaves OpenVINO's own choice
                           (bf16 on a CPU with AMX or AVX512-BF16), and so every key below that the
                           spec does not give: precision=default is OpenVINO's defaults throughout
    kv=f32|f16|bf16|u8|u4|u3|default
                           KV_CACHE_PRECISION, the KV cache's type (default f32; OpenVINO's own is
                           the IR's runtime option, f16 in optimum-intel 2.2.0's exports, else the
                           plugin's u8)
    key_cache=TYPE, value_cache=TYPE
                           KEY_CACHE_PRECISION / VALUE_CACHE_PRECISION, the same types: the keys'
                           or the values' cache alone (default: as kv=)
    kv_group=N|default     KEY_CACHE_GROUP_SIZE and VALUE_CACHE_GROUP_SIZE, a quantized cache's
                           group size (N >= 0; default: OpenVINO's, 0)
    dq_group=N|default     DYNAMIC_QUANTIZATION_GROUP_SIZE, the group size of the activations'
                           dynamic quantization (default 0: off; OpenVINO's is 32, which quantizes
                           the activations of compressed-weight layers)
    execution_mode=performance|accuracy|default
                           EXECUTION_MODE_HINT (default: OpenVINO's, performance)
    denormals=on|off|default
                           CPU_DENORMALS_OPTIMIZATION, denormals flushed to zero (default:
                           OpenVINO's, off)
    threads=N              INFERENCE_NUM_THREADS (default: OpenVINO's, every core)
    config.KEY=V           an override of config.json's KEY in the folder that is exported (V an
                           integer, a number, true or false): it changes what OpenVINO computes,
                           not what certify judges against; the negative control of tox -e openvino
                           exports config.total_ut_steps=3 (one loop fewer than the model's 4)

Parsing needs no OpenVINO: a bad spec is a usage error before anything loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from refdec.errors import LoopcertError

NAME = "openvino"
SELF = "self"
BACKENDS = {"pa": "PA", "sdpa": "SDPA"}  # spec value -> LLMPipeline's ATTENTION_BACKEND
DEFAULT = "default"  # a property left to OpenVINO
PRECISIONS = ("f32", "bf16", "f16", DEFAULT)
CACHE_TYPES = ("f32", "f16", "bf16", "u8", "u4", "u3", DEFAULT)  # the CPU plugin's KV_CACHE_PRECISION values
EXECUTION_MODES = {"performance": "PERFORMANCE", "accuracy": "ACCURACY", DEFAULT: DEFAULT}
SWITCHES = {"on": True, "off": False, DEFAULT: DEFAULT}
DEFAULT_NUM_ASSISTANT = 3
DEFAULT_MAX_NGRAM = 3
# spec key -> (the CPU plugin's property, loopcert's default, the values it takes: None for an integer >= 0)
PROPERTIES = {
    "precision": ("INFERENCE_PRECISION_HINT", "f32", PRECISIONS),
    "kv": ("KV_CACHE_PRECISION", "f32", CACHE_TYPES),
    "key_cache": ("KEY_CACHE_PRECISION", DEFAULT, CACHE_TYPES),
    "value_cache": ("VALUE_CACHE_PRECISION", DEFAULT, CACHE_TYPES),
    "kv_group": (("KEY_CACHE_GROUP_SIZE", "VALUE_CACHE_GROUP_SIZE"), DEFAULT, None),
    "dq_group": ("DYNAMIC_QUANTIZATION_GROUP_SIZE", "0", None),
    "execution_mode": ("EXECUTION_MODE_HINT", DEFAULT, tuple(EXECUTION_MODES)),
    "denormals": ("CPU_DENORMALS_OPTIMIZATION", DEFAULT, tuple(SWITCHES)),
}
# every property that changes what the CPU plugin computes: the decoder reads back each one's
# effective value (openvino_decoder.effective_properties)
PLUGIN_PROPERTIES = (
    "INFERENCE_PRECISION_HINT",
    "KV_CACHE_PRECISION",
    "KEY_CACHE_PRECISION",
    "VALUE_CACHE_PRECISION",
    "KEY_CACHE_GROUP_SIZE",
    "VALUE_CACHE_GROUP_SIZE",
    "DYNAMIC_QUANTIZATION_GROUP_SIZE",
    "EXECUTION_MODE_HINT",
    "CPU_DENORMALS_OPTIMIZATION",
)
KEYS = ("backend", "spec", "draft", "num_assistant", "max_ngram", *PROPERTIES, "threads", "config.FIELD")


@dataclass(frozen=True)
class OpenVINOSpec:
    spec: str  # as given: the label certify stamps
    backend: str = "pa"
    prompt_lookup: bool = False
    draft: str | None = None  # a folder, SELF, or None
    num_assistant: int = DEFAULT_NUM_ASSISTANT
    max_ngram: int = DEFAULT_MAX_NGRAM
    precision: str = "f32"
    threads: int | None = None
    config: tuple[tuple[str, int | float | bool], ...] = ()  # config.json overrides, in order
    # the other PROPERTIES' values as given or defaulted: ((spec key, value or DEFAULT), ...)
    plugin: tuple[tuple[str, str], ...] = ()

    @property
    def speculative(self) -> bool:
        return self.prompt_lookup or self.draft is not None

    @property
    def mode(self) -> str:
        if self.prompt_lookup:
            return "prompt_lookup"
        return "plain" if self.draft is None else f"draft={self.draft}"

    @property
    def overrides(self) -> dict:
        return dict(self.config)

    def value(self, key: str) -> str:
        """The spec's value of PROPERTIES key `key` (DEFAULT: left to OpenVINO)."""
        return self.precision if key == "precision" else dict(self.plugin).get(key, DEFAULT)

    def plugin_properties(self) -> dict:
        """The CPU plugin's properties this spec sets (LLMPipeline's and the draft's), in the
        plugin's names and values; those left to OpenVINO are absent."""
        out: dict = {}
        for key, (names, _, values) in PROPERTIES.items():
            v = self.value(key)
            if v == DEFAULT:
                continue
            if key == "execution_mode":
                v = EXECUTION_MODES[v]
            elif key == "denormals":
                v = SWITCHES[v]
            elif values is None:
                v = int(v)
            for name in (names,) if isinstance(names, str) else names:
                out[name] = v
        if self.threads is not None:
            out["INFERENCE_NUM_THREADS"] = self.threads
        return out

    def settings(self) -> dict:
        """What a certificate's settings say of this decoder: the pipeline's properties as set
        ("(OpenVINO's)": left to it; the decoder adds what the plugin made of each)."""
        out = {"decoder": self.spec, "ATTENTION_BACKEND": BACKENDS[self.backend]}
        for key, (names, _, _) in PROPERTIES.items():
            v = self.value(key)
            for name in (names,) if isinstance(names, str) else names:
                out[name] = v if v != DEFAULT else "(OpenVINO's)"
        out["mode"] = self.mode
        if self.speculative:
            out["num_assistant_tokens"] = self.num_assistant
        if self.prompt_lookup:
            out["max_ngram_size"] = self.max_ngram
        if self.threads is not None:
            out["INFERENCE_NUM_THREADS"] = self.threads
        if self.config:
            out["exported_config_overrides"] = self.overrides
        return out


def is_openvino_spec(spec) -> bool:
    return isinstance(spec, str) and (spec == NAME or spec.startswith(NAME + ":"))


def parse_openvino_spec(spec: str) -> OpenVINOSpec:
    """ "openvino" or "openvino:KEY=VALUE,..." -> OpenVINOSpec; LoopcertError naming the bad part."""
    if not is_openvino_spec(spec):
        raise LoopcertError(f"--decoder {spec!r} is not an OpenVINO spec ({NAME}[:KEY=VALUE,...])")
    rest = spec[len(NAME) + 1 :]
    if spec != NAME and not rest:
        raise LoopcertError(
            f"--decoder {spec!r}: nothing after '{NAME}:' (drop the colon for plain OpenVINO)"
        )
    seen: dict[str, str] = {}
    config: dict[str, int | float | bool] = {}
    for item in rest.split(",") if rest else ():
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise LoopcertError(f"--decoder {spec!r}: {item!r} is not KEY=VALUE")
        if key.startswith("config.") and len(key) > len("config."):
            field = key[len("config.") :]
            if field in config:
                raise LoopcertError(f"--decoder {spec!r}: {key}= given twice")
            config[field] = _scalar(spec, key, value)
            continue
        if key not in KEYS:
            raise LoopcertError(f"--decoder {spec!r}: unknown key {key!r} (known: {', '.join(KEYS)})")
        if key in seen:
            raise LoopcertError(f"--decoder {spec!r}: {key}= given twice")
        seen[key] = value
    backend = seen.get("backend", "pa")
    if backend not in BACKENDS:
        raise LoopcertError(
            f"--decoder {spec!r}: backend must be one of {', '.join(BACKENDS)}, got {backend!r}"
        )
    mode = seen.get("spec", "plain")
    if mode not in ("plain", "prompt_lookup"):
        raise LoopcertError(
            f"--decoder {spec!r}: spec must be plain or prompt_lookup, got {mode!r} "
            "(a draft model: draft=DIR)"
        )
    draft = seen.get("draft")
    if draft is not None:
        if mode == "prompt_lookup":
            raise LoopcertError(f"--decoder {spec!r}: spec=prompt_lookup and draft= are two kinds of drafts")
        if draft != SELF and not (Path(draft) / "config.json").is_file():
            raise LoopcertError(
                f"--decoder {spec!r}: draft={draft!r} is not a model folder (no config.json there); "
                f"give a folder or draft={SELF}"
            )
    speculative = mode == "prompt_lookup" or draft is not None
    for key in ("num_assistant", "max_ngram"):
        if key in seen and not speculative:
            raise LoopcertError(f"--decoder {spec!r}: {key}= needs spec=prompt_lookup or draft=")
    if "max_ngram" in seen and mode != "prompt_lookup":
        raise LoopcertError(f"--decoder {spec!r}: max_ngram= needs spec=prompt_lookup")
    precision = seen.get("precision", "f32")
    plugin = tuple((key, _property(spec, key, seen.get(key), precision)) for key in PROPERTIES)
    return OpenVINOSpec(
        spec,
        backend,
        mode == "prompt_lookup",
        draft,
        _count(spec, "num_assistant", seen.get("num_assistant"), DEFAULT_NUM_ASSISTANT),
        _count(spec, "max_ngram", seen.get("max_ngram"), DEFAULT_MAX_NGRAM),
        precision,
        _count(spec, "threads", seen.get("threads"), None),
        tuple(config.items()),
        plugin[1:],
    )


def _property(spec: str, key: str, value: str | None, precision: str) -> str:
    """PROPERTIES key `key`'s value: as given (validated), else loopcert's default, or DEFAULT
    throughout under precision=default."""
    _, default, values = PROPERTIES[key]
    if value is None:
        return DEFAULT if precision == DEFAULT else default
    if values is None:
        if value != DEFAULT and not value.isdigit():
            raise LoopcertError(
                f"--decoder {spec!r}: {key} must be an integer >= 0 or {DEFAULT}, got {value!r}"
            )
        return value if value == DEFAULT else str(int(value))
    if value not in values:
        raise LoopcertError(f"--decoder {spec!r}: {key} must be one of {', '.join(values)}, got {value!r}")
    return value


def _count(spec: str, key: str, value: str | None, default):
    if value is None:
        return default
    if not value.isdigit() or int(value) < 1:
        raise LoopcertError(f"--decoder {spec!r}: {key} must be an integer >= 1, got {value!r}")
    return int(value)


def _scalar(spec: str, key: str, value: str) -> int | float | bool:
    try:
        v = json.loads(value)
    except ValueError:
        v = None
    if isinstance(v, (bool, int, float)):
        return v
    raise LoopcertError(
        f"--decoder {spec!r}: {key} must be an integer, a number, true or false, got {value!r}"
    )
