"""Text <-> token ids: through a model folder's tokenizer.json (the `tokenizers` library), or
byte-level (ids 0..255 are the UTF-8 bytes) for models without one, like the default model.

`tokenizers` is optional (`pip install 'loopcert[hf]'`): without it a folder still loads and
decodes from token ids; only turning text into ids (or back) raises a LoopcertError.
"""

from __future__ import annotations

from pathlib import Path

from refdec.errors import LoopcertError

FILE = "tokenizer.json"


def byte_encode(text: str) -> list[int]:
    """Byte-level ids of `text`: its UTF-8 bytes."""
    return list(text.encode("utf-8"))


def byte_decode(ids) -> str:
    """The text of byte-level ids; ids >= 256 (not bytes) are left out, invalid UTF-8 is
    replaced, so any id sequence shows as text."""
    return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def _library():
    try:
        import tokenizers
    except ImportError:
        return None
    return tokenizers


class Tokenizer:
    """encode(text) -> ids and decode(ids) -> text, as the model's own tokenizer does them.

    Defaults follow the upstream `tokenizer(text)` / `tokenizer.decode(ids)` calls: encoding
    applies the post-processor (e.g. a BOS token), decoding keeps special tokens.
    """

    def __init__(self, path):
        self.path = Path(path)
        lib = _library()
        self._tok = None
        if lib is not None:
            try:
                self._tok = lib.Tokenizer.from_file(str(self.path))
            except Exception as e:  # the library raises a bare Exception for a malformed file
                raise LoopcertError(f"{self.path}: not a valid tokenizer.json ({e})") from None

    def _get(self):
        if self._tok is None:
            raise LoopcertError(
                f"{self.path} needs the 'tokenizers' library: pip install 'loopcert[hf]' "
                "(or pass token ids, e.g. --prompt-ids)"
            )
        return self._tok

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise LoopcertError(f"text to encode must be a str, got {type(text).__name__}")
        return list(self._get().encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids, *, skip_special_tokens: bool = False) -> str:
        return self._get().decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def __repr__(self) -> str:
        return f"Tokenizer({str(self.path)!r})"


def load_tokenizer(folder) -> Tokenizer | None:
    """The folder's tokenizer, or None when it has no tokenizer.json."""
    path = Path(folder) / FILE
    return Tokenizer(path) if path.is_file() else None


CONFIG_FILE = "tokenizer_config.json"


def byte_level_json(vocab_size: int) -> dict:
    """A tokenizer.json whose id b < 256 is byte b (as refdec.tokenizer.byte_encode reads text)
    and whose ids 256.. are special tokens <|extra_i|>: a BPE of the 256 byte-fallback pieces
    <0x00>..<0xFF>, no merges, no normalizer or pre-tokenizer, so every byte of the text falls back
    to its own piece. It is the form of a Llama tokenizer converted from SentencePiece (byte
    fallback, a Sequence decoder), which llama.cpp's convert_hf_to_gguf.py reads (LlamaHfVocab)
    without knowing its pre-tokenizer: what a model written with a byte-level vocabulary
    (tiny-nanbeige) carries so that tools needing a tokenizer in the folder take it."""
    if vocab_size < 256:
        raise LoopcertError(f"a byte-level tokenizer needs vocab_size >= 256, got {vocab_size}")
    vocab = {f"<0x{b:02X}>": b for b in range(256)}
    added = [
        {
            "id": i,
            "content": f"<|extra_{i - 256}|>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i in range(256, vocab_size)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab | {a["content"]: a["id"] for a in added},
            "merges": [],
        },
    }


def byte_level_config(max_length: int) -> dict:
    """tokenizer_config.json beside byte_level_json's file: transformers' AutoTokenizer (which
    llama.cpp's converter calls) then loads it without knowing the model_type."""
    return {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_length}
