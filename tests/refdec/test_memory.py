"""A model too large for the memory free is refused before a byte of weights is loaded, naming the
size needed and the size free; a certify run holds one float64 copy of the weights."""

from __future__ import annotations

import pytest
import torch

import proofs.run.run as run_module
import refdec
from proofs.cost.need import run_need, sampling_rows
from proofs.run.plan import QUICK
from proofs.run.run import CertifyRun, RunModels
from refdec.errors import LoopcertError
from refdec.memory import FREE_ENV, HEADROOM_MIN, Need, check_fits, free_bytes, gib, parse_bytes


@pytest.mark.parametrize(
    "text, n",
    [("1000", 1000), ("12G", 12 * 2**30), ("512MiB", 512 * 2**20), ("1.5k", 1536), ("2 GB", 2 * 2**30)],
)
def test_parse_bytes(text, n):
    assert parse_bytes(text) == n


@pytest.mark.parametrize("text", ["", "lots", "-1G", "12X", "1e9"])
def test_bad_cap_is_named(text, monkeypatch):
    monkeypatch.setenv(FREE_ENV, text or " ")
    with pytest.raises(LoopcertError, match=FREE_ENV):
        free_bytes()


def test_too_large_is_refused_before_loading(monkeypatch):
    """tiny-ouro needs HEADROOM_MIN + its weights; a cap below that refuses it, and no model is
    built: loading is made to fail loudly, so only a refusal that comes first passes."""
    monkeypatch.setenv(FREE_ENV, str(HEADROOM_MIN // 2))

    def no_loading(*a, **k):
        raise AssertionError("a model was loaded before the memory check refused it")

    monkeypatch.setattr(run_module, "load", no_loading)
    monkeypatch.setattr(refdec, "load_model", no_loading)
    with pytest.raises(LoopcertError) as e:
        RunModels.load("tiny-ouro", torch.float32, "cpu")
    msg = str(e.value)
    assert "certifying tiny-ouro does not fit" in msg
    need = run_need("tiny-ouro", torch.float32, "cpu")
    assert f"needs {gib(need.total)}" in msg and "float64 reference" in msg
    assert f"128 MiB is free ({FREE_ENV})" in msg  # not "0.12 GiB"
    assert "--dtype float64" in msg  # the flag that helps


def test_what_a_run_needs():
    n = refdec.checkpoints.describe("tiny-ouro")["parameters"]
    assert run_need("tiny-ouro", torch.float32, "cpu").weights == 12 * n  # float64 + float32
    assert run_need("tiny-ouro", torch.float64, "cpu").weights == 8 * n  # one copy
    assert run_need("tiny-ouro", torch.bfloat16, "cpu").weights == (8 + 2 + 4) * n  # + float32 to sample


def test_a_fitting_model_loads_and_holds_one_float64_copy(monkeypatch):
    """Under a cap it fits in, the run loads; the oracle's float64 model is the run's float64 model
    (not a deep copy) and the sampling decoders take the run's float32 copy (not a third one)."""
    monkeypatch.setenv(FREE_ENV, "4G")
    run = CertifyRun(QUICK, "tiny-ouro", None, "cpu", torch.float32, 0, lambda _m: None)
    assert run.oracle.model is run.model64
    assert run.sampling_setup("tiny-ouro").model is run.model_dt
    float64 = {
        p.data_ptr()
        for m in (run.model64, run.oracle.model, run.model_dt, run.sampling_setup("tiny-ouro").model)
        for p in m.parameters()
        if p.dtype == torch.float64
    }
    assert len(float64) == len(list(run.model64.parameters()))
    run64 = CertifyRun(QUICK, "tiny-ouro", None, "cpu", torch.float64, 0, lambda _m: None)
    assert run64.model_dt is None and run64.sampling_setup("tiny-ouro").model is run64.model64


def test_the_oracle_remembers_only_the_last_position():
    """Oracle.logits keeps (R, V) per context, not the (R, T, V) readout its forward made."""
    from proofs.stats.exact_laws import Oracle

    o = Oracle(refdec.load_model("tiny-ouro"))
    got = o.logits([1, 2, 3, 4, 5, 6, 7, 8])
    assert got.shape == (o.R, o.V)
    assert got.untyped_storage().nbytes() == o.R * o.V * 8


def test_the_caches_are_counted_and_refused_before_loading(monkeypatch):
    """A cap between what the weights need and what the weights and certify's KV caches need,
    sampling one sequence a call, refuses the run before any model is built, naming the caches;
    the weights alone would fit."""
    weights = run_need("tiny-ouro", torch.float32, "cpu")
    need = run_need("tiny-ouro", torch.float32, "cpu", QUICK, rows=1)
    caches = dict(need.buffers)["KV caches"]
    assert need.total == weights.total + caches and caches > 0
    cap = weights.total + caches // 2
    monkeypatch.setenv(FREE_ENV, str(cap))

    def no_loading(*a, **k):
        raise AssertionError("a model was loaded before the memory check refused it")

    monkeypatch.setattr(run_module, "load", no_loading)
    monkeypatch.setattr(refdec, "load_model", no_loading)
    for start in (
        lambda: RunModels.load("tiny-ouro", torch.float32, "cpu", QUICK),
        lambda: CertifyRun(QUICK, "tiny-ouro", None, "cpu", torch.float32, 0, lambda _m: None),
    ):
        with pytest.raises(LoopcertError) as e:
            start()
        msg = str(e.value)
        assert "certifying tiny-ouro (sampling 1 row(s) a call) does not fit" in msg
        assert f"needs {gib(need.total)}" in msg and f"+ KV caches {gib(caches)}" in msg


@pytest.mark.parametrize("floor", ["default", 0])
def test_the_counted_caches_bound_what_certify_decoders_hold(floor, monkeypatch):
    """certify's sampling decoders (the quick grid, built as certify builds them), fed chunks of
    seeds as proofs.decoders.draw feeds them, and a check's decoders beside them, hold at most the
    count. Past the default floor (floor 0: a model whose engines are large) the count is tight
    enough to matter: unbounded decoders fed the same exceed it (the control)."""
    import fastdec.kept as kept
    from proofs.cost.kv_need import certify_caches
    from proofs.decoders.candidates import fastdec_grid
    from proofs.prompts import PROMPT_LEN
    from refdec.memory import config_of

    if floor == 0:
        monkeypatch.setattr(kept, "AUTO_FLOOR", 0)
    model = refdec.load_model("tiny-ouro")
    count = certify_caches(config_of("tiny-ouro"), "tiny-ouro", QUICK, torch.float32, "cpu")
    prompt = [(3 * i) % model.cfg.vocab_size for i in range(PROMPT_LEN)]
    n = max(c[2] for c in QUICK.sampling_cases)
    sp = QUICK.sampling_cases[0][1]

    def feed(decoders):
        for dec in decoders:
            for b in (64, 37, 100, 32, 16, 5, 2, 1):
                dec.generate_batch([prompt] * b, n, sp, list(range(b)))
        checks = [c.build(model) for c in fastdec_grid(model.cfg.recurrence, False)]
        for dec in checks:  # e.g. reproducibility: one sequence at a time
            dec.generate(prompt, 6, sp, 0)
        return sum(d.held_bytes for d in [*decoders, *checks])

    held = feed([c.build(model) for c in fastdec_grid(model.cfg.recurrence, False)])
    assert 0 < held <= count
    if floor == 0:
        from fastdec import Decoder
        from speed.settings import fastdec_configs

        configs = fastdec_configs(model.cfg.recurrence, False)  # the grid's settings
        assert feed([Decoder(model, c, cache_bytes=2**62) for c in configs]) > count


def test_the_caches_of_a_published_shape():
    """Ouro-1.4B's shape (a preset: sized without weights): the quick plan's three sampling
    decoders each hold at least one 64-row engine (24 layers x 4 levels x 16 KV heads x 65
    positions x 128 dims, K and V, float32: 6.5 GB); on an accelerator none is in CPU memory."""
    from proofs.cost.kv_need import certify_caches
    from refdec.memory import config_of

    cfg = config_of("ouro-1.4b")
    one = 2 * 64 * 4 * 24 * 16 * 65 * 128 * 4
    caches = certify_caches(cfg, "ouro-1.4b", QUICK, torch.float32, "cpu")
    assert 3 * one <= caches <= 3 * one * 9 // 8 + 3 * one // 8  # the sampling decoders + one check's
    assert certify_caches(cfg, "ouro-1.4b", QUICK, torch.float32, "cuda") == 0
    assert "KV caches" in run_need("ouro-1.4b", torch.float32, "cpu", QUICK).describe()


def test_sampling_rows_shrink_to_fit_and_change_no_sample(monkeypatch):
    """Where the KV caches of fastdec's 64 rows do not fit but those of 8 do, certify samples 8
    sequences a call (and says so) instead of refusing; each sample still uses seed base + i, so a
    unit's tally is the one the unbounded run draws, count for count."""
    from plans import SMALL_PLAN

    from proofs.run.sampling_units import decoder_of, run_unit, sampling_checks

    f32 = torch.float32
    monkeypatch.setenv(FREE_ENV, str(run_need("tiny-ouro", f32, "cpu", SMALL_PLAN, rows=16).total - 1))
    assert sampling_rows("tiny-ouro", f32, "cpu", SMALL_PLAN) == 8
    assert sampling_rows("tiny-ouro", f32, "cpu", None) is None  # no plan: no caches counted
    said = []
    capped = CertifyRun(SMALL_PLAN, "tiny-ouro", None, "cpu", f32, 0, said.append)
    assert capped.models.sampling_rows == 8 and any("sampling 8 sequence(s) a call" in m for m in said)
    monkeypatch.setenv(FREE_ENV, "64G")
    free_run = CertifyRun(SMALL_PLAN, "tiny-ouro", None, "cpu", f32, 0, lambda _m: None)
    assert free_run.models.sampling_rows is None
    chk = sampling_checks(capped)[0]
    unit = chk.units[0]
    assert unit.samples > 8
    dec, calls = decoder_of(capped, chk), []
    real = dec.generate_batch

    def spy(prompts, *a, **k):
        calls.append(len(prompts))
        return real(prompts, *a, **k)

    monkeypatch.setattr(dec, "generate_batch", spy)
    got = run_unit(capped, unit, dec, budget_s=600.0)
    assert calls and max(calls) == 8  # a control: the unbounded run's first call holds 64
    want = run_unit(free_run, unit, decoder_of(free_run, sampling_checks(free_run)[0]), budget_s=600.0)
    assert got["samples"] == want["samples"] == unit.samples
    timing = ("seconds", "samples_per_s")
    assert {k: v for k, v in got.items() if k not in timing} == {
        k: v for k, v in want.items() if k not in timing
    }


def test_a_float64_run_counts_the_float32_copy_bitwise_loads():
    """bitwise runs at fixed-width float32: a float64 run loads that copy for the check alone, so
    the memory check counts it with bitwise's caches, and the largest check is the one whose
    caches and copy together are largest (Ouro-1.4B's float64 run was killed by the kernel in
    bitwise when it was not counted); a float32 run has its own copy, a bfloat16 run samples with
    one, and neither counts another."""
    n = refdec.checkpoints.describe("ouro-1.4b")["parameters"]
    need = run_need("ouro-1.4b", torch.float64, "cpu", QUICK, rows=1)
    assert dict(need.buffers)["float32 copy while bitwise runs"] == 4 * n
    assert "+ float32 copy while bitwise runs 5.34 GiB" in need.describe()
    for dt in (torch.float32, torch.bfloat16):
        assert not any("bitwise" in what for what, _ in run_need("ouro-1.4b", dt, "cpu", QUICK).buffers)
    assert run_need("ouro-1.4b", torch.float64, "cuda", QUICK).buffers == ()  # on the GPU

    # tiny-ouro: the copy is small and another check's caches are larger: the max, not the sum
    from proofs.cost.kv_need import _caches, certify_buffers
    from refdec.memory import config_of

    cfg, m = config_of("tiny-ouro"), refdec.checkpoints.describe("tiny-ouro")["parameters"]
    sampling, held = _caches(cfg, "tiny-ouro", QUICK, torch.float64, "cpu", True, 64)
    own = {"bitwise": ("float32 copy", 4 * m)}
    got = sum(b for _, b in certify_buffers(cfg, "tiny-ouro", QUICK, torch.float64, "cpu", own_copies=own))
    assert got == sampling + max(held[c] + (4 * m if c == "bitwise" else 0) for c in held)
    big = {"bitwise": ("float32 copy", 2**40)}  # a copy larger than any check's caches
    buffers = dict(certify_buffers(cfg, "tiny-ouro", QUICK, torch.float64, "cpu", own_copies=big))
    assert buffers == {"KV caches": sampling + held["bitwise"], "float32 copy while bitwise runs": 2**40}


@pytest.mark.parametrize("dtype, loads", [(torch.float32, 0), (torch.bfloat16, 0), (torch.float64, 1)])
def test_bitwise_takes_the_float32_copy_the_run_holds(dtype, loads, monkeypatch):
    """The float32 weights bitwise decodes: the run's own (float32), the sampling copy (bfloat16,
    once its setup holds it), a copy loaded for the check alone only in a float64 run."""
    from plans import SMALL_PLAN

    run = CertifyRun(SMALL_PLAN, "tiny-ouro", None, "cpu", dtype, 0, lambda _m: None)
    run.sampling_setup("tiny-ouro")
    real, calls = run_module.load, []

    def counted(name, dt, device):
        calls.append(dt)
        return real(name, dt, device)

    monkeypatch.setattr(run_module, "load", counted)
    m32 = run.float32_model()
    assert next(m32.parameters()).dtype == torch.float32
    assert calls == [torch.float32] * loads
    if dtype == torch.bfloat16:
        assert m32 is run.sampling_setup("tiny-ouro").model
    from refdec.load import model_fingerprint

    assert model_fingerprint(m32) == model_fingerprint(run.model64)  # the same weights


@pytest.mark.parametrize(
    "n, said",
    [
        (2**20, "1 MiB"),  # the probe: LOOPCERT_MEMORY_FREE=1M was "0.00 GiB is free"
        (512, "512 bytes"),
        (1536, "1.5 KiB"),
        (int(5.34 * 2**30), "5.34 GiB"),
        (3 * 2**40, "3 TiB"),
        (999 * 2**20, "999 MiB"),
    ],
)
def test_sizes_are_said_in_a_unit_that_fits(n, said):
    assert gib(n) == said


def test_a_refusal_of_one_mebibyte_says_so(monkeypatch):
    monkeypatch.setenv(FREE_ENV, "1M")
    with pytest.raises(LoopcertError, match=r"1 MiB is free \(LOOPCERT_MEMORY_FREE\)"):
        check_fits(Need(10**6, (("float64", 8),)), "this")
