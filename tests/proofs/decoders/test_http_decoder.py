"""`loopcert certify --decoder http://...`: a real `loopcert serve` subprocess certified through
its completions API; a lossy server is rejected, a seed-ignoring one is NON-REPRODUCIBLE.
A reduced plan keeps each run to seconds; `tox -e certify` style runs use QUICK."""

from __future__ import annotations

import json
import socket

import pytest

for extra in ("httpx", "fastapi", "uvicorn"):  # the serve extra; tox's py env installs it
    pytest.importorskip(extra)

from plans import HTTP_PLAN, HTTP_SERVE  # noqa: E402
from serving import start  # noqa: E402

import proofs.run.plan as plan_mod  # noqa: E402
import refdec  # noqa: E402
from loopcert.cli import main  # noqa: E402
from proofs.certificate import Certificate, read_certificate  # noqa: E402
from proofs.decoders.http_decoder import HTTPDecoder  # noqa: E402
from refdec.errors import LoopcertError  # noqa: E402
from refdec.load import model_fingerprint  # noqa: E402
from refdec.sampling import SamplingParams  # noqa: E402

TINY = HTTP_SERVE


@pytest.fixture(scope="module")
def good_server(request, tmp_path_factory):
    return start(request, tmp_path_factory, *TINY)


@pytest.fixture
def http_plan(monkeypatch):
    monkeypatch.setitem(plan_mod.PLANS, "quick", HTTP_PLAN)


def certify_json(url: str, out) -> tuple[int, Certificate]:
    rc = main(["certify", "tiny-ouro", "--decoder", url, "--out", str(out), "--seed", "1"])
    return rc, read_certificate(out / "certificate.json")


def test_lossless_server_is_certified(good_server, tmp_path, http_plan):
    server = good_server
    rc, cert = certify_json(server.url, tmp_path)
    assert rc == 0 and cert.verdict == "PASS", cert.failed
    names = [c.name for c in cert.checks]
    assert f"sampling[tiny-ouro: {server.url}]" in names and "reproducibility" in names
    greedy = cert.check("greedy_float64")
    assert any("tiny-raven" in s for s in greedy.details.not_applicable)  # serves only its own model
    assert "## Reproducibility: pass" in (tmp_path / "certificate.md").read_text()
    assert f"(loopcert serve at {server.url}, openai dialect" in cert.stamp.decoder
    assert "--server loopcert" in cert.stamp.command


def test_lossy_server_is_rejected(request, tmp_path_factory, tmp_path, http_plan):
    server = start(
        request,
        tmp_path_factory,
        "tiny-ouro",
        "--strategy",
        "adaptive-verify",
        "--draft-depth",
        "1",
        "--rewind-depth",
        "2",
    )
    rc, cert = certify_json(server.url, tmp_path)
    assert rc == 1 and cert.verdict == "FAIL"
    assert f"sampling[tiny-ouro: {server.url}]" in cert.failed and "greedy_float64" in cert.failed
    assert "reproducibility" not in cert.failed


@pytest.mark.tier2
def test_seed_ignoring_server_is_non_reproducible_not_wrong(request, tmp_path_factory, tmp_path, http_plan):
    server = start(request, tmp_path_factory, *TINY, "--ignore-request-seed")
    rc, cert = certify_json(server.url, tmp_path)
    assert rc == 1 and cert.verdict == "NON-REPRODUCIBLE"
    assert cert.failed == (
        "reproducibility",
        "seed_invariance",
    )  # its seeds are ignored alone and beside others
    repro = cert.check("reproducibility")
    assert repro.measured == 3 and repro.details.differences
    assert (tmp_path / "certificate.md").read_text().startswith("# loopcert certificate: NON-REPRODUCIBLE")


def test_http_decoder_refuses_another_model_and_maps_sampling(good_server):
    dec = HTTPDecoder(good_server.url)
    try:
        dec.check_model(refdec.load_model("tiny-ouro", dtype="float64"))  # float64 copy: same fingerprint
        with pytest.raises(LoopcertError, match="serves 'tiny-ouro'.*not 'tiny-raven'"):
            dec.check_model(refdec.load_model("tiny-raven"))
        toks = dec.generate([1, 2, 3], 5, SamplingParams(temperature=0.7, top_k=3), seed=4)
        assert len(toks) == 5 and all(0 <= t < 13 for t in toks)
        sp = SamplingParams(temperature=0.7, top_k=3)
        assert dec.generate_batch([[1, 2, 3]] * 3, 5, sp, [9, 4, 9]) == [
            dec.generate([1, 2, 3], 5, sp, seed=s) for s in (9, 4, 9)
        ]
        # runs of consecutive seeds of one prompt go as requests of `choices` samples (API's n)
        sent, post = [], dec._post
        dec._post = lambda ask: sent.append((ask.prompts[0][0], ask.seeds[0], ask.n)) or post(ask)
        prompts = [[1, 2, 3]] * 40 + [[2]] * 2
        seeds = list(range(20, 60)) + [60, 61]
        got = dec.generate_batch(prompts, 4, sp, seeds)
        assert sorted(sent) == [(1, 20, 16), (1, 36, 16), (1, 52, 8), (2, 60, 2)]
        assert got == [dec.generate(p, 4, sp, seed=s) for p, s in zip(prompts, seeds)]
    finally:
        dec.close()
    fingerprints = {model_fingerprint(refdec.load_model(name)) for name in ("tiny-ouro", "tiny-raven")}
    assert len(fingerprints) == 2


def test_a_server_of_another_model_is_a_usage_error_and_keeps_the_certificate(
    good_server, tmp_path, capsys, http_plan
):
    """It was a FAIL certificate that replaced a good one in --out; now exit 2 before any
    check, naming what the server serves, the old files untouched."""
    old = {"certificate.md": "# old\n", "certificate.json": '{"old": true}\n'}
    for name, text in old.items():
        (tmp_path / name).write_text(text)
    rc = main(["certify", "tiny-raven", "--decoder", good_server.url, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "serves 'tiny-ouro'" in err and "not 'tiny-raven'" in err, err
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == old


def test_unreachable_server_is_a_usage_error(tmp_path, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = main(["certify", "tiny-ouro", "--decoder", f"http://127.0.0.1:{port}/v1", "--out", str(tmp_path)])
    assert rc == 2 and "cannot reach" in capsys.readouterr().err
    assert not (tmp_path / "certificate.json").exists()


def test_http_decoder_refuses_choices_decoded_for_other_seeds(good_server):
    """The per-choice seed rule (choice k: seed + k) is checked on every response: a server
    that numbers choices otherwise is refused, naming the choice and both seeds."""
    import httpx

    dec = HTTPDecoder(good_server.url)

    def handler(req):
        body = json.loads(req.content)
        choices = [
            {"tokens": [0] * body["max_tokens"], "requested_seed": body["seed"] + 2 * k}
            for k in range(body["n"])
        ]
        plain = [{"index": k, "finish_reason": "length"} for k in range(body["n"])]
        return httpx.Response(200, json={"choices": plain, "loopcert": {"choices": choices}})

    try:
        dec.http.client = httpx.Client(transport=httpx.MockTransport(handler))
        sp = SamplingParams(temperature=1.0)
        assert dec.generate_batch([[1]], 2, sp, [5]) == [[0, 0]]  # one choice: seed + 0
        with pytest.raises(LoopcertError, match="choice 1 was decoded for seed 7, not 6"):
            dec.generate_batch([[1]] * 3, 2, sp, [5, 6, 7])
    finally:
        dec.close()


def test_loopcert_serve_is_certified_through_its_sglang_endpoint(good_server, tmp_path, http_plan):
    """--server sglang speaks SGLang's native /generate (one item per sample, sampling_seed each)
    to loopcert serve's implementation of it (loopcert/serve/sglang.py)."""
    argv = ["certify", "tiny-ouro", "--decoder", good_server.url, "--server", "sglang"]
    rc = main([*argv, "--out", str(tmp_path), "--seed", "1"])
    cert = read_certificate(tmp_path / "certificate.json")
    assert rc == 0 and cert.verdict == "PASS", cert.failed
    assert "sglang dialect" in cert.stamp.decoder and "--server sglang" in cert.stamp.command


def test_http_decoder_declares_its_dialects_parameters_and_reports_a_refusal(good_server):
    """vLLM, SGLang and loopcert serve take every engine parameter (SGLang masks min-p last); a
    client error answering a request that sets one is the engine refusing it (protocol.Refused,
    with the server's message); on a plain request it stays an error (the negative control)."""
    import httpx

    from proofs.decoder_attributes import declared_sampling
    from proofs.decoders.http_decoder import HTTPOptions
    from proofs.decoders.protocol import Refused
    from refdec.sampling import ENGINE_FIELDS, MIN_P_FIRST, MIN_P_LAST

    dec = HTTPDecoder(good_server.url)
    sg = HTTPDecoder(good_server.url, HTTPOptions(server="sglang"))
    try:
        assert declared_sampling(dec).fields == set(ENGINE_FIELDS) and dec.min_p_order == MIN_P_FIRST
        assert declared_sampling(sg).min_p_order == MIN_P_LAST

        def handler(req):
            return httpx.Response(400, json={"error": {"message": "min_p is not supported with ngram"}})

        dec.http.client = httpx.Client(transport=httpx.MockTransport(handler))
        with pytest.raises(Refused, match="HTTP 400: .*min_p is not supported with ngram"):
            dec.generate_batch([[1]], 2, SamplingParams(temperature=1.0, min_p=0.1), [5])
        with pytest.raises(LoopcertError, match="answered HTTP 400") as plain:
            dec.generate_batch([[1]], 2, SamplingParams(temperature=1.0), [5])
        assert not isinstance(plain.value, Refused)
    finally:
        dec.close()
        sg.close()


def test_the_server_reports_where_its_state_changes_shape(good_server):
    """loopcert serve reports its decoder's boundaries and speculation widths on /v1/models; the HTTP
    decoder declares them (proofs/boundaries.py collects them as the decoder's), beside --boundaries."""
    from proofs.boundaries import collect
    from proofs.decoder_attributes import speculation_widths

    dec = HTTPDecoder(good_server.url)
    try:
        reported = dict(dec.boundaries)
        assert reported and all(what.endswith("(reported by the server)") for what in reported.values())
        assert any("cache capacity" in what for what in reported.values())
        found = {b.position: b for b in collect(refdec.load_model("tiny-ouro").cfg, dec, 64)}
        assert all(p in found for p in reported if p <= 126)
        import httpx

        card = httpx.get(good_server.url + "/models").json()["data"][0]["loopcert"]["decoder"]
        assert speculation_widths(dec) == card["speculation_widths"]  # [] unless it drafts ahead
    finally:
        dec.close()


def test_vllms_block_size_is_read_from_its_metrics():
    from proofs.decoders.server_info import _vllm_blocks

    class Metrics:
        def __init__(self, text):
            self.text = text

        def get_text(self, path):
            assert path == "/metrics"
            return self.text

    line = 'vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0"} 1.0\n'
    assert _vllm_blocks(Metrics("# HELP ...\n" + line)) == (
        (16, "KV block of 16 tokens fills (vLLM /metrics cache_config_info)"),
    )
    assert _vllm_blocks(Metrics(None)) == () and _vllm_blocks(Metrics("vllm:other 1.0\n")) == ()


@pytest.mark.tier2
def test_a_server_is_certified_from_python_with_typed_options(good_server):
    """loopcert.api.certify(model, URL, http=HTTPOptions(...)): the command's HTTP flags as data;
    the stamp names the server and dialect as the command's does, and the next call without
    options speaks the default dialect again (each call's options are its own)."""
    from loopcert.api import HTTPOptions, certify

    cert = certify("tiny-ouro", good_server.url, plan=HTTP_PLAN, seed=1, http=HTTPOptions(server="sglang"))
    assert cert.verdict == "PASS", cert.failed
    assert cert.stamp.decoder.startswith(f"{good_server.url} (SGLang at {good_server.url}, sglang dialect")
    cert = certify("tiny-ouro", good_server.url, plan=HTTP_PLAN, seed=1)
    assert cert.verdict == "PASS" and "openai dialect" in cert.stamp.decoder, cert.stamp.decoder
