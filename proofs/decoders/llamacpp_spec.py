"""`--decoder llama.cpp[:KEY=VALUE,...]`: what the spec string says, parsed and validated.

llama.cpp through xllamacpp, in this process (proofs/decoders/llamacpp_decoder.py builds it;
docs/decoders.md, "Certify llama.cpp"). llama.cpp chooses speculative decoding per server, not
per request, so each spec is one server. The keys:

    draft=DIR         speculative decoding with a draft model (llama.cpp's draft-simple): the
                      model in folder DIR (a Nanbeige folder), converted to GGUF as the target is
    draft_loops=N     the same, the draft being the certified model's own weights run N loops,
                      1 <= N < its num_loops: self-speculation from fewer loops, through
                      llama.cpp's draft-model machinery
    ngram=KIND        speculative decoding from n-grams of the context: simple, map-k, map-k4v
                      (llama.cpp's ngram-simple, ngram-map-k, ngram-map-k4v)
    ngram_n=N         the n-gram length the lookup matches (default 2; llama.cpp's is 12)
    num_draft=N       draft tokens per step, N >= 1 (default 3, llama.cpp's draft n_max); for
                      ngram= the longest continuation drafted (llama.cpp's size_m)
    kv=TYPE           the KV cache's type: f16 (llama.cpp's default), f32, bf16. The greedy check
                      classifies ties at this precision (the decoder's compute_dtype)
    threads=N         llama.cpp's CPU threads (default 1)
    config.KEY=V      an override of what the GGUF says the model is (num_loops,
                      skip_loop_final_norm): a deliberately wrong decoder, tox -e llamacpp's
                      negative control. It changes what llama.cpp computes, not what certify
                      judges against.

At most one of draft=, draft_loops=, ngram=. Parsing needs no llama.cpp: a bad spec is a usage
error before anything loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from refdec.errors import LoopcertError

NAME = "llama.cpp"
EXTRA = (
    "pip install 'loopcert[llamacpp]'  (xllamacpp and gguf; tox -e llamacpp pins them: "
    "constraints-llamacpp.txt)"
)
DEFAULT_NUM_DRAFT = 3  # llama.cpp's speculative.draft.n_max
DEFAULT_NGRAM_N = 2
NGRAM_KINDS = {  # spec value -> xllamacpp's common_speculative_type member suffix
    "simple": "NGRAM_SIMPLE",
    "map-k": "NGRAM_MAP_K",
    "map-k4v": "NGRAM_MAP_K4V",
}
KV_TYPES = {"f16": "float16", "f32": "float32", "bf16": "bfloat16"}  # -> the dtype attention reads at
CONFIG_KEYS = {"num_loops": int, "skip_loop_final_norm": bool}


@dataclass(frozen=True)
class LlamaCppSpec:
    spec: str  # as given: the label certify stamps
    draft: str | None = None  # a folder
    draft_loops: int | None = None
    ngram: str | None = None  # a NGRAM_KINDS key
    ngram_n: int = DEFAULT_NGRAM_N
    num_draft: int = DEFAULT_NUM_DRAFT
    kv: str = "f16"
    threads: int = 1
    config: tuple[tuple[str, int | bool], ...] = ()

    @property
    def mode(self) -> str:
        """plain, draft or ngram: the server's speculative type."""
        if self.ngram is not None:
            return "ngram"
        return "draft" if self.draft is not None or self.draft_loops is not None else "plain"

    @property
    def speculative(self) -> bool:
        return self.mode != "plain"

    @property
    def overrides(self) -> dict:
        return dict(self.config)


def is_llamacpp_spec(spec) -> bool:
    return isinstance(spec, str) and (spec == NAME or spec.startswith(NAME + ":"))


def _count(spec: str, key: str, value: str, least: int = 1) -> int:
    if not value.isdigit() or int(value) < least:
        raise LoopcertError(f"--decoder {spec!r}: {key} must be an integer >= {least}, got {value!r}")
    return int(value)


def parse_llamacpp_spec(spec: str) -> LlamaCppSpec:
    """ "llama.cpp" or "llama.cpp:KEY=VALUE,..." -> LlamaCppSpec; LoopcertError naming the bad part."""
    if not is_llamacpp_spec(spec):
        raise LoopcertError(f"--decoder {spec!r} is not a llama.cpp spec ({NAME}[:KEY=VALUE,...])")
    rest = spec[len(NAME) + 1 :]
    if spec != NAME and not rest:
        raise LoopcertError(
            f"--decoder {spec!r}: nothing after '{NAME}:' (drop the colon for plain llama.cpp)"
        )
    seen: dict[str, object] = {}
    config: dict[str, int | bool] = {}
    for item in rest.split(",") if rest else ():
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise LoopcertError(f"--decoder {spec!r}: {item!r} is not KEY=VALUE")
        if key in seen or (key.startswith("config.") and key[7:] in config):
            raise LoopcertError(f"--decoder {spec!r}: {key}= given twice")
        if key == "draft":
            if not (Path(value) / "config.json").is_file():
                raise LoopcertError(
                    f"--decoder {spec!r}: draft={value!r} is not a model folder (no config.json there)"
                )
            seen[key] = value
        elif key in ("draft_loops", "num_draft", "ngram_n", "threads"):
            seen[key] = _count(spec, key, value)
        elif key == "ngram":
            if value not in NGRAM_KINDS:
                raise LoopcertError(
                    f"--decoder {spec!r}: ngram must be one of {sorted(NGRAM_KINDS)}, got {value!r}"
                )
            seen[key] = value
        elif key == "kv":
            if value not in KV_TYPES:
                raise LoopcertError(
                    f"--decoder {spec!r}: kv must be one of {sorted(KV_TYPES)}, got {value!r}"
                )
            seen[key] = value
        elif key.startswith("config."):
            field = key[len("config.") :]
            if field not in CONFIG_KEYS:
                raise LoopcertError(
                    f"--decoder {spec!r}: {key}: the GGUF fields that can be overridden are "
                    f"{sorted(CONFIG_KEYS)}"
                )
            config[field] = _typed(spec, key, value, CONFIG_KEYS[field])
        else:
            raise LoopcertError(
                f"--decoder {spec!r}: unknown key {key!r} (known: draft, draft_loops, ngram, ngram_n, "
                "num_draft, kv, threads, config.FIELD)"
            )
    modes = [k for k in ("draft", "draft_loops", "ngram") if k in seen]
    if len(modes) > 1:
        raise LoopcertError(
            f"--decoder {spec!r}: {' and '.join(modes)} together (one speculative mode a server)"
        )
    if "num_draft" in seen and not modes:
        raise LoopcertError(f"--decoder {spec!r}: num_draft= needs draft=, draft_loops= or ngram=")
    if "ngram_n" in seen and "ngram" not in seen:
        raise LoopcertError(f"--decoder {spec!r}: ngram_n= needs ngram=")
    return LlamaCppSpec(
        spec,
        draft=seen.get("draft"),
        draft_loops=seen.get("draft_loops"),
        ngram=seen.get("ngram"),
        ngram_n=seen.get("ngram_n", DEFAULT_NGRAM_N),
        num_draft=seen.get("num_draft", DEFAULT_NUM_DRAFT),
        kv=seen.get("kv", "f16"),
        threads=seen.get("threads", 1),
        config=tuple(config.items()),
    )


def _typed(spec: str, key: str, value: str, kind: type) -> int | bool:
    try:
        v = json.loads(value)
    except ValueError:
        v = None
    ok = isinstance(v, bool) if kind is bool else (isinstance(v, int) and not isinstance(v, bool) and v >= 1)
    if not ok:
        want = "true or false" if kind is bool else "an integer >= 1"
        raise LoopcertError(f"--decoder {spec!r}: {key} must be {want}, got {value!r}")
    return v
