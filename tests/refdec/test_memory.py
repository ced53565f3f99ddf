"""A model too large for the memory free is refused before a byte of weights is loaded, naming the
size needed and the size free; a certify run holds one float64 copy of the weights."""

from __future__ import annotations

import pytest
import torch

import proofs.run.run as run_module
import refdec
from proofs.run.plan import QUICK
from proofs.run.run import CertifyRun, RunModels, run_need
from refdec.errors import LoopcertError
from refdec.memory import FREE_ENV, HEADROOM_MIN, free_bytes, parse_bytes


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
    assert f"needs {need.total / 2**30:.2f} GiB" in msg and "float64 reference" in msg
    assert f"{HEADROOM_MIN // 2 / 2**30:.2f} GiB is free ({FREE_ENV})" in msg
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
