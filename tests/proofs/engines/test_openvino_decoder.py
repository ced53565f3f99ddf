"""loopcert's Ouro modeling code and the OpenVINO GenAI decoder against refdec (`tox -e openvino`;
docs/decoders.md, "Certify OpenVINO GenAI").

First the transformers model refdec writes beside an Ouro folder (refdec/hf/modeling_ouro.py):
its float64 logits must be refdec's (uncached, eager and SDPA attention; cached, one token at a
time; generate()), on tiny-ouro and on a variant with grouped KV heads, tied embeddings and Llama-3
RoPE scaling, so every branch of the code is compared. Then the decoder: greedy equal to refdec for
every backend and speculative mode GenAI accepts, the combinations it refuses named, seeds, and the
finding docs/measurements.md records (draft-model speculative decoding raises under sampling).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from openvino_models import require_openvino, write_ouro

import refdec
from proofs.decoder_attributes import declared_compute_dtype, declared_sampler_order
from proofs.decoders.protocol import NotApplicable
from refdec.config import RopeScaling
from refdec.errors import LoopcertError
from refdec.sampling import TEMPERATURE_FIRST, SamplingParams

pytestmark = pytest.mark.openvino
require_openvino()

from proofs.decoders.openvino_decoder import decoder_for  # noqa: E402 - after the skip

PROMPT = (1, 5, 3, 7, 2, 9, 11, 4, 0, 6, 12, 8)
N = 16
GREEDY = SamplingParams()
F64 = 1e-12  # float64 through a few small reductions: tests/tolerances.py's scale


def hf_model(folder, attn: str):
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(
        folder, trust_remote_code=True, dtype=torch.float64, attn_implementation=attn
    ).eval()


def variant() -> refdec.LoopedLM:
    """tiny-ouro with GQA (4 heads over 2 KV heads), tied embeddings and llama3 RoPE scaling."""
    cfg = dataclasses.replace(
        refdec.get_preset("tiny-ouro"),
        n_kv_heads=2,
        tie_embeddings=True,
        rope_scaling=RopeScaling(original_max_position_embeddings=16),
        name="tiny-ouro-gqa",
    )
    return refdec.LoopedLM(cfg).init_weights(3).to(torch.float64)


@pytest.mark.parametrize("which", ["tiny-ouro", "gqa-tied-scaled"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_the_modeling_code_is_refdecs_ouro_in_float64(tmp_path, which, attn):
    from refdec.checkpoints import write_published

    model = refdec.load_model("tiny-ouro", dtype=torch.float64) if which == "tiny-ouro" else variant()
    folder = write_published(model, tmp_path / which)
    hf = hf_model(folder, attn)
    ids = torch.tensor([PROMPT])
    want = model.depth_logits(ids[0], [model.cfg.recurrence])[0]  # (T, V)
    with torch.no_grad():
        got = hf(ids, use_cache=False).logits[0]
        assert (got - want).abs().max().item() <= F64
        out = hf(ids[:, :5], use_cache=True)  # cached: a prefill, then one token at a time
        rows, cache = [out.logits[0]], out.past_key_values
        for t in range(5, len(PROMPT)):
            out = hf(ids[:, t : t + 1], past_key_values=cache, use_cache=True)
            rows.append(out.logits[0])
        assert (torch.cat(rows) - want).abs().max().item() <= F64
        assert len(cache.layers) == model.cfg.n_core * model.cfg.recurrence  # one per (step, layer)
    new = hf.generate(ids, max_new_tokens=N, do_sample=False)[0, len(PROMPT) :].tolist()
    assert new == refdec.generate(model, PROMPT, N)


def test_a_wrong_loop_count_is_another_model(tmp_path):
    """The check above can fail: total_ut_steps = 3 in the written config moves the logits."""
    import json

    from refdec.checkpoints import write_published

    model = refdec.load_model("tiny-ouro", dtype=torch.float64)
    folder = write_published(model, tmp_path / "m")
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(raw | {"total_ut_steps": 3}))
    with torch.no_grad():
        got = hf_model(folder, "eager")(torch.tensor([PROMPT]), use_cache=False).logits[0]
    assert (got - model.depth_logits(PROMPT, [4])[0]).abs().max().item() > 0.1


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("openvino-ouro")
    return write_ouro(root / "tiny-ouro"), write_ouro(root / "draft", noise=0.3)


@pytest.fixture(scope="module")
def model(folders):
    return refdec.load_model(folders[0], dtype=torch.float64)


@pytest.mark.parametrize(
    "spec",
    ["openvino", "openvino:backend=sdpa", "openvino:spec=prompt_lookup", "openvino:draft=self", "DRAFT"],
)
def test_greedy_is_refdecs(folders, model, spec):
    spec = f"openvino:draft={folders[1]}" if spec == "DRAFT" else spec
    dec = decoder_for(spec + ",threads=1" if ":" in spec else spec + ":threads=1", model)
    assert declared_sampler_order(dec) == TEMPERATURE_FIRST
    assert declared_compute_dtype(dec) == torch.float32
    for p in (PROMPT, PROMPT[:3]):
        assert dec.generate(p, N, GREEDY, 0) == refdec.generate(model, p, N), (spec, p)


def test_the_seed_decides_the_sample(model):
    dec = decoder_for("openvino:threads=1", model)
    sp = SamplingParams(1.0)
    runs = [dec.generate(PROMPT, 8, sp, s) for s in (5, 6, 5)]
    assert runs[0] == runs[2] and runs[0] != runs[1]
    assert len(runs[0]) == 8 and dec.generate(PROMPT, 0, sp, 5) == []


@pytest.mark.parametrize(
    "spec, named",
    [
        ("openvino:backend=sdpa,draft=self", "only supported for Gemma4 MTP model pairs"),
        ("openvino:backend=sdpa,spec=prompt_lookup", "some of them requires PagedAttention backend"),
    ],
)
def test_speculative_decoding_on_sdpa_is_refused_by_genai(model, spec, named):
    """GenAI 2026.4.1 runs speculative decoding on paged attention only (on a CPU): the refusal is
    a LoopcertError naming the spec and GenAI's reason."""
    with pytest.raises(LoopcertError, match="LLMPipeline refused it") as e:
        decoder_for(spec, model)
    assert named in str(e.value) and repr(spec) in str(e.value)


def test_the_default_precision_is_declared():
    """precision=default leaves the CPU plugin its own hint (bf16 where the CPU has AMX or
    AVX512-BF16): the decoder declares what the plugin reports, so ties are judged at that dtype."""
    import openvino as ov

    dec = decoder_for("openvino:precision=default,threads=1", refdec.load_model("tiny-ouro"))
    hint = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
    assert dec.precision == hint
    assert declared_compute_dtype(dec) == {"f32": torch.float32, "bf16": torch.bfloat16}.get(
        hint, torch.float16
    )


def test_other_families_are_declined():
    with pytest.raises(NotApplicable, match="tiny-loopcoder is loopcoder"):
        decoder_for("openvino", refdec.load_model("tiny-loopcoder"))


def test_draft_model_speculation_raises_under_sampling(model):
    """The finding (docs/measurements.md, OpenVINO GenAI): openvino-genai 2026.4.1's draft-model
    speculative decoding (paged attention) fails a sampled request with GenAI's own check
    `content_length <= prompt_ids.size() + m_generated_ids.size()` (sequence_group.cpp:32): the
    model as its own draft, 3 draft tokens, T=0.7 top-k=4, prompt 1..12, 16 new tokens, rng_seed 1
    (1 of 60 such requests here; seed 0 decodes). When GenAI fixes it, this fails: flip it and
    the certify rows."""
    dec = decoder_for("openvino:draft=self,threads=1", model)
    prompt, sp = list(range(1, 13)), SamplingParams(0.7, top_k=4)
    with pytest.raises(RuntimeError, match=r"content_length <= prompt_ids.size\(\) \+ m_generated_ids"):
        dec.generate(prompt, N, sp, 1)
    assert len(dec.generate(prompt, N, sp, 0)) == N


def test_bf16_default_leaves_refdecs_greedy_by_rounding_only(model):
    """The configuration finding (docs/measurements.md, OpenVINO GenAI): at OpenVINO's own precision
    (bf16 on a CPU with AMX / AVX512-BF16) greedy continuations leave refdec's, each at a top-2
    margin below bf16's tie tolerance; at f32, none do. 60 random prompts, 32 new tokens, SDPA."""
    import openvino as ov

    if ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name() != "bf16":
        pytest.skip("this CPU's OpenVINO default is not bf16")
    from proofs.checks.greedy import TIE_TOLERANCE

    gaps = {}
    for precision in ("f32", "default"):
        dec = decoder_for(f"openvino:backend=sdpa,precision={precision},threads=1", model)
        gaps[precision] = []
        for i in range(60):
            n = int(torch.randint(2, 24, (1,), generator=torch.Generator().manual_seed(i)))
            p = torch.randint(0, 13, (n,), generator=torch.Generator().manual_seed(100 + i)).tolist()
            got, want = dec.generate(p, 32, GREEDY, 0), refdec.generate(model, p, 32)
            if got != want:
                t = next(j for j in range(32) if got[j] != want[j])
                logits = model.depth_logits(p + want[:t], [model.cfg.recurrence])[0, -1]
                gaps[precision].append(float(logits[want[t]] - logits[got[t]]))
    assert gaps["f32"] == []
    assert gaps["default"], "bf16 left refdec's greedy on none of 60 prompts: the finding is gone"
    assert max(gaps["default"]) < TIE_TOLERANCE[torch.bfloat16], gaps["default"]
