"""The transformers modeling code an Ouro folder carries beside its config.json (docs/decoders.md,
"Certify OpenVINO GenAI").

optimum-intel exports an `ouro` folder to OpenVINO IR only with the model's own code
(trust_remote_code: transformers imports the classes config.json's auto_map names from the folder).
loopcert writes its own: refdec/hf/modeling_ouro.py, a transformers PreTrainedModel written from
refdec's Ouro maths (tested against refdec's logits in float64 by tests/proofs/engines/
test_openvino_decoder.py). refdec never imports it (it needs transformers, and nothing in a folder
is executed by loopcert); `refdec.checkpoints.write_published` copies it from this text.
"""

from __future__ import annotations

from pathlib import Path

FILE = "modeling_ouro.py"
SOURCE_PATH = Path(__file__).resolve().parent / "hf" / FILE
AUTO_MAP = {
    "AutoConfig": "modeling_ouro.OuroConfig",
    "AutoModel": "modeling_ouro.OuroModel",
    "AutoModelForCausalLM": "modeling_ouro.OuroForCausalLM",
}


def source() -> str:
    return SOURCE_PATH.read_text()
