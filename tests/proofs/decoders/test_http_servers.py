"""The HTTP decoder against fake vLLM, SGLang and OpenAI-compatible servers (httpx.MockTransport):
what it detects, the identity it demands, the seed rules it checks, and the certificate a server
gets (proofs/decoders/http_decoder.py, server_info.py). The fakes decode with refdec's oracle, so
a lossless fake is lossless by construction."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

httpx = pytest.importorskip("httpx")

from plans import HTTP_PLAN  # noqa: E402

import proofs.decoders.http_decoder as http_decoder  # noqa: E402
import proofs.run.plan as plan_mod  # noqa: E402
import refdec  # noqa: E402
from loopcert.cli import main  # noqa: E402
from proofs.certificate import read_certificate  # noqa: E402
from proofs.decoders.http_client import HTTPClient, Transport  # noqa: E402
from proofs.decoders.http_decoder import HTTPDecoder, HTTPOptions  # noqa: E402
from refdec.errors import LoopcertError  # noqa: E402
from refdec.sampling import SamplingParams  # noqa: E402

URL = "http://fake/v1"
T1 = SamplingParams(temperature=1.0)
MODEL = refdec.load_model("tiny-ouro", dtype="float64")


class Fake:
    """A server of `kind` (vllm, sglang, openai) serving tiny-ouro under the name `path`.

    seed_step: choice j of (seed s, n m) decodes with seed s + seed_step * j (vLLM: 1);
    ignore_seed: every request draws a fresh seed; finish: every choice's finish reason."""

    def __init__(self, kind, path="tiny-ouro", seed_step=1, ignore_seed=False, finish="length", **card):
        self.kind, self.path, self.seed_step, self.ignore_seed, self.finish = (
            kind,
            path,
            seed_step,
            ignore_seed,
            finish,
        )
        self.card, self.bodies = card, []
        self.rng = random.Random(0)

    def decode(self, prompt, n, sampling, seed):
        if self.ignore_seed:
            seed = self.rng.randrange(2**31)
        return refdec.generate(MODEL, prompt, n, sampling, seed)

    def __call__(self, req: httpx.Request) -> httpx.Response:
        path = req.url.path
        if req.method == "GET":
            if path == "/v1/models" and self.kind != "sglang":
                owned = "vllm" if self.kind == "vllm" else "someone"
                card = {"id": self.path, "root": self.path, "owned_by": owned, **self.card}
                return httpx.Response(200, json={"object": "list", "data": [card]})
            if path == "/version" and self.kind == "vllm":
                return httpx.Response(200, json={"version": "0.32.0"})
            if path == "/get_model_info" and self.kind == "sglang":
                return httpx.Response(200, json={"model_path": self.path, "is_generation": True, **self.card})
            return httpx.Response(404, json={"detail": "Not Found"})
        body = json.loads(req.content)
        self.bodies.append(body)
        if path == "/generate":
            many = isinstance(body["input_ids"][0], list)
            prompts = body["input_ids"] if many else [body["input_ids"]]
            params = body["sampling_params"] if many else [body["sampling_params"]]
            items = [self.sglang_item(p, sp) for p, sp in zip(prompts, params)]
            return httpx.Response(200, json=items if many else items[0])
        s = SamplingParams(
            temperature=body["temperature"],
            top_k=body.get("top_k") or None,
            top_p=None if body["top_p"] >= 1.0 else body["top_p"],
        )
        choices = [
            {
                "index": j,
                "text": "",
                "finish_reason": self.finish,
                "token_ids": self.decode(
                    body["prompt"], body["max_tokens"], s, body["seed"] + self.seed_step * j
                ),
            }
            for j in range(body["n"])
        ]
        return httpx.Response(200, json={"choices": choices})

    def sglang_item(self, prompt, sp):
        s = SamplingParams(
            temperature=sp["temperature"],
            top_k=None if sp["top_k"] == -1 else sp["top_k"],
            top_p=None if sp["top_p"] >= 1.0 else sp["top_p"],
        )
        ids = self.decode(prompt, sp["max_new_tokens"], s, sp["sampling_seed"])
        return {"text": "", "output_ids": ids, "meta_info": {"finish_reason": {"type": self.finish}}}


def transport_of(fake):
    def make(root, transport=Transport(), say=None):
        c = HTTPClient(root, replace(transport, backoff_s=0.01), say=lambda _line: None)
        c.client = httpx.Client(transport=httpx.MockTransport(fake))
        return c

    return make


def decoder(fake, lines=None, **options) -> HTTPDecoder:
    say = lines.append if lines is not None else lambda _line: None
    http = transport_of(fake)("http://fake")
    return HTTPDecoder(URL, HTTPOptions(**options), say=say, http=http)


@pytest.mark.parametrize(
    "fake, kind, dialect",
    [
        (Fake("vllm"), "vllm", "vllm"),
        (Fake("sglang"), "sglang", "sglang"),
        (Fake("openai"), "openai", "openai"),
    ],
)
def test_auto_detects_the_server_and_declares_float32(fake, kind, dialect):
    dec = decoder(fake)
    assert dec.server.kind == kind and dec.dialect.name == dialect
    assert dec.compute_dtype == "float32"  # the greedy check's float32 tie tolerance
    assert decoder(fake, compute_dtype="float64").compute_dtype == "float64"
    if kind == "vllm":
        assert dec.label == f"vLLM 0.32.0 at {URL}" and dec.server.token_ids
    if kind == "sglang":
        assert "--enable-deterministic-inference" in dec.seed_hint


def test_identity_is_the_folder_or_the_name_else_both_are_named(tmp_path, monkeypatch):
    folder, other = tmp_path / "ckpt", tmp_path / "other"
    folder.mkdir()
    other.mkdir()
    monkeypatch.chdir(tmp_path)
    vllm = Fake("vllm", path=str(folder))
    decoder(vllm, model="ckpt").check_model(MODEL)  # a relative MODEL: the same folder resolved
    with pytest.raises(LoopcertError) as e:
        decoder(vllm, model=str(other)).check_model(MODEL)
    assert str(e.value).startswith(f"vLLM 0.32.0 at {URL} serves '{folder}'")
    assert f"not '{other}'" in str(e.value) and "--served-model" in str(e.value)
    remote = Fake("sglang", path="/mnt/elsewhere/ckpt")
    with pytest.raises(LoopcertError, match=f"SGLang at {URL} serves '/mnt/elsewhere/ckpt', not 'ckpt'"):
        decoder(remote, model="ckpt").check_model(MODEL)
    decoder(remote, model="ckpt", served_model="/mnt/elsewhere/ckpt").check_model(MODEL)  # the override
    with pytest.raises(LoopcertError, match="serves 'tiny-ouro' / 'tiny-ouro', not 'tiny-raven'"):
        decoder(Fake("vllm")).check_model(refdec.load_model("tiny-raven"))
    long = Fake("vllm", max_model_len=MODEL.cfg.max_seq_len * 2)
    with pytest.raises(LoopcertError, match="reports max_model_len .* longer than 'tiny-ouro'"):
        decoder(long).check_model(MODEL)


def test_vllm_choice_seeds_are_cross_checked_once():
    fake = Fake("vllm")
    dec = decoder(fake)
    dec.check_model(MODEL)
    got = dec.generate_batch([[1, 2]] * 4, 3, T1, [10, 11, 12, 13])
    assert [(b["seed"], b["n"]) for b in fake.bodies] == [(10, 4), (11, 1), (13, 1)]  # choices 1 and m-1
    assert got == [dec.generate([1, 2], 3, T1, s) for s in (10, 11, 12, 13)]
    fake.bodies.clear()
    dec.generate_batch([[1, 2]] * 4, 3, T1, [20, 21, 22, 23])
    assert [(b["seed"], b["n"]) for b in fake.bodies] == [(20, 4)]  # checked once
    assert "cross-checked" in dec.description


def test_a_server_that_seeds_choices_otherwise_gets_one_sample_per_request():
    fake, lines = Fake("openai", seed_step=2), []
    dec = decoder(fake, lines)
    dec.check_model(MODEL)
    dec.generate_batch([[1, 2]] * 3, 3, T1, [10, 11, 12])
    assert any("did not decode with seed 10 + j" in line for line in lines)
    fake.bodies.clear()
    got = dec.generate_batch([[1, 2]] * 3, 3, T1, [30, 31, 32])
    assert [(b["seed"], b["n"]) for b in fake.bodies] == [(30, 1), (31, 1), (32, 1)]
    assert got == [dec.generate([1, 2], 3, T1, s) for s in (30, 31, 32)]
    assert "n 1 per sample" in dec.description


def test_sglang_batches_keep_each_items_seed():
    fake = Fake("sglang")
    dec = decoder(fake, choices=2)
    dec.check_model(MODEL)
    prompts, seeds = [[1], [2, 3], [1], [1], [4]], [5, 9, 5, 6, 7]
    got = dec.generate_batch(prompts, 3, T1, seeds)
    assert [[p["sampling_seed"] for p in b["sampling_params"]] for b in fake.bodies[:2]] == [[5, 9], [5, 6]]
    assert fake.bodies[2]["sampling_params"]["sampling_seed"] == 7  # one item: no lists
    assert got == [dec.generate(p, 3, T1, s) for p, s in zip(prompts, seeds)]
    assert got[0] == got[2]


@pytest.fixture
def fake_server(monkeypatch):
    monkeypatch.setitem(plan_mod.PLANS, "quick", HTTP_PLAN)

    def serve(fake):
        monkeypatch.setattr(http_decoder, "HTTPClient", transport_of(fake))
        return fake

    return serve


def certify(out, *flags):
    argv = ["certify", "tiny-ouro", "--decoder", URL, "--out", str(out), "--seed", "1", "--jobs", "1", *flags]
    return main(argv), read_certificate(out / "certificate.json")


@pytest.mark.slow  # the fake decodes each sample with refdec's uncached oracle (docs/measurements.md)
def test_a_lossless_sglang_server_is_certified_and_named(fake_server, tmp_path):
    fake_server(Fake("sglang"))
    rc, cert = certify(tmp_path)
    assert rc == 0 and cert.verdict == "PASS", cert.failed
    assert cert.stamp.decoder.startswith(f"{URL} (SGLang at {URL}, sglang dialect")
    assert "--server sglang --http-timeout 60" in cert.stamp.command


@pytest.mark.slow  # the fake decodes each sample with refdec's uncached oracle (docs/measurements.md)
def test_an_sglang_server_ignoring_seeds_is_non_reproducible_naming_the_flag(fake_server, tmp_path):
    fake_server(Fake("sglang", ignore_seed=True))
    rc, cert = certify(tmp_path, "--server", "sglang")
    assert rc == 1 and cert.verdict == "NON-REPRODUCIBLE"
    assert cert.failed == (
        "reproducibility",
        "seed_invariance",
    )  # its seeds are ignored alone and beside others
    assert "--enable-deterministic-inference" in cert.check("reproducibility").power


def test_a_server_whose_answers_are_wrong_never_passes(fake_server, tmp_path):
    """Every answer stops early (finish reason 'stop'): each check that asks fails, none passes."""
    fake_server(Fake("vllm", finish="stop"))
    rc, cert = certify(tmp_path)
    assert rc == 1 and cert.verdict == "FAIL"
    assert {"greedy_float64", "reproducibility"} <= set(cert.failed)
    assert any(s.startswith("sampling[") for s in cert.failed)
    why = cert.check("greedy_float64").details.divergences[0].why
    assert "finish reason 'stop', not 'length'" in why and "POST /v1/completions (seed 0, n 1)" in why


def test_http_flags_need_an_http_decoder_and_good_values(tmp_path, capsys):
    assert main(["certify", "tiny-ouro", "--server", "vllm", "--out", str(tmp_path)]) == 2
    assert "--server: only with --decoder http://" in capsys.readouterr().err
    argv = ["certify", "tiny-ouro", "--decoder", URL, "--http-timeout", "0", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert "--http-timeout must be a number of seconds > 0, got 0.0" in capsys.readouterr().err


def test_a_fingerprint_in_get_model_info_is_checked_too():
    """loopcert serve's /get_model_info carries its model's fingerprint: a server of the right name
    with other weights is refused, naming both fingerprints; the right one passes."""
    from refdec.load import model_fingerprint

    mine = model_fingerprint(MODEL)
    decoder(Fake("sglang", loopcert={"fingerprint": mine})).check_model(MODEL)
    wrong = decoder(Fake("sglang", loopcert={"fingerprint": "0" * 64}))
    with pytest.raises(LoopcertError, match=f"fingerprint 000000000000, not 'tiny-ouro'.*{mine[:12]}"):
        wrong.check_model(MODEL)
