"""Each dialect's request body spells out every sampling field, and every way an answer can be
wrong is refused naming the server, the request and the field (proofs/decoders/dialects.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from proofs.decoders.dialects import VLLM, Ask, OpenAI, SGLang, check_choice, consecutive_runs
from proofs.decoders.server_info import version_tuple
from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams

T1 = SamplingParams(temperature=1.0)
ASK = Ask(((1, 2),), (7,), 3, T1)
SERVER = "vLLM 0.32.0 at http://h/v1"


def test_vllm_body_sends_every_sampling_field():
    assert VLLM().body("m", Ask(((1, 2),), (7, 8), 3, SamplingParams(temperature=0.5, top_p=0.9))) == {
        "model": "m",
        "prompt": [1, 2],
        "max_tokens": 3,
        "min_tokens": 3,
        "n": 2,
        "seed": 7,
        "ignore_eos": True,
        "temperature": 0.5,
        "top_k": 0,  # vLLM 0.32's "no top-k" (vllm/sampling_params.py)
        "top_p": 0.9,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "return_token_ids": True,
    }
    body = VLLM(token_ids=False).body("m", Ask(((1,),), (0,), 2, SamplingParams(temperature=1.0, top_k=5)))
    assert body["top_k"] == 5 and body["top_p"] == 1.0 and "return_token_ids" not in body
    assert body["logprobs"] == 1 and body["return_tokens_as_token_ids"] is True


def test_sglang_body_is_one_item_per_sample_each_with_its_seed():
    one = SGLang().body(None, ASK)
    assert one == {
        "input_ids": [1, 2],
        "sampling_params": {
            "temperature": 1.0,
            "top_k": -1,  # SGLang's "no top-k"
            "top_p": 1.0,
            "min_p": 0.0,
            "max_new_tokens": 3,
            "min_new_tokens": 3,
            "ignore_eos": True,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "sampling_seed": 7,
        },
    }
    many = SGLang().body(None, Ask(((1,), (2, 3)), (4, 9), 3, T1))
    assert many["input_ids"] == [[1], [2, 3]]
    assert [p["sampling_seed"] for p in many["sampling_params"]] == [4, 9]
    # SGLang requests are chunks of `most` samples whatever their seeds; n-style ones are seed runs
    asks = SGLang().requests([(1,)] * 5, [3, 9, 4, 5, 6], 2, T1, most=2)
    assert [a.seeds for a in asks] == [(3, 9), (4, 5), (6,)]
    assert consecutive_runs([(1,)] * 5, [3, 9, 4, 5, 6], most=2) == [(0, 1), (1, 1), (2, 2), (4, 1)]


def test_openai_body_is_loopcert_serves_and_every_field_it_accepts():
    assert OpenAI().body("m", Ask(((1, 2),), (7,), 3, SamplingParams())) == {
        "model": "m",
        "prompt": [1, 2],
        "max_tokens": 3,
        "n": 1,
        "seed": 7,
        "ignore_eos": True,
        "temperature": 0.0,
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }
    assert OpenAI().body("m", Ask(((1,),), (0,), 1, SamplingParams(temperature=1.0, top_k=2)))["top_k"] == 2


def vllm_answer(*choices):
    return {"choices": [{"index": k, **c} for k, c in enumerate(choices)]}


@pytest.mark.parametrize(
    "choice, message",
    [
        ({"token_ids": [1, 2], "finish_reason": "stop"}, "choice 0 has finish reason 'stop', not 'length'"),
        ({"token_ids": [1, 2], "finish_reason": "length"}, "choice 0 has 2 token ids, not max_tokens 3"),
        (
            {"token_ids": [1, 2, 13], "finish_reason": "length"},
            r"token id 13 is outside the vocabulary \[0, 13\)",
        ),
        ({"token_ids": [1, 2, -1], "finish_reason": "length"}, "token id -1 is outside"),
        ({"token_ids": [1, "a", 2], "finish_reason": "length"}, "not a list of ints"),
        ({"text": "abc", "finish_reason": "length"}, "choice 0 has no token_ids"),
    ],
)
def test_a_wrong_vllm_choice_is_refused_naming_server_request_and_field(choice, message):
    with pytest.raises(LoopcertError, match=message) as e:
        VLLM().tokens(vllm_answer(choice), ASK, SERVER, 13)
    assert str(e.value).startswith(f"{SERVER}: POST /v1/completions (seed 7, n 1)")


def test_vllm_answers_are_read_in_index_order_and_counted():
    good = {"finish_reason": "length"}
    answer = {
        "choices": [
            {"index": 1, "token_ids": [4, 5, 6], **good},
            {"index": 0, "token_ids": [1, 2, 3], **good},
        ]
    }
    assert VLLM().tokens(answer, Ask(((1, 2),), (7, 8), 3, T1), SERVER, 13) == [[1, 2, 3], [4, 5, 6]]
    with pytest.raises(LoopcertError, match="answered 2 choices, asked for n 1"):
        VLLM().tokens(answer, ASK, SERVER, 13)
    with pytest.raises(LoopcertError, match="answered no choices"):
        VLLM().tokens({"error": "x"}, ASK, SERVER, 13)


def test_old_vllm_ids_come_from_logprob_tokens():
    lp = {"tokens": ["token_id:3", "token_id:0", "token_id:12"]}
    ans = vllm_answer({"logprobs": lp, "finish_reason": "length"})
    assert VLLM(token_ids=False).tokens(ans, ASK, SERVER, 13) == [[3, 0, 12]]
    bad = vllm_answer(
        {"logprobs": {"tokens": ["token_id:3", "hello", "token_id:1"]}, "finish_reason": "length"}
    )
    with pytest.raises(LoopcertError, match="logprobs token 'hello' is not 'token_id:N'"):
        VLLM(token_ids=False).tokens(bad, ASK, SERVER, 13)
    assert version_tuple("0.10.1.post1") == (0, 10, 1) and version_tuple("0.10.2rc1") == (0, 10, 2)
    assert version_tuple("0.32.0") >= (0, 10, 2) > version_tuple("0.9.2")


def sglang_item(ids, finish="length"):
    return {"text": "", "output_ids": ids, "meta_info": {"finish_reason": {"type": finish}}}


def test_sglang_answers_are_checked_per_item():
    two = Ask(((1,), (2,)), (4, 9), 3, T1)
    assert SGLang().tokens([sglang_item([1, 2, 3]), sglang_item([3, 2, 1])], two, "S", 13) == [
        [1, 2, 3],
        [3, 2, 1],
    ]
    assert SGLang().tokens(sglang_item([0, 0, 0]), ASK, "S", 13) == [[0, 0, 0]]  # one item: a dict
    with pytest.raises(LoopcertError, match=r"S: POST /generate \(seed 4, n 2\) answered 1 items, sent 2"):
        SGLang().tokens([sglang_item([1, 2, 3])], two, "S", 13)
    with pytest.raises(LoopcertError, match="choice 1 has finish reason 'stop'"):
        SGLang().tokens([sglang_item([1, 2, 3]), sglang_item([1, 2, 3], "stop")], two, "S", 13)
    with pytest.raises(LoopcertError, match="item 0 has no output_ids"):
        SGLang().tokens({"text": "x", "meta_info": {}}, ASK, "S", 13)


def test_loopcert_answers_need_the_extension_and_state_each_choice_seed():
    plain = {"choices": [{"index": 0, "finish_reason": "length"}]}
    with pytest.raises(LoopcertError, match="no loopcert.choices"):
        OpenAI().tokens(plain, ASK, "L", 13)
    ext = {**plain, "loopcert": {"choices": [{"tokens": [1, 1, 1], "requested_seed": 7}]}}
    assert OpenAI().tokens(ext, ASK, "L", 13) == [[1, 1, 1]]
    with pytest.raises(LoopcertError, match="neither loopcert.choices"):
        OpenAI(loopcert=False).tokens(plain, ASK, "O", 13)
    ids = {"choices": [{"index": 0, "finish_reason": "length", "token_ids": [2, 2, 2]}]}
    assert OpenAI(loopcert=False).tokens(ids, ASK, "O", 13) == [[2, 2, 2]]


ENGINE = SamplingParams(
    temperature=0.8,
    top_p=0.9,
    min_p=0.1,
    repetition_penalty=1.3,
    frequency_penalty=0.5,
    presence_penalty=0.25,
    logit_bias={4: 1.5},
    stop_token_ids=[9],
    min_tokens=1,
)


def test_the_engines_other_parameters_are_sent_by_their_names():
    ask = Ask(((1, 2),), (7,), 3, ENGINE)
    v = VLLM().body("m", ask)
    assert (v["min_p"], v["repetition_penalty"], v["frequency_penalty"], v["presence_penalty"]) == (
        0.1,
        1.3,
        0.5,
        0.25,
    )
    assert v["logit_bias"] == {"4": 1.5} and v["stop_token_ids"] == [9] and v["min_tokens"] == 1
    o = OpenAI().body("m", ask)
    assert o["stop_token_ids"] == [9] and o["min_p"] == 0.1 and o["logit_bias"] == {"4": 1.5}
    with pytest.raises(LoopcertError, match="OpenAI-compatible server has no min_p"):
        OpenAI(loopcert=False).body("m", ask)
    with pytest.raises(LoopcertError, match="min_p_order 'min-p-first': SGLang"):
        SGLang().body("m", ask)
    sg = SGLang().body("m", Ask(((1, 2),), (7,), 3, replace(ENGINE, min_p_order="min-p-last")))
    p = sg["sampling_params"]
    assert p["min_new_tokens"] == 1 and p["stop_token_ids"] == [9] and p["logit_bias"] == {"4": 1.5}


def test_a_choice_may_end_at_a_stop_token_and_never_go_past_it():
    ask = Ask(((1, 2),), (7,), 3, ENGINE)
    assert check_choice("s", "w", 0, [5, 9], "stop", ask, 13) == [5, 9]
    assert check_choice("s", "w", 0, [5, 6, 9], "stop", ask, 13) == [5, 6, 9]
    assert check_choice("s", "w", 0, [5, 6, 7], "length", ask, 13) == [5, 6, 7]
    with pytest.raises(LoopcertError, match="2 token ids, not max_tokens 3"):
        check_choice("s", "w", 0, [5, 6], "length", ask, 13)
    with pytest.raises(LoopcertError, match="finish reason 'stop'"):
        check_choice("s", "w", 0, [5, 6], "stop", ask, 13)  # not at a stop token
    with pytest.raises(LoopcertError, match="finish reason 'stop'"):
        check_choice("s", "w", 0, [9], "stop", ASK, 13)  # the case has no stop tokens
