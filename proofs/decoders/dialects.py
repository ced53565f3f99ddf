"""Request and response mapping of each server dialect the HTTP decoder speaks.

A dialect turns one `Ask` (samples of one request: prompts, seeds, length, sampling) into a
JSON body, and the server's JSON answer back into the new token ids, refusing any answer that
is not exactly what certify asked for (a LoopcertError naming the server, the request and the
field: never a silent pass):

    every choice   finish reason "length", exactly max_new_tokens ids, each id in [0, V)

Every sampling field is sent explicitly. vLLM applies the model folder's
generation_config.json to each field a request leaves out (a checkpoint whose config sets
top_k 20 would silently sample with top_k 20); SGLang has its own defaults. So each body
spells out the temperature, top_k as the engine's "no top-k" value, top_p 1.0 when none,
min_p 0, neutral penalties, ignore_eos and a minimum length equal to the maximum (stop tokens
and EOS cannot end a sample early).

    refdec.SamplingParams  openai (loopcert serve)  vllm                     sglang sampling_params
    temperature t          temperature t            temperature t            temperature t
    top_k None / k         absent / top_k k         top_k 0 / k              top_k -1 / k
    top_p None / p         top_p 1.0 / p            top_p 1.0 / p            top_p 1.0 / p
    (none)                 presence, frequency 0    min_p 0, repetition 1,   min_p 0, repetition 1,
                                                    presence, frequency 0    presence, frequency 0
    fixed length           max_tokens, ignore_eos   max_tokens, min_tokens,  max_new_tokens,
                                                    ignore_eos               min_new_tokens, ignore_eos
    seeds s .. s+m-1       seed s, n m              seed s, n m              one item per sample,
                                                                             sampling_seed each
    the new ids            loopcert.choices[].tokens choices[].token_ids     output_ids
                           (or choices[].token_ids)  (vLLM < 0.10.2: logprobs.tokens "token_id:N")

Sources of the field names (read, not copied): vLLM 0.32
vllm/entrypoints/openai/completion/protocol.py (CompletionRequest, CompletionResponseChoice),
vllm/sampling_params.py (top_k 0 disables, -1 is accepted as the same); SGLang
python/sglang/srt/managers/io_struct.py (GenerateReqInput: input_ids and sampling_params each
one per item or a list), python/sglang/srt/sampling/sampling_params.py (top_k -1 disables,
min_new_tokens, sampling_seed), python/sglang/srt/entrypoints/http_server.py (/generate,
/get_model_info, /health); loopcert serve: loopcert/serve/schema.py, loopcert/serve/app.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from refdec.errors import LoopcertError
from refdec.sampling import MIN_P_LAST, SamplingParams
from refdec.validate import is_int

VLLM_NO_TOP_K = 0  # vllm/sampling_params.py: "top_k must be 0 (disable), or at least 1"
SGLANG_NO_TOP_K = -1  # sglang sampling_params.py: "top_k must be -1 (disable) or at least 1"


@dataclass(frozen=True)
class Ask:
    """One request: sample i decodes prompts[i] with seeds[i]."""

    prompts: tuple[tuple[int, ...], ...]
    seeds: tuple[int, ...]
    max_new_tokens: int
    sampling: SamplingParams

    @property
    def n(self) -> int:
        return len(self.seeds)

    def what(self, method: str) -> str:
        """The request as every error names it: its path, first seed and size."""
        return f"{method} (seed {self.seeds[0]}, n {self.n})"

    def one(self, j: int) -> Ask:
        """Sample j alone: its prompt and seed, n 1."""
        return Ask((self.prompts[j],), (self.seeds[j],), self.max_new_tokens, self.sampling)


def consecutive_runs(
    prompts: Sequence[Sequence[int]], seeds: Sequence[int], most: int
) -> list[tuple[int, int]]:
    """(first index, count) of each run of consecutive seeds of one prompt, `most` at a time: the
    samples one request with `n` choices covers (choice j: seed + j)."""
    runs: list[tuple[int, int]] = []
    for i in range(len(seeds)):
        if runs:
            start, m = runs[-1]
            if m < most and prompts[i] == prompts[start] and seeds[i] == seeds[start] + m:
                runs[-1] = (start, m + 1)
                continue
        runs.append((i, 1))
    return runs


def check_choice(server: str, what: str, k: int, ids, finish, ask: Ask, vocab: int | None) -> list[int]:
    """Choice k's new ids, or a LoopcertError naming the server, the request and the field. A
    choice ends at max_tokens (finish "length"), or at a stop token of the case's stop_token_ids
    (finish "stop", the stop token the last id: tokens past it are never the law's)."""
    where = f"{server}: {what}: choice {k}"
    stops = ask.sampling.stop_ids()
    if not isinstance(ids, list) or not all(is_int(t) for t in ids):
        raise LoopcertError(f"{where}: the token ids are not a list of ints: {str(ids)[:120]}")
    stopped = bool(ids) and ids[-1] in stops
    if finish != "length" and not (finish == "stop" and stopped):
        raise LoopcertError(
            f"{where} has finish reason {finish!r}, not 'length' (certify asks for exactly "
            f"{ask.max_new_tokens} tokens with EOS ignored"
            + (f", or a stop at one of the stop token ids {sorted(stops)})" if stops else ")")
        )
    if len(ids) != ask.max_new_tokens and not (stopped and len(ids) < ask.max_new_tokens):
        raise LoopcertError(f"{where} has {len(ids)} token ids, not max_tokens {ask.max_new_tokens}")
    bad = next((t for t in ids if vocab is not None and not 0 <= t < vocab), None)
    if bad is not None:
        raise LoopcertError(f"{where}: token id {bad} is outside the vocabulary [0, {vocab})")
    return [int(t) for t in ids]


class Dialect(ABC):
    name: str
    path: str
    at_root = False  # True: `path` is below the server's root, else below the OpenAI base (.../v1)
    seed_hint: str | None = None  # the server flag that makes seeds reproducible, if one does
    # True: choice j of (seed s, n m) is claimed to decode with seed s + j but the answer does
    # not say which seed each choice used, so the decoder cross-checks it once
    # (http_decoder.HTTPDecoder); False: checked in every answer, or one sample per item
    unverified_choice_seeds: bool = True

    def requests(self, prompts, seeds, max_new_tokens: int, sampling: SamplingParams, most: int) -> list[Ask]:
        """The requests covering samples (prompts[i], seeds[i]), in order, `most` per request."""
        return [
            Ask(
                tuple(tuple(p) for p in prompts[i : i + m]), tuple(seeds[i : i + m]), max_new_tokens, sampling
            )
            for i, m in consecutive_runs(prompts, seeds, most)
        ]

    @abstractmethod
    def body(self, model_id: str | None, ask: Ask) -> dict: ...

    @abstractmethod
    def tokens(self, answer, ask: Ask, server: str, vocab: int | None) -> list[list[int]]: ...


def _choices(answer, ask: Ask, server: str, what: str) -> list[dict]:
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or len(choices) != ask.n:
        got = len(choices) if isinstance(choices, list) else "no"
        raise LoopcertError(f"{server}: {what} answered {got} choices, asked for n {ask.n}")
    return sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)


def completions_body(model_id: str | None, ask: Ask) -> dict:
    """The POST /v1/completions fields the OpenAI and vLLM dialects send alike: the first prompt,
    n choices from the first seed, exactly max_tokens new tokens (EOS ignored), the transform's
    temperature and top-p (None: 1.0), no penalties. Each dialect adds its own top-k."""
    s = ask.sampling
    return {
        "model": model_id,
        "prompt": list(ask.prompts[0]),
        "max_tokens": ask.max_new_tokens,
        "n": ask.n,
        "seed": ask.seeds[0],
        "ignore_eos": True,
        "temperature": float(s.temperature),
        "top_p": 1.0 if s.top_p is None else float(s.top_p),
        "presence_penalty": float(s.presence_penalty),
        "frequency_penalty": float(s.frequency_penalty),
    } | ({"logit_bias": {str(t): b for t, b in s.logit_bias}} if s.logit_bias else {})


def engine_fields(s: SamplingParams, max_new_tokens: int) -> dict:
    """vLLM's (and loopcert serve's) names for the parameters OpenAI lacks: min_p, the repetition
    penalty, the stop token ids and min_tokens (a fixed length, max_new_tokens, when the case has
    no stop tokens)."""
    out = {"min_p": float(s.min_p), "repetition_penalty": float(s.repetition_penalty)}
    if s.stop_token_ids:
        return out | {"stop_token_ids": list(s.stop_token_ids), "min_tokens": s.min_tokens}
    return out | {"min_tokens": max_new_tokens}


class OpenAI(Dialect):
    """POST /v1/completions, OpenAI's fields plus loopcert serve's: `top_k` and `ignore_eos` in,
    `loopcert.choices[k]` (tokens, requested_seed: checked in every answer) out. loopcert=False:
    a plain OpenAI-compatible server, which must answer `choices[].token_ids` and whose choice
    seeds the decoder cross-checks."""

    name = "openai"
    path = "/completions"  # below the OpenAI base (.../v1)

    def __init__(self, loopcert: bool = True):
        self.loopcert = loopcert
        self.unverified_choice_seeds = not loopcert

    def body(self, model_id, ask):
        body = completions_body(model_id, ask)
        if ask.sampling.top_k is not None:  # OpenAI has no "no top-k" value: absent is none
            body["top_k"] = int(ask.sampling.top_k)
        if not ask.sampling.plain or ask.sampling.stop_token_ids:  # loopcert serve's extensions
            if not self.loopcert:
                raise LoopcertError(
                    "an OpenAI-compatible server has no min_p, repetition_penalty, stop_token_ids or "
                    "min_tokens fields: this case's parameters cannot be asked for"
                )
            body |= engine_fields(ask.sampling, ask.max_new_tokens)
        return body

    def tokens(self, answer, ask, server, vocab):
        what = ask.what("POST /v1/completions")
        choices = _choices(answer, ask, server, what)
        ext = (answer.get("loopcert") or {}).get("choices")
        if self.loopcert and not isinstance(ext, list):
            raise LoopcertError(
                f"{server}: {what}: the answer has no loopcert.choices[].tokens extension: certify "
                "needs the new token ids"
            )
        out = []
        for k, c in enumerate(choices):
            if ext is not None:
                e = ext[k] if k < len(ext) and isinstance(ext[k], dict) else {}
                asked = e.get("requested_seed", ask.seeds[0] + k)
                if asked != ask.seeds[0] + k:
                    raise LoopcertError(
                        f"{server}: {what}: choice {k} was decoded for seed {asked}, not "
                        f"{ask.seeds[0] + k} (the per-choice seed rule is seed + k)"
                    )
                ids = e.get("tokens")
            else:
                ids = c.get("token_ids")
                if ids is None:
                    raise LoopcertError(
                        f"{server}: {what}: choice {k} has no token ids (neither loopcert.choices[].tokens "
                        "nor choices[].token_ids): certify needs the new token ids, text does not map back"
                    )
            out.append(check_choice(server, what, k, ids, c.get("finish_reason"), ask, vocab))
        return out


class VLLM(Dialect):
    """vLLM's /v1/completions. Choice j of a request decodes with seed + j: vLLM v1's parallel
    sampling gives child j `seed + index` (vllm/v1/engine/parallel_sampling.py,
    ParentRequest.get_child_info); the answer does not say so, hence the decoder's cross-check."""

    name = "vllm"
    path = "/completions"

    def __init__(self, token_ids: bool = True):
        self.token_ids = token_ids  # False: vLLM < 0.10.2, ids through logprobs

    def body(self, model_id, ask):
        top_k = ask.sampling.top_k
        body = completions_body(model_id, ask) | {
            "min_tokens": ask.max_new_tokens,
            "top_k": VLLM_NO_TOP_K if top_k is None else int(top_k),
            "min_p": 0.0,
            "repetition_penalty": 1.0,
        }
        body |= engine_fields(ask.sampling, ask.max_new_tokens)
        if self.token_ids:
            body["return_token_ids"] = True
        else:
            body["logprobs"] = 1
            body["return_tokens_as_token_ids"] = True
        return body

    def tokens(self, answer, ask, server, vocab):
        what = ask.what("POST /v1/completions")
        out = []
        for k, c in enumerate(_choices(answer, ask, server, what)):
            if self.token_ids:
                ids = c.get("token_ids")
                if ids is None:
                    raise LoopcertError(
                        f"{server}: {what}: choice {k} has no token_ids (return_token_ids needs "
                        "vLLM >= 0.10.2; an older one is spoken to through logprobs)"
                    )
            else:
                ids = _ids_of_logprob_tokens(server, what, k, c)
            out.append(check_choice(server, what, k, ids, c.get("finish_reason"), ask, vocab))
        return out


def _ids_of_logprob_tokens(server: str, what: str, k: int, choice: dict) -> list[int]:
    """choices[k].logprobs.tokens, each "token_id:N" (return_tokens_as_token_ids) -> the ids."""
    toks = (choice.get("logprobs") or {}).get("tokens")
    if not isinstance(toks, list):
        raise LoopcertError(f"{server}: {what}: choice {k} has no logprobs.tokens")
    ids = []
    for t in toks:
        head, _, num = str(t).partition("token_id:")
        if head or not num.isdigit():
            raise LoopcertError(f"{server}: {what}: choice {k}: logprobs token {t!r} is not 'token_id:N'")
        ids.append(int(num))
    return ids


class SGLang(Dialect):
    """SGLang's native POST /generate: one item per sample (SGLang's `n` gives no per-choice seed
    we can rely on), each with its own sampling_params and `sampling_seed`; a request of several
    samples sends `input_ids` and `sampling_params` as lists, one entry per item, and is answered
    with a list. SGLang honours sampling_seed only with --enable-deterministic-inference."""

    name = "sglang"
    path = "/generate"
    at_root = True
    unverified_choice_seeds = False
    seed_hint = "SGLang ignores sampling_seed unless the server runs with --enable-deterministic-inference"

    def requests(self, prompts, seeds, max_new_tokens, sampling, most):
        return [
            Ask(
                tuple(tuple(p) for p in prompts[i : i + most]),
                tuple(seeds[i : i + most]),
                max_new_tokens,
                sampling,
            )
            for i in range(0, len(seeds), most)
        ]

    def sampling_params(self, ask: Ask, j: int) -> dict:
        s = ask.sampling
        if s.min_p > 0 and s.top_p is not None and s.min_p_order != MIN_P_LAST:
            raise LoopcertError(
                f"SamplingParams.min_p_order {s.min_p_order!r}: SGLang masks min-p with top-k / top-p "
                f"on one law ({MIN_P_LAST!r}) and has no field to ask otherwise"
            )
        out = {
            "temperature": float(s.temperature),
            "top_k": SGLANG_NO_TOP_K if s.top_k is None else int(s.top_k),
            "top_p": 1.0 if s.top_p is None else float(s.top_p),
            "min_p": float(s.min_p),
            "max_new_tokens": ask.max_new_tokens,
            "min_new_tokens": s.min_tokens if s.stop_token_ids else ask.max_new_tokens,
            "ignore_eos": True,
            "repetition_penalty": float(s.repetition_penalty),
            "presence_penalty": float(s.presence_penalty),
            "frequency_penalty": float(s.frequency_penalty),
            "sampling_seed": ask.seeds[j],
        }
        if s.stop_token_ids:
            out["stop_token_ids"] = list(s.stop_token_ids)
        if s.logit_bias:
            out["logit_bias"] = {str(t): b for t, b in s.logit_bias}
        return out

    def body(self, model_id, ask):
        if ask.n == 1:
            return {"input_ids": list(ask.prompts[0]), "sampling_params": self.sampling_params(ask, 0)}
        return {
            "input_ids": [list(p) for p in ask.prompts],
            "sampling_params": [self.sampling_params(ask, j) for j in range(ask.n)],
        }

    def tokens(self, answer, ask, server, vocab):
        what = ask.what("POST /generate")
        items = [answer] if ask.n == 1 and isinstance(answer, dict) else answer
        if not isinstance(items, list) or len(items) != ask.n:
            got = len(items) if isinstance(items, list) else type(answer).__name__
            raise LoopcertError(f"{server}: {what} answered {got} items, sent {ask.n}")
        out = []
        for k, item in enumerate(items):
            meta = (item.get("meta_info") if isinstance(item, dict) else None) or {}
            finish = meta.get("finish_reason")
            finish = finish.get("type") if isinstance(finish, dict) else finish
            ids = item.get("output_ids") if isinstance(item, dict) else None
            if ids is None:
                raise LoopcertError(f"{server}: {what}: item {k} has no output_ids")
            out.append(check_choice(server, what, k, ids, finish, ask, vocab))
        return out


DIALECTS = ("openai", "vllm", "sglang")
