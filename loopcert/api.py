"""loopcert's public Python surface: what a user's decoder, script or test imports (docs/decoders.md,
"The public surface").

    from loopcert.api import NotApplicable, SamplingParams, certify, load_model, predict

A decoder author's own tests import loopcert.testing (assert_lossless, SMOKE_PLAN).

These names hold: one that moves keeps its old path for one minor version, with a
DeprecationWarning naming the new one (proofs/moved.py), and tests/test_public_api.py fails when
one disappears without such an alias. Everything else of the packages is internal and may move
in any version. `refdec` and `fastdec` export the model and the fast decoder at their top level
(`refdec.load_model`, `fastdec.Decoder`, ...), and those names hold too.
"""

from __future__ import annotations

from proofs.certificate import Certificate, Seeds, Stamp, read_certificate
from proofs.checks.positions import PositionsPlan
from proofs.cost.predict import predict
from proofs.cost.prediction import Prediction
from proofs.decoder_attributes import (
    SamplingSupport,
    batch_call_limit,
    declared_compute_dtype,
    declared_max_batch,
    declared_sampler_order,
    declared_sampling,
)
from proofs.decoders.http_client import Transport
from proofs.decoders.http_decoder import HTTPOptions
from proofs.decoders.protocol import BatchDecoder, Decoder, Factory, NotApplicable, Refused
from proofs.details import KINDS as DETAIL_KINDS
from proofs.details import Details
from proofs.result import CheckResult
from proofs.run.certify import certify
from proofs.run.plan import FULL as FULL_PLAN
from proofs.run.plan import QUICK as QUICK_PLAN
from proofs.run.plan import SMOKE as SMOKE_PLAN
from proofs.run.plan import CertifyPlan
from refdec.errors import LoopcertError
from refdec.load import load_model
from refdec.model import LoopedLM
from refdec.sampling import ENGINE_FIELDS, SAMPLER_ORDERS, SamplingParams
from reports.render import render_certificate

__all__ = [
    # writing a decoder (the protocols and what a factory may raise)
    "BatchDecoder",
    "Decoder",
    "Factory",
    "NotApplicable",
    "Refused",
    "SamplingSupport",
    "batch_call_limit",
    "declared_compute_dtype",
    "declared_max_batch",
    "declared_sampler_order",
    "declared_sampling",
    # the model and its sampling
    "LoopcertError",
    "LoopedLM",
    "ENGINE_FIELDS",
    "SAMPLER_ORDERS",
    "SamplingParams",
    "load_model",
    # certifying, and the certificate
    "DETAIL_KINDS",
    "Certificate",
    "CertifyPlan",
    "PositionsPlan",
    "QUICK_PLAN",
    "FULL_PLAN",
    "SMOKE_PLAN",
    "CheckResult",
    "Details",
    "HTTPOptions",
    "Seeds",
    "Stamp",
    "Transport",
    "certify",
    "read_certificate",
    "render_certificate",
    # what a run would cost, certifying nothing (loopcert certify --predict)
    "Prediction",
    "predict",
]
