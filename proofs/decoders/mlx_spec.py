"""`--decoder mlx-lm[:KEY=VALUE,...]`: what the spec string says, parsed and validated.

Apple's mlx-lm, in this process (proofs/decoders/mlx_decoder.py builds it; docs/decoders.md,
"Certify mlx-lm"). The keys:

    draft=DIR       speculative decoding (mlx_lm.generate.speculative_generate_step) with the
                    model in folder DIR as the draft; `draft=self`: the certified model drafts
                    for itself. Without it: plain decoding (generate_step).
    num_draft=N     draft tokens per step, N >= 1 (default 2, mlx-lm's); only with draft=
    config.KEY=V    an override of config.json's KEY for the model mlx-lm builds (mlx-lm's
                    model_config, as vLLM's --hf-overrides), V an integer, a number, true or
                    false. It changes what mlx-lm computes, not what certify judges against:
                    a deliberately wrong decoder, the negative control of tox -e mlx.

Parsing needs no mlx: a bad spec is a usage error before anything loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from refdec.errors import LoopcertError

NAME = "mlx-lm"
DEFAULT_NUM_DRAFT = 2  # mlx_lm.generate.speculative_generate_step's num_draft_tokens
SELF = "self"


@dataclass(frozen=True)
class MLXSpec:
    spec: str  # as given: the label certify stamps
    draft: str | None = None  # a folder, SELF, or None (plain decoding)
    num_draft: int = DEFAULT_NUM_DRAFT
    config: tuple[tuple[str, int | float | bool], ...] = ()  # config.json overrides, in order

    @property
    def speculative(self) -> bool:
        return self.draft is not None

    @property
    def overrides(self) -> dict:
        return dict(self.config)


def is_mlx_spec(spec) -> bool:
    return isinstance(spec, str) and (spec == NAME or spec.startswith(NAME + ":"))


def parse_mlx_spec(spec: str) -> MLXSpec:
    """ "mlx-lm" or "mlx-lm:KEY=VALUE,..." -> MLXSpec; LoopcertError naming the bad part."""
    if not is_mlx_spec(spec):
        raise LoopcertError(f"--decoder {spec!r} is not an mlx-lm spec ({NAME}[:KEY=VALUE,...])")
    rest = spec[len(NAME) + 1 :]
    if spec != NAME and not rest:
        raise LoopcertError(f"--decoder {spec!r}: nothing after '{NAME}:' (drop the colon for plain mlx-lm)")
    draft, num_draft, config = None, None, {}
    for item in rest.split(",") if rest else ():
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise LoopcertError(f"--decoder {spec!r}: {item!r} is not KEY=VALUE")
        if key == "draft":
            if draft is not None:
                raise LoopcertError(f"--decoder {spec!r}: draft= given twice")
            if value != SELF and not (Path(value) / "config.json").is_file():
                raise LoopcertError(
                    f"--decoder {spec!r}: draft={value!r} is not a model folder (no config.json there); "
                    f"give a folder or draft={SELF}"
                )
            draft = value
        elif key == "num_draft":
            if num_draft is not None:
                raise LoopcertError(f"--decoder {spec!r}: num_draft= given twice")
            if not value.isdigit() or int(value) < 1:
                raise LoopcertError(f"--decoder {spec!r}: num_draft must be an integer >= 1, got {value!r}")
            num_draft = int(value)
        elif key.startswith("config.") and len(key) > len("config."):
            field = key[len("config.") :]
            if field in config:
                raise LoopcertError(f"--decoder {spec!r}: {key}= given twice")
            config[field] = _scalar(spec, key, value)
        else:
            raise LoopcertError(
                f"--decoder {spec!r}: unknown key {key!r} (known: draft, num_draft, config.FIELD)"
            )
    if num_draft is not None and draft is None:
        raise LoopcertError(f"--decoder {spec!r}: num_draft= needs draft=DIR (or draft={SELF})")
    return MLXSpec(spec, draft, DEFAULT_NUM_DRAFT if num_draft is None else num_draft, tuple(config.items()))


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
