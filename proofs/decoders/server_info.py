"""What serves a --decoder URL, and whether it serves the model being certified.

`detect` asks the server what it is (`--server auto`) or takes the user's word for the kind
and reads what that kind reports:

    kind      told by                                       model identity
    loopcert  /v1/models card with a `loopcert` extension   its fingerprint (weights and config)
    vllm      /v1/models owned_by "vllm", or GET /version   /v1/models root and id, max_model_len
    sglang    GET /get_model_info                           its model_path (and loopcert serve's
                                                            `loopcert` extension: its fingerprint)
    openai    anything else answering /v1/models            /v1/models id (and root)

vLLM and SGLang report no fingerprint, so `check_identity` holds them to the name (and to the
fingerprint too where a /get_model_info reports one, as loopcert serve's does): the model
they report must be the folder being certified (paths compared resolved, when certify's MODEL
is a folder), else the exact name; `--served-model` names what the server calls the certified
model when the two differ (another machine's path, a --served-model-name). Sizes the server
reports (vocabulary, max_model_len) must fit the model too. A mismatch is one message naming
the server and both models.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from proofs.decoders.http_client import HTTPClient
from refdec.errors import LoopcertError
from refdec.load import model_fingerprint

SERVERS = ("auto", "loopcert", "vllm", "sglang", "openai")
DIALECT_OF = {"loopcert": "openai", "vllm": "vllm", "sglang": "sglang", "openai": "openai"}
NAMES = {
    "loopcert": "loopcert serve",
    "vllm": "vLLM",
    "sglang": "SGLang",
    "openai": "OpenAI-compatible server",
}
VLLM_TOKEN_IDS = (0, 10, 2)  # the first vLLM whose completions answer return_token_ids


@dataclass(frozen=True)
class ServerInfo:
    url: str  # the --decoder URL
    kind: str  # loopcert, vllm, sglang or openai
    version: str | None = None
    model_id: str | None = None  # /v1/models id: what requests name as `model`
    model_paths: tuple[str, ...] = ()  # what it says it loaded: vLLM root/id, SGLang model_path
    max_model_len: int | None = None
    vocab_size: int | None = None
    fingerprint: str | None = None  # loopcert serve only (its /v1/models card or /get_model_info)
    # where the server's state changes shape, as it reports it (proofs/boundaries.py): loopcert
    # serve's decoder declaration, vLLM's KV block size (its /metrics cache_config_info)
    boundaries: tuple[tuple[int, str], ...] = ()
    speculation_widths: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        """ "vLLM 0.32.0 at http://HOST:PORT/v1": the server as every message names it."""
        return f"{NAMES[self.kind]}{' ' + self.version if self.version else ''} at {self.url}"

    @property
    def dialect(self) -> str:
        return DIALECT_OF[self.kind]

    @property
    def token_ids(self) -> bool:
        """vLLM: whether completions answer `return_token_ids` (else ids come through logprobs)."""
        return self.kind != "vllm" or self.version is None or version_tuple(self.version) >= VLLM_TOKEN_IDS


def version_tuple(v: str) -> tuple[int, ...]:
    """ "0.10.1.post1" -> (0, 10, 1); unparsable parts end it."""
    out = []
    for part in v.split("."):
        m = re.match(r"\d+", part)
        if m is None:
            break
        out.append(int(m.group()))
        if m.end() < len(part):
            break
    return tuple(out)


def detect(http: HTTPClient, url: str, v1: str, server: str = "auto") -> ServerInfo:
    """The ServerInfo of the server at `http` (its root); `v1` the OpenAI base's path below it
    ("/v1", or "" when the URL is the base itself)."""
    if server not in SERVERS:
        raise LoopcertError(f"--server must be one of {', '.join(SERVERS)}, got {server!r}")
    if server == "sglang":
        return _sglang(http, url)
    models = http.get(v1 + "/models", optional=server == "auto")
    card = _one_card(url, models) if models is not None else None
    if server == "auto":
        if card is None:
            if http.get("/get_model_info", optional=True) is not None:
                return _sglang(http, url)
            raise LoopcertError(
                f"--decoder {url}: answers neither {v1}/models nor /get_model_info: not an OpenAI-"
                "compatible, vLLM or SGLang server (or name one with --server)"
            )
        if isinstance(card.get("loopcert"), dict):
            server = "loopcert"
        elif card.get("owned_by") == "vllm":
            server = "vllm"
        elif http.get("/get_model_info", optional=True) is not None:
            return _sglang(http, url)
        else:
            server = "vllm" if _vllm_version(http) is not None else "openai"
    if card is None:
        raise LoopcertError(f"--decoder {url}: {v1}/models lists no model")
    ext = card.get("loopcert") if isinstance(card.get("loopcert"), dict) else {}
    if server == "loopcert" and not ext:
        raise LoopcertError(
            f"--server loopcert: {url}{v1}/models has no loopcert extension (is it `loopcert serve`?)"
        )
    paths = tuple(str(p) for p in (card.get("root"), card.get("id")) if p)
    cfg = ext.get("config") if isinstance(ext.get("config"), dict) else {}
    dec = ext.get("decoder") if isinstance(ext.get("decoder"), dict) else {}
    reported = {"loopcert": lambda: _pairs(dec.get("boundaries")), "vllm": lambda: _vllm_blocks(http)}
    return ServerInfo(
        url=url,
        kind=server,
        version=_vllm_version(http) if server == "vllm" else None,
        model_id=card.get("id"),
        model_paths=paths,
        max_model_len=_int(card.get("max_model_len")),
        vocab_size=_int(cfg.get("vocab_size")),
        fingerprint=ext.get("fingerprint"),
        boundaries=reported[server]() if server in reported else (),
        speculation_widths=tuple(k for k in map(_int, dec.get("speculation_widths") or ()) if k),
    )


def _pairs(got) -> tuple[tuple[int, str], ...]:
    """loopcert serve's reported boundaries ([[position, what], ...]); what is malformed is left out
    (a report, not a promise: --boundaries names what a server does not say)."""
    out = []
    for entry in got if isinstance(got, list) else ():
        if isinstance(entry, list) and len(entry) == 2 and _int(entry[0]) and isinstance(entry[1], str):
            out.append((_int(entry[0]), f"{entry[1]} (reported by the server)"))
    return tuple(out)


# vLLM's Prometheus gauge of its cache config: vllm:cache_config_info{...,block_size="16",...} 1.0
VLLM_BLOCK = re.compile(r'^vllm:cache_config_info\{[^}]*\bblock_size="(\d+)"', re.MULTILINE)


def _vllm_blocks(http: HTTPClient) -> tuple[tuple[int, str], ...]:
    """vLLM's KV-cache block size, from its /metrics (absent: none): the first block fills at it."""
    text = http.get_text("/metrics")
    found = VLLM_BLOCK.search(text or "")
    if not found or not int(found.group(1)):
        return ()
    b = int(found.group(1))
    return ((b, f"KV block of {b} tokens fills (vLLM /metrics cache_config_info)"),)


def _one_card(url: str, models) -> dict:
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list) or len(data) != 1 or not isinstance(data[0], dict):
        n = len(data) if isinstance(data, list) else 0
        raise LoopcertError(f"{url}/models lists {n} models; certify needs exactly one")
    return data[0]


def _vllm_version(http: HTTPClient) -> str | None:
    got = http.get("/version", optional=True)
    v = got.get("version") if isinstance(got, dict) else None
    return str(v) if v else None


def _sglang(http: HTTPClient, url: str) -> ServerInfo:
    info = http.get("/get_model_info")
    path = info.get("model_path") if isinstance(info, dict) else None
    if not path:
        raise LoopcertError(
            f"SGLang at {url}: /get_model_info has no model_path: cannot tell which model it serves"
        )
    ext = info.get("loopcert")  # loopcert serve's /get_model_info: its model identity
    fp = ext.get("fingerprint") if isinstance(ext, dict) else None
    return ServerInfo(
        url=url,
        kind="sglang",
        model_id=None,
        model_paths=(str(path),),
        fingerprint=fp if isinstance(fp, str) else None,
    )


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def check_identity(info: ServerInfo, model, certified: str | None, served_model: str | None = None) -> None:
    """LoopcertError unless the server serves `model` (certify's MODEL as given: `certified`)."""
    cfg = model.cfg
    ours = certified or cfg.name
    if info.kind == "loopcert":
        mine = model_fingerprint(model)
        if info.fingerprint is None:
            raise LoopcertError(
                f"{info.label} does not report a model fingerprint (/v1/models loopcert.fingerprint): "
                "cannot tell which model it serves"
            )
        if mine != info.fingerprint:
            raise LoopcertError(
                f"{info.label} serves {info.model_id!r} (fingerprint {info.fingerprint[:12]}), not "
                f"{cfg.name!r} (fingerprint {mine[:12]})"
            )
    else:
        want = served_model if served_model is not None else ours
        if not any(same_model(p, want) for p in info.model_paths):
            theirs = " / ".join(repr(p) for p in info.model_paths) or "no model name"
            hint = (
                ""
                if served_model is not None
                else " (when the server names this model otherwise, say so with --served-model NAME_OR_PATH)"
            )
            raise LoopcertError(f"{info.label} serves {theirs}, not {want!r}: certify checks {ours!r}{hint}")
        mine = model_fingerprint(model) if info.fingerprint is not None else None
        if mine is not None and mine != info.fingerprint:  # a server that also reports one (loopcert
            # serve's /get_model_info): the same name with other weights is another model
            raise LoopcertError(
                f"{info.label} serves {info.model_paths[0]!r} with fingerprint "
                f"{info.fingerprint[:12]}, not {cfg.name!r}'s weights (fingerprint {mine[:12]})"
            )
    if info.vocab_size is not None and info.vocab_size != cfg.vocab_size:
        raise LoopcertError(
            f"{info.label} reports a vocabulary of {info.vocab_size} tokens; {ours!r} has {cfg.vocab_size}"
        )
    if info.max_model_len is not None and info.max_model_len > cfg.max_seq_len:
        raise LoopcertError(
            f"{info.label} reports max_model_len {info.max_model_len}, longer than {ours!r}'s context "
            f"{cfg.max_seq_len}: it serves another model"
        )


def same_model(served: str, ours: str) -> bool:
    """The same folder (resolved paths) when `ours` is a folder here, else the same name."""
    if served == ours:
        return True
    mine = Path(ours).expanduser()
    if not mine.is_dir():
        return False
    try:
        return Path(served).expanduser().resolve() == mine.resolve()
    except (OSError, RuntimeError):
        return False
