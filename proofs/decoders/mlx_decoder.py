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

Seeds: mx.random.seed(seed) before each sequence; mlx-lm draws every sample from that global
state, in order, so the same seed gives the same tokens. One sequence at a time (a lock): mlx-lm's
batched generation shares one random state, so its sample i could not be generate(seed i); plain
decoding's generate_batch decodes the seeds one by one and shares only the prompt's prefill
(MLXPlainDecoder).
No EOS: mlx-lm's step functions stop only at max_tokens.
"""

from __future__ import annotations

import importlib
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from proofs.decoders.mlx_spec import SELF, MLXSpec, parse_mlx_spec
from proofs.decoders.protocol import NotApplicable
from refdec.decode import check_generate_args
from refdec.errors import LoopcertError
from refdec.files import read_config
from refdec.load import model_fingerprint
from refdec.sampling import FILTERS_FIRST, SamplingParams

EXTRA = "pip install 'loopcert[mlx]'  (mlx[cpu] and mlx-lm; tox -e mlx pins them: constraints-mlx.txt)"
LOOPCODER = "iquestloopcoder"  # the model_types of the looped families mlx-lm implements, by family
MODEL_TYPES = {"loopcoder": LOOPCODER, "nanbeige": "nanbeige"}


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
    """mlx_lm.utils.load_model(folder), cached; a model mlx-lm refuses is NotApplicable."""
    key = (str(folder.resolve()), tuple(sorted(overrides.items())))
    if key not in _LOADED:
        _, _, _, utils = import_mlx()
        try:
            _LOADED[key] = utils.load_model(folder, model_config=dict(overrides) or None)[0]
        except (AssertionError, ValueError, KeyError, FileNotFoundError) as e:
            raise NotApplicable(
                f"mlx-lm {mlx_lm_version()} cannot load {folder}: {type(e).__name__}: {e}"
            ) from None
    return _LOADED[key]


def sampler_args(s: SamplingParams, vocab_size: int) -> dict:
    """make_sampler's arguments for `s`: mlx-lm applies top-p only in (0, 1) and top-k only in
    (0, V); outside those both mean "no filter", as in refdec. Parameters whose law depends on
    the convention (top-p) must be filters-first, mlx-lm's: anything else is refused by name."""
    if s.order_matters and s.order != FILTERS_FIRST:
        raise LoopcertError(
            f"SamplingParams.order {s.order!r}: mlx-lm's make_sampler samples {FILTERS_FIRST} "
            "(top-p, then top-k, on the temperature-1 law, then the temperature) and has no other order"
        )
    passed_on = ("min_p",)  # make_sampler's; the logits processors are not wired yet (issue 37)
    other = [k for k in s.describe() if k not in ("temperature", "top_k", "top_p", *passed_on)]
    if other:
        raise LoopcertError(
            f"SamplingParams {', '.join(other)}: the mlx-lm decoder passes on temperature, top-k, "
            "top-p and min_p only (make_logits_processors' penalties and logit bias, and stop tokens, "
            "are not wired): refused rather than sampled without"
        )
    if s.greedy:
        return {"temp": 0.0}
    top_k = s.top_k if s.top_k is not None and s.top_k < vocab_size else 0
    top_p = s.top_p if s.top_p is not None and s.top_p < 1.0 else 0.0
    out = {"temp": float(s.temperature), "top_k": int(top_k), "top_p": float(top_p)}
    if s.min_p > 0:  # apply_min_p on the temperature-1 log-probabilities: refdec's filters-first min-p
        out["min_p"] = float(s.min_p)
    return out


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

    sampler_order = FILTERS_FIRST  # proofs.decoders.protocol.declared_sampler_order

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

    def generate(
        self, prompt, max_new_tokens: int, sampling: SamplingParams = SamplingParams(), seed: int = 0
    ) -> list[int]:
        ids, _ = check_generate_args(self.model, prompt, max_new_tokens, sampling, seed, None)
        if max_new_tokens == 0:
            return []
        mx, gen, _, _ = import_mlx()
        sampler = self._sampler(sampling)
        prompt_mx = mx.array(ids, dtype=mx.uint32)
        with _LOCK:
            mx.random.seed(int(seed))
            if self.draft_model is None:
                steps = gen.generate_step(
                    prompt_mx, self.mlx_model, max_tokens=max_new_tokens, sampler=sampler
                )
                return [int(tok) for tok, _ in steps]
            steps = gen.speculative_generate_step(
                prompt_mx,
                self.mlx_model,
                self.draft_model,
                num_draft_tokens=self.spec.num_draft,
                max_tokens=max_new_tokens,
                sampler=sampler,
            )
            out = [(int(tok), bool(from_draft)) for tok, _, from_draft in steps]
        self.stats.add([f for _, f in out], self.spec.num_draft)
        return [t for t, _ in out]


class MLXPlainDecoder(MLXDecoder):
    """Plain mlx-lm, also a BatchDecoder: the sequences of one call that share a prompt share its
    prefill. generate_step prefills prompt[:-1] into a fresh cache (in chunks of its
    prefill_step_size) and then steps from the last prompt token; generate_batch runs that prefill
    once, as generate_step would, and hands each seed a copy of the cache through generate_step's
    own `prompt_cache` argument, with the last prompt token as its prompt. Same operations, same
    order: result i is generate(prompts[i], seed i)'s tokens (tested), at ~2x the rate on a
    32-token prompt. (Not for speculative decoding: speculative_generate_step splits a passed
    prompt_cache at len(model.layers), and LoopCoder keeps two caches per layer.)"""

    PREFILL_STEP = 2048  # generate_step's prefill_step_size default

    def generate_batch(
        self, prompts, max_new_tokens: int, sampling: SamplingParams, seeds
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
                mx.random.seed(int(seed))
                steps = gen.generate_step(
                    last, self.mlx_model, max_tokens=max_new_tokens, sampler=sampler, prompt_cache=cache
                )
                out.append([int(tok) for tok, _ in steps])
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
