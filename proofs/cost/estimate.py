"""--predict's first answer: the run's time from 1- and 2-layer cuts of the model, before a byte
of its weights is read (docs/scale.md, `--predict`).

The measured prediction (proofs/cost/predict.py) loads the model and runs the run's own setup: at
Ouro-1.4B's shape in float64 that is over an hour before its first figure (docs/scale.md). This
module builds, in memory, random-weight models of the model's own config (refdec.sizes.random_model) with its
repeated-layer field (`n_core`: Ouro's and LoopCoder's whole stack, a Raven model's recurrent core;
a prelude and coda stay as they are) cut to 1 and 2 layers, the same width, heads, vocabulary and R.
On each cut it times, in the run's dtypes, what each part of a run repeats: one float64 forward of
a context at every depth (the exact laws, the depth traces), refdec's uncached reference decode per
token, each setting's greedy decode per token in float64 and in the run's dtype, and fastdec's
sampling per sample at the certify batch, in process time on a one-thread CPU run (cut_clock).
Each is scaled to the model by the multiply-adds of a position (the build by the parameters), the
two cuts' estimates' geometric mean (proofs/cost/extrapolate.py says why not a line through them),
and multiplied by what the plan does (run_parts); the load is timed on a slice of the checkpoint's
own bytes (load_seconds). Enough to tell minutes from hours: on a shared host, estimates of one
run moved 2x (docs/measurements.md, "--predict from layer cuts").

Random weights cost what trained ones do (dense maths), but a trained model's law decides how many
contexts the exact laws enumerate (setup_contexts: the count measured on the quick plan at
V = 49,152), and how many drafts a draft setting's target accepts. Mutants, false alarms and the
random and searched Theorem 1 cases run on their own tiny models and are not estimated (seconds to
minutes: docs/scale.md's table).
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from safetensors import safe_open

from fastdec.config import DecodeConfig
from proofs.checks.greedy import GREEDY
from proofs.checks.positions import ladder_samples
from proofs.cost.extrapolate import scaled, work
from proofs.decoders.candidates import Candidate, fastdec_candidate
from proofs.decoders.draw import FIRST_CHUNK, draw
from proofs.decoders.protocol import run_generate
from proofs.prompts import PROMPT_LEN, model_prompts
from proofs.run.cases import PROMPT_CANDIDATES
from proofs.run.jobs import makespan
from proofs.run.plan import CertifyPlan, case_options
from refdec.checkpoint_config import config_from_published
from refdec.checkpoint_files import check_finite, check_representable, scan
from refdec.checkpoints import meta_model
from refdec.config import PRESETS, ModelConfig
from refdec.decode import generate
from refdec.errors import LoopcertError
from refdec.files import FORMAT, read_config
from refdec.load import DEFAULT_MODEL_DIR, not_a_model
from refdec.memory import Need, check_fits
from refdec.sizes import parameters, random_model
from refdec.values import dtype_name
from speed.timing import default_clock

# a measured prediction estimated dearer than this is not started unless asked: 20 min, a third of a
# run that fits within the hour (docs/scale.md, "--predict", has the sizes on each side of it)
PREDICT_LIMIT = 1200.0
HOUR = 3600.0  # a run estimated past this is not predicted further unless asked
CUT_LAYERS = (1, 2)  # the cuts timed, each scaled to the model (proofs/cost/extrapolate.py)
LAYER_FIELD = "n_core"  # the repeated layers (refdec.config.ModelConfig; refdec.sizes cuts the same)
# the exact laws of the quick plan evaluate the PROMPT_CANDIDATES prompts and about this many
# contexts per sampling case (the head of each of its tokens; the counts measured at the sweep's
# sizes: docs/measurements.md, "--predict from layer cuts")
CONTEXTS_PER_CASE = 10
REPEATS = 2  # each forward, decode and draw is timed at least this many times, the fastest kept ...
MAX_REPEATS = 12  # ... and at most this many, while the timings of one quantity are under ...
TIMING_SECONDS = 5.0  # ... this many seconds
DECODE_TOKENS = 6  # tokens of each timed decode: 2 would miss the draft settings' rejected rounds
SAMPLE_ROWS = 8  # sampling is timed at this batch first ...
CUT_SAMPLE_SECONDS = 60.0  # ... then at the certify batch, if that at SAMPLE_ROWS' rate takes less
WARM_UP = "tiny-ouro"  # built once before the cuts: torch's first-call costs would read as layers
LOAD_PROBE_BYTES = 64 * 2**20  # stored bytes read and converted to time a folder's load
STORED = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
QUANTITIES = (
    "build",
    "forward64",
    "reference_token",
    "greedy64_token",
    "greedy_token",
    "baseline_token",
    "sample",
)
BASELINE = fastdec_candidate(DecodeConfig("autoregressive"))  # the speed check's baseline
REPRO_DRAWS = 3 * 6 * 2  # reproducibility: seeds x tokens x twice (proofs/run/run.py REPRO_*)


def model_config(name) -> ModelConfig:
    """The ModelConfig of a preset, "default" or a model folder, from config.json and the stored
    tensor names alone (no weights read)."""
    name = str(name)
    if name in PRESETS:
        return PRESETS[name]
    folder = DEFAULT_MODEL_DIR if name == "default" else Path(name)
    if not folder.is_dir():
        raise not_a_model(name)
    raw = read_config(folder)
    if isinstance(raw, dict) and raw.get("format") == FORMAT:
        return ModelConfig.from_dict({k: v for k, v in raw.items() if k != "format"})
    where = str(folder / "config.json")
    return config_from_published(raw, scan(folder).file_of, where=where, name=folder.name)[0]


def cut_config(cfg: ModelConfig, layers: int) -> ModelConfig:
    """`cfg` with its repeated layers (LAYER_FIELD) cut to `layers`; every other field as it is."""
    return cfg.replace(**{LAYER_FIELD: layers}, name=f"{cfg.name}-cut{layers}")


def cut_clock(device: str) -> Callable[[], float]:
    """Process time on a one-thread CPU run (the work done, whatever else the host runs: the cuts
    differ by one layer, a difference the other jobs' load would drown), else wall time
    (speed.timing.default_clock)."""
    return time.process_time if default_clock(device) == "cpu" else time.perf_counter


def best(fn: Callable[[], object], clock: Callable[[], float]) -> float:
    """The fastest of REPEATS timed calls, or of as many more (up to MAX_REPEATS) as fit in
    TIMING_SECONDS, in seconds of `clock`: the cuts differ by one layer, 10-30% of a forward at
    the sweep's widths, and a single call's noise is as large."""
    out, spent, k = math.inf, 0.0, 0
    while k < REPEATS or (k < MAX_REPEATS and spent < TIMING_SECONDS):
        t = clock()
        fn()
        took = clock() - t
        out, spent, k = min(out, took), spent + took, k + 1
    return out


def sampling_dtype(dtype: torch.dtype) -> torch.dtype:
    """What the sampling decoders run in (RunModels.sampling_model): float64 in a float64 run."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def time_cut(
    cfg: ModelConfig,
    layers: int,
    dtype: torch.dtype,
    device: str,
    prompts: tuple[Sequence[int], Sequence[int]],
    case,
    settings: Sequence[Candidate],
    seed: int = 0,
) -> dict[str, float]:
    """{quantity: seconds} of one cut (QUANTITIES; "sample" as "sample_rows" and "sample_chunk",
    with_sample picks): building it in float64; one float64 forward of
    the first of `prompts` at every depth; refdec's reference decode per token from the second
    (the greedy checks' mean context); per token, summed over `settings`, their greedy decode
    in float64 and in the run's dtype, and the autoregressive baseline's; and one sample of `case`
    (name, SamplingParams, tokens) by the first setting at the certify batch, or at SAMPLE_ROWS
    where that batch would take past CUT_SAMPLE_SECONDS."""
    cut, clock = cut_config(cfg, layers), cut_clock(device)
    prompt, mean_context = list(prompts[0]), list(prompts[1])
    t = clock()
    m64 = random_model(cut, seed, torch.float64)
    got = {"build": clock() - t}
    depths = list(range(1, cut.recurrence + 1))
    got["forward64"] = best(lambda: m64.depth_logits(prompt, depths), clock)
    got["reference_token"] = best(lambda: generate(m64, mean_context, DECODE_TOKENS), clock) / DECODE_TOKENS
    m64.to(device)  # the float64 candidates run on the run's device; the laws above on the CPU

    def greedy(setting: Candidate, model) -> float:
        dec = setting.build(model)
        return best(lambda: run_generate(dec, prompt, DECODE_TOKENS, GREEDY, 0), clock) / DECODE_TOKENS

    got["greedy64_token"] = sum(greedy(c, m64) for c in settings)
    low = m64 if dtype == torch.float64 else random_model(cut, seed, dtype).to(device)
    got["greedy_token"] = sum(greedy(c, low) for c in settings)
    got["baseline_token"] = greedy(BASELINE, low)
    sdt = sampling_dtype(dtype)
    smodel = low if sdt == dtype else m64 if sdt == torch.float64 else random_model(cut, seed, sdt).to(device)
    dec = settings[0].build(smodel)
    _name, sp, n = case

    def chunk(rows: int) -> None:
        d = draw(dec, prompt, n, sp, seed, rows)
        if d.error or len(d.samples) != rows:
            raise LoopcertError(f"the {layers}-layer cut of {cfg.name} could not sample: {d.error}")

    def per_sample(rows: int) -> float:
        return best(lambda: chunk(rows), clock) / rows

    got["sample_rows"] = per_sample(SAMPLE_ROWS)
    if FIRST_CHUNK * got["sample_rows"] <= CUT_SAMPLE_SECONDS:
        got["sample_chunk"] = per_sample(FIRST_CHUNK)
    return got


def with_sample(
    timings: Mapping[int, Mapping[str, float]], rows: int | None = None
) -> dict[int, dict[str, float]]:
    """The cuts' timings with "sample" at one batch for both (a fit across two batches would read
    batching as layers): the certify batch where every cut timed it, else SAMPLE_ROWS. Where the
    run samples fewer rows a call than the certify batch (`rows`: certify's sampling_rows, where
    the KV caches of FIRST_CHUNK rows do not fit), SAMPLE_ROWS' rate, and below SAMPLE_ROWS that
    rate times SAMPLE_ROWS / rows: a model too large for its caches reads its weights once a step
    whatever the batch, so a step of fewer rows costs about as much (Ouro-1.4B in float64 at 8 rows
    a call sampled 4-6x slower a sample than the 64-row rate said)."""
    chunk = rows is None or rows >= FIRST_CHUNK
    chunk = chunk and all("sample_chunk" in t for t in timings.values())
    few = max(1.0, SAMPLE_ROWS / rows) if rows else 1.0

    def sample(t: Mapping[str, float]) -> float:
        if "sample" in t:
            return t["sample"]
        return t["sample_chunk"] if chunk else t["sample_rows"] * few

    return {k: {**t, "sample": sample(t)} for k, t in timings.items()}


def copies(dtype: torch.dtype, device: str) -> tuple[torch.dtype, ...]:
    """The copies of the weights a run loads (proofs/run/run.py RunModels; proofs/cost/need.py run_need)."""
    out = [torch.float64]
    if dtype != torch.float64:
        out.append(dtype)
        if dtype != torch.float32 and torch.device(device).type == "cpu":
            out.append(torch.float32)
    return tuple(out)


def load_seconds(name, dtypes: Sequence[torch.dtype], build: float) -> tuple[float, str]:
    """(seconds, how) a run takes to load its copies of the weights. A folder: its stored bytes
    read, checked and converted as refdec's loader does (checkpoint_files.check_finite,
    check_representable), timed on up to LOAD_PROBE_BYTES of its tensors and scaled by its bytes.
    A preset: its random weights built once per copy, `build` seconds each (from the cuts')."""
    folder = DEFAULT_MODEL_DIR if str(name) == "default" else Path(str(name))
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return build * len(dtypes), "random weights built, from the cuts"
    total = sum(f.stat().st_size for f in files)
    sizes = []  # (bytes, file, key)
    for f in files:
        with safe_open(str(f), framework="pt") as h:
            for k in h.keys():
                sl = h.get_slice(k)
                elem = torch.empty(0, dtype=STORED.get(sl.get_dtype(), torch.float32)).element_size()
                sizes.append((math.prod(sl.get_shape()) * elem, f, k))
    fitting = sorted((s for s in sizes if s[0] <= LOAD_PROBE_BYTES), key=lambda s: -s[0]) or [min(sizes)]
    chosen, read = [], 0
    for s in fitting:
        if read >= LOAD_PROBE_BYTES:
            break
        chosen.append(s)
        read += s[0]
    t = time.perf_counter()
    for dt in dtypes:  # a run reads the files once per copy
        for _, f, k in chosen:
            with safe_open(str(f), framework="pt") as h:
                stored = h.get_tensor(k)
            check_finite(k, stored, folder)
            check_representable(k, stored.to(dtype=dt, copy=True), dt, folder)
    took = time.perf_counter() - t
    return took * total / max(
        1, read
    ), f"{read / 2**20:.0f} MiB of {total / 2**30:.2f} GiB stored read in {took:.1f}s"


def setup_contexts(plan: CertifyPlan) -> int:
    """The contexts the plan's exact laws evaluate on the certified model (CONTEXTS_PER_CASE)."""
    return PROMPT_CANDIDATES + CONTEXTS_PER_CASE * len(plan.sampling_cases)


def run_parts(
    at: Mapping[str, float],
    plan: CertifyPlan,
    settings: int,
    dtype: torch.dtype,
    load_s: float,
    budget_s: float,
    first_chunk: int = FIRST_CHUNK,
) -> dict[str, float]:
    """{part: seconds in one process} of a run of `plan` with `settings` candidate settings, from
    the per-quantity seconds `at` at the model's layers (QUANTITIES: the greedy ones are summed
    over the settings) and the load time. Sampling:
    each (setting, case) unit takes its share of the budget, or its first chunk of `first_chunk`
    samples when that is longer (draw's first generate_batch call does not look at the deadline)."""
    gp, gt = plan.greedy_prompts, plan.greedy_tokens
    parts = {
        "load": load_s,
        "exact laws": setup_contexts(plan) * at["forward64"],
        "greedy_float64": gp * gt * (at["reference_token"] + at["greedy64_token"]),
    }
    if dtype != torch.float64:
        parts[f"greedy_{dtype_name(dtype)}"] = gp * gt * at["greedy_token"]
    parts["bitwise_fixed_width"] = plan.bitwise_prompts * plan.bitwise_tokens * at["greedy_token"]
    units = settings * len(plan.sampling_cases)
    first = first_chunk * at["sample"]
    parts["sampling"] = units * max(budget_s / max(1, units), first)
    parts["reproducibility"] = REPRO_DRAWS * at["greedy_token"]
    parts["traces"] = plan.trace_prompts * at["forward64"]
    if plan.positions is not None:  # the per-position test: S samples of n tokens
        pos = plan.positions  # at the settings' mean rate per token (no batching gain: errs high) ...
        runs = settings if pos.all_settings else 1
        s = ladder_samples(pos, PROMPT_LEN)
        score = at["forward64"] * (PROMPT_LEN + pos.tokens) / PROMPT_LEN  # ... and one float64 pass each
        parts["positions"] = runs * s * (pos.tokens * at["greedy_token"] / max(1, settings) + score)
    w = plan.speed
    parts["speed"] = w.prompts * w.tokens * w.repeats * (at["greedy_token"] + at["baseline_token"])
    return parts


def prediction_seconds(
    parts: Mapping[str, float],
    at: Mapping[str, float],
    plan: CertifyPlan,
    settings: int,
    slice_seconds: float,
    probe: Mapping[str, float],
    gauge_seconds: float,
    first_chunk: int = FIRST_CHUNK,
) -> float:
    """What the measured prediction (proofs/cost/predict.py) would spend: the run's load and exact
    laws, each (setting, case) sampled once at batch 1 and then for max(slice, first chunk) unless
    that chunk would pass `gauge_seconds`, and each other part at its probe's fraction `probe`
    (part -> fraction of the run's work; a part not named runs whole)."""
    one = max(case_options(c)[0][2] for c in plan.sampling_cases) * at["greedy_token"]
    chunk = first_chunk * at["sample"]
    per_unit = one + (0.0 if chunk > gauge_seconds else max(slice_seconds, chunk))
    out = parts["load"] + parts["exact laws"] + settings * len(plan.sampling_cases) * per_unit
    for name, t in parts.items():
        if name not in ("load", "exact laws", "sampling"):
            out += t * probe.get(name, 1.0)
    return out


def estimate(
    name,
    plan: CertifyPlan,
    dtype: torch.dtype,
    device: str,
    settings: Sequence[Candidate],
    budget_s: float,
    jobs: int = 1,
    say=lambda _m: None,
    timings: Mapping[int, Mapping[str, float]] | None = None,
    load: tuple[float, str] | None = None,
    rows: int | None = None,
) -> dict:
    """The cut estimate of a run of `plan` on model `name` with the candidate `settings` (the
    first samples for all), as data: the cuts' timings
    ({layers: {quantity: seconds}}, measured here unless `timings` is given), the work of a
    position on each cut and on the model (proofs/cost/extrapolate.py), the quantities at the
    model's size (each cut scaled by the work, the build by the parameters), the parts, and the
    run's time in one process and with `jobs` workers (the load and exact laws first, then the
    other parts handed out). rows: the most seeds a sampling call decodes together where the run
    samples fewer than the certify batch (certify's sampling_rows; None: fastdec's own)."""
    t0 = time.perf_counter()
    cfg = model_config(name)
    layers = getattr(cfg, LAYER_FIELD)
    if timings is None:
        biggest = cut_config(cfg, max(CUT_LAYERS))
        n = sum(p.numel() for p in meta_model(biggest).parameters())
        kept = [(dtype_name(d), torch.empty(0, dtype=d).element_size()) for d in copies(dtype, device)]
        check_fits(Need(n, tuple(kept)), f"the {max(CUT_LAYERS)}-layer cut of {name}")
        prompt = model_prompts(meta_model(cut_config(cfg, 1)), name, 1)[0]
        mean_context = (prompt * (1 + plan.greedy_tokens))[: len(prompt) + plan.greedy_tokens // 2]
        case = case_options(plan.sampling_cases[0])[0]
        random_model(PRESETS[WARM_UP], 0, torch.float64)  # the first build's one-off costs, not the cut's
        timings = {}
        for k in CUT_LAYERS:
            timings[k] = time_cut(cfg, k, dtype, device, (prompt, mean_context), case, settings)
            gc.collect()  # the cut's decoders hold it in reference cycles: free it before the next
            say(f"{k}-layer cut: " + ", ".join(f"{q} {v:.3g}s" for q, v in timings[k].items()))
    timings = with_sample(timings, rows)
    cuts = {k: cut_config(cfg, k) for k in CUT_LAYERS}
    works = {k: work(c) for k, c in cuts.items()}
    sizes = {k: parameters(c) for k, c in cuts.items()}
    scale = {q: (sizes, parameters(cfg)) if q == "build" else (works, work(cfg)) for q in QUANTITIES}
    at = {q: scaled({k: timings[k][q] for k in CUT_LAYERS}, *scale[q]) for q in QUANTITIES}
    load_s, load_how = load if load is not None else load_seconds(name, copies(dtype, device), at["build"])
    first_chunk = min(FIRST_CHUNK, rows or FIRST_CHUNK)  # draw's first call: one call's rows
    parts = run_parts(at, plan, len(settings), dtype, load_s, budget_s, first_chunk)
    if dtype == torch.float64:  # bitwise loads a float32 copy for itself: one more read of the files
        parts["bitwise_fixed_width"] += load_s / len(copies(dtype, device))
    first = ("load", "exact laws")
    rest = [t for p, t in parts.items() if p not in first]
    serial = sum(parts.values())
    return {
        "model": str(name),
        "layer_field": LAYER_FIELD,
        "layers": layers,
        "cuts": {str(k): dict(v) for k, v in timings.items()},
        "work": {**{str(k): w for k, w in works.items()}, "model": work(cfg)},
        "at_layers": at,
        "load_how": load_how,
        "contexts": setup_contexts(plan),
        "parts": parts,
        "serial_seconds": serial,
        "wall_seconds": sum(parts[p] for p in first) + makespan(rest, jobs),
        "jobs": jobs,
        "sampling_rows": rows,
        "first_chunk": first_chunk,
        "estimate_seconds": time.perf_counter() - t0,
    }


FLAGS = (
    "--time-budget SECONDS (the sampling pool), --jobs N (worker processes), --shard I/N with "
    "loopcert merge (machines), --executor ray (a cluster), --dtype float64 (one copy of the weights) "
    "or bfloat16, --device cuda (a GPU)"
)


def decide(
    est: Mapping, prediction_s: float, limit: float = PREDICT_LIMIT, hour: float = HOUR
) -> tuple[bool, list[str]]:
    """(go on to the measured prediction, what to say): stop when the measured prediction would
    take past `limit` or the run past `hour`, each said with the run's largest part and the flags
    that help."""
    parts = est["parts"]
    big = max(parts, key=parts.get)
    largest = f"its largest part is {big} ({parts[big] / 60:.0f} min)"
    out = []
    if prediction_s > limit:
        out.append(
            f"the measured prediction would take ~{prediction_s / 60:.0f} min, past the "
            f"{limit / 60:g}-min limit (PREDICT_LIMIT): it loads the model and runs the setup and a "
            f"probe of every check; {largest}"
        )
    if est["wall_seconds"] > hour:
        out.append(
            f"the run cannot finish within {hour / 3600:g} h (~{est['wall_seconds'] / 3600:.1f} h "
            f"estimated with {est['jobs']} worker(s)); {largest}"
        )
    if out:
        out.append(f"what helps: {FLAGS}; --predict-measured runs the measured prediction anyway")
    return not out, out
