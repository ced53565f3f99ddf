"""The OpenAI completions API as pydantic models: what `loopcert serve` accepts and returns.

Requests are validated strictly: an unknown field, a wrong type or an out-of-range value is an
HTTP 400 naming the field (loopcert/serve/api_errors.py), never silently ignored or coerced. OpenAI
fields that would change the sampling law and that fastdec does not implement (best_of > n,
echo, suffix) are accepted only at their neutral value, so a client can never believe it sampled
a law it did not. The penalties and logit_bias are honoured (refdec.sampling: vLLM's conventions,
min-p before top-k / top-p, repetition over prompt and output, frequency and presence over the
output). A float field refuses NaN and infinities by name
(Python's json, which FastAPI reads bodies with, accepts the `NaN` and `Infinity` literals).
Extensions (as vLLM spells them): `top_k`, `ignore_eos`, `min_p`, `repetition_penalty`,
`stop_token_ids` and `min_tokens`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_N = 128  # choices per prompt (OpenAI: 128)
MAX_LOGPROBS = 5  # OpenAI's limit for the completions API
MAX_SEED = 2**63 - 1  # OpenAI seeds are int64; fastdec seeds are unsigned: negatives are refused
MAX_STOP = 4


def refuse_set(field: str, why: str):
    """A validator of a field loopcert accepts only at its neutral value (false, null, empty): any
    other value is refused, a 400 naming the field and `why`."""

    def check(cls, v):
        if v:
            raise ValueError(why)
        return v

    return field_validator(field)(classmethod(check))


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool = False


class CompletionRequest(BaseModel):
    """POST /v1/completions. Defaults are OpenAI's (max_tokens 16, temperature 1, top_p 1, n 1)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = None
    # text, token ids, or a batch of either (one choice block per prompt)
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int = Field(16, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0, allow_inf_nan=False)  # 0: greedy
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=1)  # extension; None: every token
    n: int = Field(1, ge=1, le=MAX_N)
    seed: int | None = Field(None, ge=0, le=MAX_SEED)  # None: the server draws one and reports it
    stop: str | list[str] | None = None
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False  # extension: decode max_tokens tokens whatever the EOS
    # -- the engines' other sampling parameters (refdec.SamplingParams' fields, vLLM's names) ------
    min_p: float = Field(0.0, ge=0.0, le=1.0, allow_inf_nan=False)  # extension
    repetition_penalty: float = Field(1.0, gt=0.0, le=100.0, allow_inf_nan=False)  # extension
    stop_token_ids: list[int] | None = None  # extension: a stop token ends a choice (it is included)
    min_tokens: int = Field(0, ge=0)  # extension: no stop token (nor the EOS) before this many
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0, allow_inf_nan=False)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0, allow_inf_nan=False)
    logit_bias: dict[str, float] | None = None  # {"token id": bias in [-100, 100]}
    user: str | None = None
    # Neutral values only (see the module docstring).
    echo: Literal[False] = False
    suffix: None = None
    best_of: int | None = None

    @field_validator("prompt")
    @classmethod
    def _prompt_nonempty(cls, v):
        if isinstance(v, list):
            if not v:
                raise ValueError("must not be empty")
            if any(isinstance(p, (list, str)) and not p for p in v):
                raise ValueError("must not contain an empty prompt")
        elif not v:
            raise ValueError("must not be empty")
        return v

    @field_validator("stop")
    @classmethod
    def _stop(cls, v):
        if isinstance(v, list) and (len(v) > MAX_STOP or any(not s for s in v)):
            raise ValueError(f"must be at most {MAX_STOP} non-empty strings")
        if isinstance(v, str) and not v:
            raise ValueError("must be a non-empty string")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v):
        for k, b in (v or {}).items():
            if not k.isdigit():
                raise ValueError(f"keys must be token ids (decimal strings), got {k!r}")
            if not (-100.0 <= b <= 100.0):  # NaN fails this too
                raise ValueError(f"bias of token {k} must be in [-100, 100], got {b!r}")
        return v

    @field_validator("stop_token_ids")
    @classmethod
    def _stop_ids(cls, v):
        if v is not None and any(t < 0 for t in v):
            raise ValueError("must hold token ids >= 0")
        return v

    def prompts(self) -> list[str | list[int]]:
        """The request's prompts, one per choice block."""
        p = self.prompt
        if isinstance(p, str) or (p and isinstance(p[0], int)):
            return [p]
        return list(p)

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
