"""SGLang's /generate and /get_model_info on a real `loopcert serve` subprocess: SGLang's shapes,
the same tokens as /v1/completions and as the decoder in process for one seed, the seed rule of
a batch, and bad input as a 400 naming the field."""

from __future__ import annotations

import pytest

httpx = pytest.importorskip("httpx")  # the serve extra; tox's py env installs it
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from serving import start  # noqa: E402

import fastdec  # noqa: E402
import refdec  # noqa: E402
from refdec.load import model_fingerprint  # noqa: E402
from refdec.sampling import SamplingParams  # noqa: E402

TINY = ("tiny-ouro", "--draft-depth", "1")
BYTES = ("default", "--draft-depth", "2")  # byte-level text


@pytest.fixture(scope="module")
def server(request, tmp_path_factory):
    return start(request, tmp_path_factory, *TINY)


@pytest.fixture(scope="module")
def local():
    """The served decoder in this process: what every answer must equal."""
    return fastdec.Decoder(refdec.load_model("tiny-ouro"), "pipelined", draft_depth=1)


def generate(server, body: dict, status: int = 200):
    r = httpx.post(server.root + "/generate", json=body, timeout=60)
    assert r.status_code == status, r.text
    return r.json()


def test_one_prompt_has_sglang_shape_and_equals_generate(server, local):
    out = generate(
        server, {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 6, "temperature": 0}}
    )
    want = local.generate([1, 2, 3], 6, SamplingParams()).tokens
    assert out["output_ids"] == want
    assert out["text"] is None  # vocabulary 13: no text form
    meta = out["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 6}
    assert meta["prompt_tokens"] == 3 and meta["completion_tokens"] == 6
    assert isinstance(meta["id"], str) and meta["id"]
    assert meta["loopcert"]["tokens"] == want and meta["loopcert"]["stats"]["strategy"] == "pipelined"
    body = {"input_ids": [1, 2, 3], "rid": "r1", "sampling_params": {"max_new_tokens": 2, "top_k": None}}
    put = httpx.put(server.root + "/generate", json=body, timeout=60)
    assert put.status_code == 200 and put.json()["meta_info"]["id"] == "r1"
    assert put.json()["meta_info"]["completion_tokens"] == 2
    rest = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": None, "temperature": 0}}
    assert len(generate(server, rest)["output_ids"]) == 128 - 3  # null: the rest of the context


def test_a_batch_with_one_dict_decodes_item_i_with_seed_plus_i_as_completions(server, local):
    """One sampling dict for a batch: item i decodes with sampling_seed + i, which is how
    /v1/completions decodes prompt i of a prompt list with seed + i: the same tokens either way."""
    prompts = [[1, 2, 3], [4, 5], [6]]
    sp = {"max_new_tokens": 5, "temperature": 0.9, "top_k": 5, "top_p": 0.95, "sampling_seed": 7}
    outs = generate(server, {"input_ids": prompts, "sampling_params": sp, "rid": "b"})
    assert isinstance(outs, list) and len(outs) == 3
    body = {"prompt": prompts, "max_tokens": 5, "temperature": 0.9, "top_k": 5, "top_p": 0.95, "seed": 7}
    cmpl = httpx.post(server.url + "/completions", json=body, timeout=60).json()
    law = SamplingParams(temperature=0.9, top_k=5, top_p=0.95)
    for i, (out, p) in enumerate(zip(outs, prompts)):
        assert out["meta_info"]["id"] == f"b_{i}" and out["meta_info"]["loopcert"]["seed"] == 7 + i
        assert out["output_ids"] == cmpl["loopcert"]["choices"][i]["tokens"]
        assert out["output_ids"] == local.generate(p, 5, law, seed=7 + i).tokens


def test_a_list_of_dicts_gives_each_item_its_own_seed(server, local):
    sps = [{"max_new_tokens": 4, "sampling_seed": 3}, {"max_new_tokens": 6, "sampling_seed": 3, "top_k": -1}]
    outs = generate(server, {"input_ids": [[1, 2], [1, 2]], "sampling_params": sps})
    law = SamplingParams(temperature=1.0)
    assert outs[0]["output_ids"] == local.generate([1, 2], 4, law, seed=3).tokens
    assert outs[1]["output_ids"] == local.generate([1, 2], 6, law, seed=3).tokens
    again = generate(server, {"input_ids": [1, 2], "sampling_params": [sps[0]]})
    assert again["output_ids"] == outs[0]["output_ids"]


def test_get_model_info_names_the_weights(server):
    info = httpx.get(server.root + "/get_model_info", timeout=30).json()
    assert info["model_path"] == "tiny-ouro" and info["is_generation"] is True
    assert info["loopcert"]["fingerprint"] == model_fingerprint(refdec.load_model("tiny-ouro"))
    assert info["loopcert"]["vocab_size"] == 13
    assert httpx.get(server.root + "/health", timeout=30).status_code == 200


SP = "sampling_params"


@pytest.mark.parametrize(
    "body,param",
    [
        ({}, "input_ids"),
        ({"input_ids": [1]}, "max_new_tokens"),  # SGLang's default 128 + 1 > the context of 128
        ({"input_ids": []}, "input_ids"),
        ({"input_ids": [[1], []]}, "input_ids"),
        ({"input_ids": [1, 13]}, "input_ids"),
        ({"input_ids": [[1], [2, 99]], SP: {"max_new_tokens": 2}}, "input_ids.1"),
        ({"input_ids": [1], "text": "a"}, "text"),
        ({"text": "hello"}, "text"),  # vocabulary 13, no tokenizer: token ids only
        ({"input_ids": [1], "stream": True}, "stream"),
        ({"input_ids": [1], "return_logprob": True}, "return_logprob"),
        ({"input_ids": [1], "image_data": "x.png"}, "image_data"),
        ({"input_ids": [1], "sampling_params": {"min_p": 0.1}}, "sampling_params.min_p"),
        (
            {"input_ids": [1], "sampling_params": {"repetition_penalty": 1.2}},
            "sampling_params.repetition_penalty",
        ),
        (
            {"input_ids": [1], "sampling_params": {"frequency_penalty": 0.5}},
            "sampling_params.frequency_penalty",
        ),
        ({"input_ids": [1], SP: {"presence_penalty": -1}}, f"{SP}.presence_penalty"),
        ({"input_ids": [1], "sampling_params": {"stop": ["x"]}}, "sampling_params.stop"),
        ({"input_ids": [1], "sampling_params": {"regex": "a+"}}, "sampling_params.regex"),
        ({"input_ids": [1], "sampling_params": {"n": 2}}, "sampling_params.n"),
        ({"input_ids": [1], "sampling_params": {"top_k": 0}}, "sampling_params.top_k"),
        ({"input_ids": [1], "sampling_params": {"top_p": 0}}, "sampling_params.top_p"),
        ({"input_ids": [1], "sampling_params": {"temperature": -1}}, "sampling_params.temperature"),
        ({"input_ids": [1], "sampling_params": {"max_new_tokens": 0}}, "sampling_params.max_new_tokens"),
        ({"input_ids": [1], "sampling_params": {"max_new_tokens": 500}}, "sampling_params.max_new_tokens"),
        ({"input_ids": [1], "sampling_params": {"min_new_tokens": 9, "max_new_tokens": 4}}, "min_new_tokens"),
        ({"input_ids": [1], "sampling_params": {"sampling_seed": -1}}, "sampling_params.sampling_seed"),
        ({"input_ids": [1], "sampling_params": {"bogus": 1}}, "sampling_params.bogus"),
        (
            {"input_ids": [1], "sampling_params": {"sampler_order": "filters-first"}},
            "sampling_params.sampler_order",
        ),
        ({"input_ids": [1], "sampling_params": 5}, "sampling_params"),
        ({"input_ids": [[1], [2]], "sampling_params": [{}, {"top_k": 0}]}, "sampling_params.1.top_k"),
        ({"input_ids": [[1], [2]], "sampling_params": [{}]}, "sampling_params"),
        ({"input_ids": [[1], [2]], "rid": ["a"]}, "rid"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(server, body, param):
    err = generate(server, body, 400)["error"]
    assert err["type"] == "invalid_request_error" and param in err["param"] and param in err["message"], err


def test_min_new_tokens_without_eos_changes_nothing(server):
    """tiny-ouro has no EOS token: every decode is max_new_tokens long, so min_new_tokens is moot."""
    base = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 5, "sampling_seed": 1}}
    with_min = {**base, "sampling_params": {**base["sampling_params"], "min_new_tokens": 5}}
    assert generate(server, with_min)["output_ids"] == generate(server, base)["output_ids"]


def test_text_is_tokenized_on_a_byte_model(request, tmp_path_factory):
    server = start(request, tmp_path_factory, *BYTES)
    sp = {"max_new_tokens": 4, "temperature": 0}
    by_text = generate(server, {"text": ["def ", "ab"], "sampling_params": sp})
    by_ids = generate(server, {"input_ids": [list(b"def "), list(b"ab")], "sampling_params": sp})
    assert [o["output_ids"] for o in by_text] == [o["output_ids"] for o in by_ids]
    assert by_text[0]["meta_info"]["prompt_tokens"] == 4
    assert by_text[0]["text"] == bytes(by_text[0]["output_ids"]).decode("utf-8", errors="replace")
