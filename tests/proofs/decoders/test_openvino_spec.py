"""--decoder openvino[:...]: the spec, the certificate's settings, the GenerationConfig mapping and
the missing-extra message. None of these needs OpenVINO (tests/proofs/engines/test_openvino_*.py
run OpenVINO GenAI itself, in tox -e openvino)."""

from __future__ import annotations

import sys

import pytest

import refdec
from proofs.decoders.candidates import user_candidate
from proofs.decoders.openvino_decoder import import_genai, openvino_stamp
from proofs.decoders.openvino_spec import (
    DEFAULT_MAX_NGRAM,
    DEFAULT_NUM_ASSISTANT,
    is_openvino_spec,
    parse_openvino_spec,
)
from refdec.errors import LoopcertError
from refdec.sampling import TEMPERATURE_FIRST


@pytest.fixture
def draft_dir(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    return tmp_path


def test_plain_and_speculative_specs(draft_dir):
    s = parse_openvino_spec("openvino")
    assert (s.backend, s.mode, s.precision, s.speculative, s.threads) == ("pa", "plain", "f32", False, None)
    s = parse_openvino_spec("openvino:backend=sdpa,spec=prompt_lookup,num_assistant=4,max_ngram=2")
    assert (s.backend, s.mode, s.num_assistant, s.max_ngram) == ("sdpa", "prompt_lookup", 4, 2)
    s = parse_openvino_spec(f"openvino:draft={draft_dir},precision=default,threads=1")
    assert (s.draft, s.precision, s.threads, s.speculative) == (str(draft_dir), "default", 1, True)
    assert parse_openvino_spec("openvino:draft=self").num_assistant == DEFAULT_NUM_ASSISTANT
    assert parse_openvino_spec("openvino:spec=prompt_lookup").max_ngram == DEFAULT_MAX_NGRAM
    assert parse_openvino_spec("openvino:config.total_ut_steps=3").overrides == {"total_ut_steps": 3}
    assert is_openvino_spec("openvino") and is_openvino_spec("openvino:backend=sdpa")
    assert not is_openvino_spec("openvinox:make") and not is_openvino_spec("mypkg:make")
    assert not is_openvino_spec(None)


@pytest.mark.parametrize(
    "spec, named",
    [
        ("openvino:", "nothing after"),
        ("openvino:backend", "'backend' is not KEY=VALUE"),
        ("openvino:backend=vllm", "backend must be one of pa, sdpa, got 'vllm'"),
        ("openvino:spec=eagle", "spec must be plain or prompt_lookup, got 'eagle'"),
        ("openvino:draft=/no/such/folder", "draft='/no/such/folder' is not a model folder"),
        ("openvino:spec=prompt_lookup,draft=self", "two kinds of drafts"),
        ("openvino:num_assistant=3", "num_assistant= needs spec=prompt_lookup or draft="),
        ("openvino:draft=self,max_ngram=2", "max_ngram= needs spec=prompt_lookup"),
        ("openvino:draft=self,num_assistant=0", "num_assistant must be an integer >= 1, got '0'"),
        ("openvino:precision=fp64", "precision must be one of f32, bf16, f16, default, got 'fp64'"),
        ("openvino:threads=all", "threads must be an integer >= 1, got 'all'"),
        ("openvino:kv=i8", "kv must be one of f32, f16, bf16, u8, u4, u3, default, got 'i8'"),
        ("openvino:key_cache=f64", "key_cache must be one of f32, f16, bf16, u8, u4, u3, default, got 'f64'"),
        ("openvino:value_cache=int8", "value_cache must be one of"),
        ("openvino:kv_group=-1", "kv_group must be an integer >= 0 or default, got '-1'"),
        ("openvino:dq_group=off", "dq_group must be an integer >= 0 or default, got 'off'"),
        ("openvino:execution_mode=fast", "execution_mode must be one of performance, accuracy, default"),
        ("openvino:denormals=true", "denormals must be one of on, off, default, got 'true'"),
        ("openvino:kv=f32,kv=f16", "kv= given twice"),
        ("openvino:backend=pa,backend=sdpa", "backend= given twice"),
        ("openvino:temperature=1", "unknown key 'temperature'"),
        ("openvino:config.total_ut_steps=x", "config.total_ut_steps must be an integer"),
    ],
)
def test_bad_specs_are_named(spec, named):
    with pytest.raises(LoopcertError, match="--decoder") as e:
        parse_openvino_spec(spec)
    assert named in str(e.value) and repr(spec) in str(e.value)


def test_the_precision_hint_is_in_the_settings_and_the_stamp():
    """The certificate states the hint it decoded under (the stamp's decoder line, the candidate's
    settings): f32 unless the spec says otherwise."""
    c = user_candidate("openvino")  # builds nothing yet: no OpenVINO needed
    assert c.settings["INFERENCE_PRECISION_HINT"] == "f32" and c.settings["ATTENTION_BACKEND"] == "PA"
    assert c.sampler_order == TEMPERATURE_FIRST and not c.own_model
    assert "INFERENCE_PRECISION_HINT=f32" in openvino_stamp("openvino")
    stamp = openvino_stamp("openvino:backend=sdpa,precision=default,spec=prompt_lookup")
    assert "ATTENTION_BACKEND=SDPA" in stamp and "INFERENCE_PRECISION_HINT=(OpenVINO's)" in stamp
    assert "prompt_lookup" in stamp and "max_ngram_size=3" in stamp
    with pytest.raises(LoopcertError, match="unknown key 'tempo'"):
        user_candidate("openvino:tempo=1")


def test_every_precision_property_is_set_stated_or_left_to_openvino():
    """loopcert's defaults are the lossless ones (f32 compute and KV cache, no dynamic
    quantization); each key sets its plugin property; precision=default leaves every property the
    spec does not give to OpenVINO, and the settings say which ("(OpenVINO's)")."""
    s = parse_openvino_spec("openvino")
    want = {
        "INFERENCE_PRECISION_HINT": "f32",
        "KV_CACHE_PRECISION": "f32",
        "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0,
    }
    assert s.plugin_properties() == want
    settings = s.settings()
    assert settings["KV_CACHE_PRECISION"] == "f32" and settings["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == "0"
    assert (
        settings["EXECUTION_MODE_HINT"] == "(OpenVINO's)"
        and settings["KEY_CACHE_GROUP_SIZE"] == "(OpenVINO's)"
    )
    assert parse_openvino_spec("openvino:precision=default").plugin_properties() == {}
    assert parse_openvino_spec("openvino:precision=default,kv=f32").plugin_properties() == {
        "KV_CACHE_PRECISION": "f32"
    }
    every = parse_openvino_spec(
        "openvino:kv=u8,key_cache=f16,value_cache=u4,kv_group=16,dq_group=64,execution_mode=accuracy,"
        "denormals=on,threads=2"
    )
    assert every.plugin_properties() == {
        "INFERENCE_PRECISION_HINT": "f32",
        "KV_CACHE_PRECISION": "u8",
        "KEY_CACHE_PRECISION": "f16",
        "VALUE_CACHE_PRECISION": "u4",
        "KEY_CACHE_GROUP_SIZE": 16,
        "VALUE_CACHE_GROUP_SIZE": 16,
        "DYNAMIC_QUANTIZATION_GROUP_SIZE": 64,
        "EXECUTION_MODE_HINT": "ACCURACY",
        "CPU_DENORMALS_OPTIMIZATION": True,
        "INFERENCE_NUM_THREADS": 2,
    }
    stamp = openvino_stamp("openvino:kv=f16,dq_group=default")  # no decoder built: as set only
    assert "KV_CACHE_PRECISION=f16" in stamp and "DYNAMIC_QUANTIZATION_GROUP_SIZE=(OpenVINO's)" in stamp
    assert "effective" not in stamp


def test_a_missing_openvino_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino_genai", None)  # import -> ImportError
    with pytest.raises(LoopcertError, match=r"needs openvino-genai .*pip install 'loopcert\[openvino\]'"):
        import_genai()
    with pytest.raises(LoopcertError, match=r"loopcert\[openvino\]"):
        user_candidate("openvino").build(refdec.load_model("tiny-ouro"))
