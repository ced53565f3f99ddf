"""Apple's mlx-lm as a certify decoder: `--decoder mlx-lm[:draft=DIR,num_draft=N]`.

Plain decoding is mlx-lm's own loop, `mlx_lm.generate.generate_step`, with its sampler
(`mlx_lm.sample_utils.make_sampler`); `draft=` makes it `speculative_generate_step` with a draft
model. loopcert writes no decoding loop here: it seeds mlx's random state, builds the sampler
from the SamplingParams, and reads the tokens mlx-lm yields, so the certificate is about
mlx-lm's code (docs/decoders.md, "Certify mlx-lm"; the spec's keys: proofs/decoders/mlx_spec.py).

Which folder mlx-lm loads (`mlx_lm.utils.load_model`, no tokenizer): the published-layout
folder refdec loaded the model from (refdec.load marks it `source_folder`); a model with no such
folder (a tiny preset, a loopcert-format folder) is written once per process to a temporary folder
in the published layout, float32, by refdec's writer, so `loopcert certify tiny-loopcoder
--decoder mlx-lm` certifies mlx-lm on the preset's weights. mlx-lm 0.32.2 implements two of
loopcert's looped families, LoopCoder (model_type iquestloopcoder) with loop_num 2 and Nanbeige
(model_type nanbeige, mlx_lm/models/nanbeige.py: num_loops loops, or len(loop_loss_weights) + 1
when that list is not empty, which refdec holds to the same count): any other model is declined
(NotApplicable: "not applicable" on a tiny preset, a failure on the certified model).

The laws mlx-lm samples from. The sampler filters the temperature-1 log-probabilities (top-p,
then top-k) and divides by the temperature after: `sampler_order = "filters-first"`, which
certify judges against (HF and vLLM divide first; refdec.sampling names both conventions, and
filters-first is mlx-lm's exactly: top-p, then top-k). Greedy is mx.argmax.

The engines' other parameters (refdec.sampling; docs/certify.md#sampling-parameters), as mlx-lm
0.32.2 applies them (read from its source): `min_p` goes to make_sampler (apply_min_p on the
temperature-1 log-probabilities, between top-p and top-k: filters-first); `logit_bias`,
`repetition_penalty`, `presence_penalty` and `frequency_penalty` go to
`sample_utils.make_logits_processors`, whose processors generate_step applies to the logits before
the log-softmax and the sampler (generate.py lines 416-427), in the order bias, repetition,
presence, frequency (refdec's order: the two subtractions commute). Each penalty counts the last
`*_context_size` tokens of the `tokens` generate_step hands its processors: the whole prompt
(prefilled chunks included, line 453) and the tokens generated so far, so `penalty_scope =
"context"`, with `penalty_window` passed as all three context sizes (mlx-lm's default, 20, is what
its server and stream_generate use; None: the whole context). The repetition penalty multiplies a
counted logit < 0 by r and divides the others (refdec's rule); a token counted twice is penalised
once by repetition and presence (a scatter) and twice by frequency (`.at[].subtract`). Stop tokens:
stream_generate (line 739) ends at the first token in its tokenizer's eos_token_ids and its last
response carries that token; here the stream of generate_step's tokens is cut the same way at the
first of `sampling.stop_ids(eos_token_id)`, the stop included, as in refdec. mlx-lm has no minimum
length: `min_tokens` is refused by name, and so is a penalty under another scope
(`check_honoured`). Speculative decoding passes the same processors to speculative_generate_step,
which counts only the last prompt token and the output (its prefill never adds the prompt to
`prev_tokens`, line 532): a deviation from plain decoding certify is there to find
(tests/proofs/engines/test_mlx_decoder.py pins it).

Seeds: mx.random.seed(seed) before each sequence; mlx-lm draws every sample from that global
state, in order, so the same seed gives the same tokens. One sequence at a time (a lock): mlx-lm's
batched generation shares one random state, so its sample i could not be generate(seed i); plain
decoding's generate_batch decodes the seeds one by one and shares only the prompt's prefill
(MLXPlainDecoder).
EOS: mlx-lm's step functions stop only at max_tokens; generate(..., eos_token_id=) stops there
unless `ignore_eos` (certify hands none: its cases name their stops in stop_token_ids).
"""

from __future__ import annotations

import importlib
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from proofs.decoders.mlx_spec import SELF, MLXSpec, parse_mlx_spec
from proofs.decoders.protocol import NotApplicable, refuse_unhonoured
from refdec.decode import check_generate_args
from refdec.errors import LoopcertError
from refdec.files import read_config
from refdec.load import model_fingerprint
from refdec.sampling import CONTEXT_SCOPE, ENGINE_FIELDS, FILTERS_FIRST, SamplingParams

EXTRA = "pip install 'loopcert[mlx]'  (mlx[cpu] and mlx-lm; tox -e mlx pins them: constraints-mlx.txt)"
LOOPCODER = "iquestloopcoder"  # the model_types of the looped families mlx-lm implements, by family
MODEL_TYPES = {"loopcoder": LOOPCODER, "nanbeige": "nanbeige"}
# The engines' other parameters mlx-lm 0.32.2 honours (module docstring): all but min_tokens
SAMPLING_FIELDS = tuple(f for f in ENGINE_FIELDS if f != "min_tokens")
PENALTY_WINDOW = 20  # make_logits_processors' default repetition/presence/frequency_context_size


def import_mlx():
    """(mlx.core, mlx_lm.generate, mlx_lm.sample_utils, mlx_lm.utils); a LoopcertError naming the
    extra to install when mlx or mlx-lm is missing."""
    try:
        import mlx.core as mx

        # by module path: the package's __init__ binds the name `generate` to a function
        generate = importlib.import_module("mlx_lm.generate")
        sample_utils = importlib.import_module("mlx_lm.sample_utils")
        utils = importlib.import_module("mlx_lm.utils")
    except ImportError as e:
        raise LoopcertError(f"--decoder mlx-lm needs mlx and mlx-lm ({e}): {EXTRA}") from None
    return mx, generate, sample_utils, utils


def mlx_lm_version(dist: str = "mlx-lm") -> str | None:
    import importlib.metadata as md

    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def mlx_versions() -> str:
    """ "mlx-lm 0.32.2, mlx 0.32.4": what a certificate's stamp names."""
    return f"mlx-lm {mlx_lm_version() or 'not installed'}, mlx {mlx_lm_version('mlx') or 'not installed'}"


def mlx_factory(spec: str):
    """--decoder mlx-lm[:...] -> factory(model) -> MLXDecoder (the spec is parsed now: a bad one
    is a usage error before any check)."""
    parsed = parse_mlx_spec(spec)

    def factory(model):
        return (MLXDecoder if parsed.speculative else MLXPlainDecoder)(model, parsed)

    return factory


# -- folders and loaded models, once per process ------------------------------------------------
_WRITTEN: dict[str, tempfile.TemporaryDirectory] = {}  # model fingerprint -> its published copy
_LOADED: dict[tuple, object] = {}  # (folder, overrides) -> the mlx model
_LOCK = threading.Lock()  # mlx's random state is global: one sequence at a time


def folder_of(model) -> Path:
    """The published LoopCoder or Nanbeige folder mlx-lm loads for `model` (module docstring)."""
    family = model.cfg.family
    if family not in MODEL_TYPES:
        raise NotApplicable(
            f"mlx-lm implements LoopCoder ({LOOPCODER}) and Nanbeige (nanbeige) of loopcert's looped "
            f"families; {model.cfg.name} is {family}"
        )
    src = getattr(model, "source_folder", None)
    if src is not None and read_config(Path(src)).get("model_type") == MODEL_TYPES[family]:
        return Path(src)
    key = model_fingerprint(model)
    if key not in _WRITTEN:
        import torch

        from refdec.checkpoints import write_published

        tmp = tempfile.TemporaryDirectory(prefix="loopcert-mlx-")
        write_published(model, Path(tmp.name) / model.cfg.name, dtype=torch.float32)
        _WRITTEN[key] = tmp
    return Path(_WRITTEN[key].name) / model.cfg.name


def load_mlx(folder: Path, overrides: dict):
    """mlx_lm.utils.load_model(folder), cached; a model mlx-lm refuses is NotApplicable.

    lazy=True: the weights are evaluated on first use, so a process that builds the decoder and then
    forks (certify --jobs N builds it in the parent) has evaluated nothing in mlx before the fork:
    with mlx 0.32.4 (CPU), once a process has evaluated any array, a child it forks blocks forever
    at its first evaluation (measured: load_model(lazy=False), fork, generate_step in the child)."""
    key = (str(folder.resolve()), tuple(sorted(overrides.items())))
    if key not in _LOADED:
        _, _, _, utils = import_mlx()
        try:
            _LOADED[key] = utils.load_model(folder, lazy=True, model_config=dict(overrides) or None)[0]
        except (AssertionError, ValueError, KeyError, FileNotFoundError) as e:
            raise NotApplicable(
                f"mlx-lm {mlx_lm_version()} cannot load {folder}: {type(e).__name__}: {e}"
            ) from None
    return _LOADED[key]


def sampler_args(s: SamplingParams, vocab_size: int) -> dict:
    """make_sampler's arguments for `s`: mlx-lm applies top-p only in (0, 1) and top-k only in
    (0, V); outside those both mean "no filter", as in refdec. Parameters whose law depends on
    the convention (top-p, min-p) must be filters-first, mlx-lm's; the fields mlx-lm cannot
    honour (check_honoured) are refused by name."""
    if s.order_matters and s.order != FILTERS_FIRST:
        raise LoopcertError(
            f"SamplingParams.order {s.order!r}: mlx-lm's make_sampler samples {FILTERS_FIRST} "
            "(top-p, then top-k, on the temperature-1 law, then the temperature) and has no other order"
        )
    check_honoured(s)
    if s.greedy:
        return {"temp": 0.0}
    top_k = s.top_k if s.top_k is not None and s.top_k < vocab_size else 0
    top_p = s.top_p if s.top_p is not None and s.top_p < 1.0 else 0.0
    out = {"temp": float(s.temperature), "top_k": int(top_k), "top_p": float(top_p)}
    if s.min_p > 0:  # apply_min_p on the temperature-1 log-probabilities: refdec's filters-first min-p
        out["min_p"] = float(s.min_p)
    return out


def check_honoured(s: SamplingParams) -> None:
    """A LoopcertError naming what `s` sets that mlx-lm 0.32.2 cannot sample: a minimum length
    (none of its functions has one), or penalties under a scope or sign other than its own."""
    lacks = f"mlx-lm {mlx_lm_version()} has no such parameter (make_sampler and make_logits_processors)"
    refuse_unhonoured(s, SAMPLING_FIELDS, "mlx-lm", lacks, scope=CONTEXT_SCOPE)


def processor_args(s: SamplingParams, context_len: int) -> dict:
    """make_logits_processors' arguments for `s` (empty: no processor): the bias as a {id: bias}
    dict, each penalty that is on with `penalty_window` as its context size (None: `context_len`,
    at least the whole prompt + output)."""
    check_honoured(s)
    out: dict = {}
    if s.logit_bias:
        out["logit_bias"] = {int(t): float(b) for t, b in s.logit_bias}
    window = s.penalty_window if s.penalty_window is not None else max(int(context_len), 1)
    for name, value, off in (
        ("repetition", s.repetition_penalty, 1.0),
        ("presence", s.presence_penalty, 0.0),
        ("frequency", s.frequency_penalty, 0.0),
    ):
        if value != off:
            out[f"{name}_penalty"] = float(value)
            out[f"{name}_context_size"] = int(window)
    return out


def until_stop(items, stops: frozenset[int], token=int):
    """The items of mlx-lm's stream up to and including the first whose token (`token(item)`) is
    one of `stops` (stream_generate's rule, module docstring); the stream is not read past it."""
    for item in items:
        yield item
        if token(item) in stops:
            return


@dataclass
class DraftStats:
    """Speculative decoding's counts since the decoder was built: draft tokens proposed and
    accepted, read back from the `from_draft` flag mlx-lm yields with each token."""

    proposed: int = 0
    accepted: int = 0
    tokens: int = 0

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.proposed if self.proposed else None

    def add(self, from_draft: Sequence[bool], num_draft: int) -> None:
        """Each round drafts min(left, num_draft) tokens, yields the accepted ones (True), then
        the target's own token (False) unless the run is complete."""
        n, pos = len(from_draft), 0
        while pos < n:
            k = min(n - pos, num_draft)
            a = 0
            while a < k and from_draft[pos + a]:
                a += 1
            self.proposed += k
            self.accepted += a
            pos += a + (1 if pos + a < n else 0)
        self.tokens += n


class MLXDecoder:
    """A loopcert Decoder over mlx-lm (module docstring): speculative decoding, or the base of
    plain decoding (MLXPlainDecoder)."""

    sampler_order = FILTERS_FIRST  # proofs.decoder_attributes.declared_sampler_order
    # proofs.decoder_attributes.declared_sampling (module docstring): what mlx-lm honours, and how
    sampling_fields = SAMPLING_FIELDS
    penalty_scope = CONTEXT_SCOPE
    penalty_window = PENALTY_WINDOW

    def __init__(self, model, spec: MLXSpec):
        import_mlx()  # the extra's message before any folder work
        self.model, self.spec = model, spec
        self.folder = folder_of(model)
        self.mlx_model = load_mlx(self.folder, spec.overrides)
        self.vocab_size = model.cfg.vocab_size
        self.draft_model = None
        if spec.speculative:
            draft_folder = self.folder if spec.draft == SELF else Path(spec.draft)
            self.draft_model = load_mlx(draft_folder, {})
            dv = read_config(draft_folder).get("vocab_size")
            if dv != self.vocab_size:
                raise LoopcertError(
                    f"--decoder {spec.spec!r}: the draft {draft_folder} has vocab_size {dv!r}, "
                    f"the model {self.vocab_size}"
                )
        self.compute_dtype = _torch_dtype_name(self.mlx_model)
        self.stats = DraftStats()

    @property
    def boundaries(self) -> tuple[tuple[int, str], ...]:
        """Where mlx-lm's caches change shape (proofs/boundaries.py): LoopCoder's window caches are
        RotatingKVCache(max_size=loop_window_size), which wrap there; its global caches are
        KVCache, which grow in steps of KVCache.step (256 in 0.32.2)."""
        from mlx_lm.models.cache import KVCache

        w = getattr(getattr(self.mlx_model, "args", None), "loop_window_size", None)
        w = w or self.model.cfg.loop_window_size
        out = [(int(KVCache.step), f"mlx-lm KVCache grows by its step of {KVCache.step}")]
        if w:
            out.insert(0, (int(w), f"mlx-lm RotatingKVCache window {w} wraps"))
        return tuple(out)

    @property
    def description(self) -> str:
        how = (
            f"speculative, draft {self.spec.draft}, {self.spec.num_draft} draft tokens"
            if self.spec.speculative
            else "plain"
        )
        return f"mlx-lm {mlx_lm_version()} ({how}) on {self.folder}"

    def _sampler(self, sampling: SamplingParams):
        return import_mlx()[2].make_sampler(**sampler_args(sampling, self.vocab_size))

    def _processors(self, sampling: SamplingParams, context_len: int, before=()) -> list | None:
        """make_logits_processors' processors for `sampling`, or None. `before`: prompt tokens
        already in a prefilled cache (MLXPlainDecoder.generate_batch), which generate_step then
        never sees: each processor gets them in front of the tokens generate_step hands it, so it
        counts what generate_step would have handed it had it prefilled them itself."""
        mx, _, sample_utils, _ = import_mlx()
        args = processor_args(sampling, context_len)
        if not args:
            return None
        processors = sample_utils.make_logits_processors(**args)
        if not before or not sampling.penalized:  # the logit bias counts no token
            return processors
        prefix = mx.array(list(before), dtype=mx.uint32)
        return [
            lambda tokens, logits, p=p: p(mx.concatenate([prefix, tokens.astype(mx.uint32)]), logits)
            for p in processors
        ]

    def generate(
        self,
        prompt,
        max_new_tokens: int,
        sampling: SamplingParams = SamplingParams(),
        seed: int = 0,
        *,
        eos_token_id: int | None = None,
    ) -> list[int]:
        ids, _ = check_generate_args(self.model, prompt, max_new_tokens, sampling, seed, None)
        if max_new_tokens == 0:
            return []
        mx, gen, _, _ = import_mlx()
        sampler = self._sampler(sampling)
        processors = self._processors(sampling, len(ids) + max_new_tokens)
        stops = sampling.stop_ids(eos_token_id)
        prompt_mx = mx.array(ids, dtype=mx.uint32)
        with _LOCK:
            mx.random.seed(int(seed))
            if self.draft_model is None:
                steps = gen.generate_step(
                    prompt_mx,
                    self.mlx_model,
                    max_tokens=max_new_tokens,
                    sampler=sampler,
                    logits_processors=processors,
                )
                return [int(tok) for tok in until_stop((tok for tok, _ in steps), stops)]
            steps = gen.speculative_generate_step(
                prompt_mx,
                self.mlx_model,
                self.draft_model,
                num_draft_tokens=self.spec.num_draft,
                max_tokens=max_new_tokens,
                sampler=sampler,
                logits_processors=processors,
            )
            pairs = ((int(t), bool(from_draft)) for t, _, from_draft in steps)
            out = list(until_stop(pairs, stops, lambda pair: pair[0]))
        self.stats.add([f for _, f in out], self.spec.num_draft)
        return [t for t, _ in out]


class MLXPlainDecoder(MLXDecoder):
    """Plain mlx-lm, also a BatchDecoder: the sequences of one call that share a prompt share its
    prefill. generate_step prefills prompt[:-1] into a fresh cache (in chunks of its
    prefill_step_size) and then steps from the last prompt token; generate_batch runs that prefill
    once, as generate_step would, and hands each seed a copy of the cache through generate_step's
    own `prompt_cache` argument, with the last prompt token as its prompt (and the prefilled tokens
    in front of what its penalties count: _processors). Same operations, same order: result i is
    generate(prompts[i], seed i)'s tokens (tested), at ~2x the rate on a 32-token prompt. (Not
    for speculative decoding: speculative_generate_step splits a passed prompt_cache at
    len(model.layers), and LoopCoder keeps two caches per layer.)"""

    PREFILL_STEP = 2048  # generate_step's prefill_step_size default

    def generate_batch(
        self,
        prompts,
        max_new_tokens: int,
        sampling: SamplingParams,
        seeds,
        *,
        eos_token_id: int | None = None,
    ) -> list[list[int]]:
        prompts, seeds = list(prompts), list(seeds)
        if len(prompts) != len(seeds):
            raise LoopcertError(f"{len(prompts)} prompts but {len(seeds)} seeds")
        checked = [
            check_generate_args(self.model, p, max_new_tokens, sampling, s, None)[0]
            for p, s in zip(prompts, seeds)
        ]
        if max_new_tokens == 0:
            return [[] for _ in prompts]
        mx, gen, _, _ = import_mlx()
        from mlx_lm.models.cache import make_prompt_cache

        sampler = self._sampler(sampling)
        stops = sampling.stop_ids(eos_token_id)
        prefilled: dict[tuple[int, ...], list] = {}
        out = []
        with _LOCK:
            for ids, seed in zip(checked, seeds):
                key = tuple(ids)
                if key not in prefilled:
                    prefilled[key] = self._prefill(mx, make_prompt_cache, ids[:-1])
                cache = make_prompt_cache(self.mlx_model)
                for c, done in zip(cache, prefilled[key]):
                    if not done.empty():
                        c.state = tuple(mx.array(x) if isinstance(x, mx.array) else x for x in done.state)
                last = mx.array(ids[-1:], dtype=mx.uint32)
                processors = self._processors(sampling, len(ids) + max_new_tokens, before=ids[:-1])
                mx.random.seed(int(seed))
                steps = gen.generate_step(
                    last,
                    self.mlx_model,
                    max_tokens=max_new_tokens,
                    sampler=sampler,
                    logits_processors=processors,
                    prompt_cache=cache,
                )
                out.append([int(tok) for tok in until_stop((tok for tok, _ in steps), stops)])
        return out

    def _prefill(self, mx, make_prompt_cache, ids: list[int]) -> list:
        """A cache holding `ids`, filled as generate_step's prefill loop fills it."""
        cache = make_prompt_cache(self.mlx_model)
        for i in range(0, len(ids), self.PREFILL_STEP):
            self.mlx_model(mx.array(ids[i : i + self.PREFILL_STEP], dtype=mx.uint32)[None], cache=cache)
            mx.eval([c.state for c in cache])
        return cache


def _torch_dtype_name(mlx_model) -> str:
    """The dtype mlx computes in: its weights' (mlx-lm keeps the folder's dtype)."""
    from mlx.utils import tree_flatten

    leaves = tree_flatten(mlx_model.parameters())
    return str(leaves[0][1].dtype).rsplit(".", 1)[-1] if leaves else "float32"


def decoder_for(spec: str, model) -> MLXDecoder:
    """The decoder of `spec` for `model` (the factory's, the tests' and the engines table's)."""
    parsed = parse_mlx_spec(spec)
    return MLXDecoder(model, parsed) if parsed.speculative else MLXPlainDecoder(model, parsed)
