"""What `loopcert serve` serves: one model behind one decoder and its scheduler (every API's view)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from loopcert.serve.scheduler import Scheduler


@dataclass
class Served:
    """What the app serves: one model behind one decoder and its scheduler."""

    model_id: str
    model: object  # refdec.LoopedLM
    scheduler: Scheduler
    encode: Callable[[str], list[int]]  # text -> ids (raises LoopcertError when the model has no text)
    decode: Callable[[list[int]], str | None]  # ids -> text; None: the model has no text form
    info: dict = field(default_factory=dict)  # /v1/models extension: config, decoder, fingerprint
    # decode(a prefix of ids) is a prefix of decode(ids) once an unfinished character is held back
    # (byte-level text): a stream may then send text as it is decoded, not only when a choice ends
    prefix_stable: bool = False
    model_path: str | None = None  # what the model was loaded from (SGLang's /get_model_info)
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def vocab_size(self) -> int:
        return self.model.cfg.vocab_size

    @property
    def max_seq_len(self) -> int:
        return self.model.cfg.max_seq_len

    @property
    def eos(self) -> int | None:
        return getattr(self.model, "eos_token_id", None)
