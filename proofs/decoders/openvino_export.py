"""The OpenVINO IR folder LLMPipeline loads: the certified model, exported by optimum-intel.

refdec writes the model it loaded in Ouro's published layout at float32 (with loopcert's own
modeling code beside it, named by auto_map: refdec/hf/modeling_ouro.py), `config.KEY=V` overrides
are applied to that config.json, and optimum-intel's `main_export` traces it to OpenVINO IR
(task text-generation-with-past, weights kept at fp32: no compression). The IR is what a user
would get from `optimum-cli export openvino --trust-remote-code --weight-format fp32` on the
same folder. Exports are cached on disk under the temporary folder, keyed by the model's
fingerprint, the overrides, the modeling code and the versions, so the processes of one
certify run (and the next run) export once.

The tokenizer: LLMPipeline decodes token ids (generate(ov.Tensor)) and needs none, but its
draft-model speculative decoding refuses to start without one (GenAI 2026.4.1: "Either
openvino_tokenizer.xml was not provided or it was not loaded correctly. Tokenizer::encode is not
available"). A folder with tokenizer.json gets it converted by openvino_tokenizers; a model
without one (the tiny presets) gets a stand-in WordPiece vocabulary of its size (openvino-tokenizers
2026.4.1 converts WordPiece; its BPE conversion of a tiny vocabulary fails), never used to encode.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from refdec import ouro_code
from refdec.errors import LoopcertError
from refdec.load import model_fingerprint

EXTRA = (
    "pip install 'loopcert[openvino]'  (openvino-genai, optimum-intel; tox -e openvino pins them: "
    "constraints-openvino.txt)"
)
OURO = "ouro"  # the one looped model_type optimum-intel 2.2.0 exports
IR = "openvino_model.xml"


def versions() -> dict[str, str | None]:
    import importlib.metadata as md

    out = {}
    for dist in ("openvino", "openvino-genai", "openvino-tokenizers", "optimum-intel", "transformers"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def cache_root() -> Path:
    given = os.environ.get("LOOPCERT_OPENVINO_CACHE")
    return Path(given) if given else Path(tempfile.gettempdir()) / "loopcert-openvino"


def export_key(model, overrides: dict) -> str:
    h = hashlib.sha256(model_fingerprint(model).encode())
    h.update(json.dumps(sorted(overrides.items())).encode())
    h.update(ouro_code.source().encode())
    h.update(json.dumps(versions(), sort_keys=True).encode())
    return h.hexdigest()[:20]


def exported_folder(model, overrides: dict) -> Path:
    """The IR folder of `model` (an Ouro LoopedLM) with config.json's `overrides`, exported once."""
    out = cache_root() / export_key(model, overrides)
    if (out / IR).is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix="work-") as work:
        published = write_folder(model, Path(work) / model.cfg.name, overrides)
        ir = Path(work) / "ir"
        export(published, ir)
        write_ov_tokenizer(model, published, ir)
        try:
            os.replace(ir, out)
        except OSError:  # another process exported the same model first: theirs is the same
            if not (out / IR).is_file():
                raise
    return out


def write_folder(model, folder: Path, overrides: dict) -> Path:
    import torch

    from refdec.checkpoints import write_published

    write_published(model, folder, dtype=torch.float32)
    if overrides:
        path = folder / "config.json"
        raw = json.loads(path.read_text())
        unknown = sorted(set(overrides) - set(raw))
        if unknown:
            raise LoopcertError(
                f"config.{unknown[0]}=: config.json of an Ouro folder has no field {unknown[0]!r}"
            )
        raw.update(overrides)
        path.write_text(json.dumps(raw, indent=2) + "\n")
    src = getattr(model, "source_folder", None)
    if src is not None and (Path(src) / "tokenizer.json").is_file():
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (Path(src) / name).is_file():
                shutil.copy(Path(src) / name, folder / name)
    return folder


def export(published: Path, ir: Path) -> None:
    """optimum-intel's export of `published` to `ir` at fp32 (the model's own code: trust_remote_code)."""
    try:
        from optimum.exporters.openvino import main_export
        from optimum.intel import OVConfig
    except ImportError as e:
        raise LoopcertError(f"--decoder openvino needs optimum-intel ({e}): {EXTRA}") from None
    main_export(
        str(published),
        output=str(ir),
        task="text-generation-with-past",
        trust_remote_code=True,
        ov_config=OVConfig(dtype="fp32"),
        convert_tokenizer=False,
    )


def write_ov_tokenizer(model, published: Path, ir: Path) -> None:
    """openvino_tokenizer.xml and openvino_detokenizer.xml into `ir` (module docstring)."""
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if (published / "tokenizer.json").is_file():
        hf = AutoTokenizer.from_pretrained(published)
    else:
        import tokenizers

        vocab = {"[UNK]": 0} | {f"t{i}": i for i in range(1, model.cfg.vocab_size)}
        tok = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
        tok.decoder = tokenizers.decoders.WordPiece()
        hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    encoder, decoder = convert_tokenizer(hf, with_detokenizer=True)
    ov.save_model(encoder, str(ir / "openvino_tokenizer.xml"))
    ov.save_model(decoder, str(ir / "openvino_detokenizer.xml"))
