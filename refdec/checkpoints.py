"""Published checkpoints: Ouro, Huginn-0125, the retrofitted-recurrence Llama / OLMo-2 models,
LoopCoder (IQuest-Coder-V1-Loop) and Nanbeige4.2.

Reads config.json and safetensors (one `model.safetensors`, or shards listed by
`model.safetensors.index.json`) in the key layouts the upstream code writes, and maps them onto
LoopedLM (docs/checkpoints.md lists what it takes from the published code); `write_published`
writes the same layouts. This module holds the entry points (load, write, describe); the
config.json fields are in refdec.checkpoint_config, the key map in refdec.checkpoint_keys, the
safetensors files in refdec.checkpoint_files (import those names from there).
Nothing is executed: `auto_map` / remote code in config.json is ignored, and refdec.load refuses
pickles before this module is reached.

Six layouts, told apart by model_type, then (huginn_raven) by the keys of the first block:

    layout           model_type       block     norms per block              rope         embed scale
    ouro             ouro             ouro      input_layernorm{,_2},        rotate-half  1
                                                post_attention_layernorm{,_2}
    huginn           huginn_raven     sandwich  norm_1..norm_4               interleaved  sqrt(n_embd)
    retro-llama      huginn_raven     prenorm   norm_1, norm_2               rotate-half  init_values
    retro-olmo       huginn_raven     postnorm  norm_1, norm_2 + attn.q_norm rotate-half  init_values
    iquestloopcoder  iquestloopcoder  prenorm   input_layernorm,             rotate-half  1
                                                post_attention_layernorm (+ gate_projections)
    nanbeige         nanbeige         prenorm   input_layernorm,             rotate-half  1
                                                post_attention_layernorm
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from refdec import iquest_config, ouro_code
from refdec.checkpoint_config import (
    LOOPCODER,
    NANBEIGE,
    config_from_published,
    default_layout,
    published_config,
)
from refdec.checkpoint_files import (
    INDEX,
    SINGLE,
    Reader,
    Stored,
    check_finite,
    check_representable,
    check_stored,
    read_header,
    scan,
)
from refdec.checkpoint_keys import (
    join,
    key_map,
    meta_model,
    split,
)
from refdec.config import PRESETS, ModelConfig
from refdec.errors import LoopcertError
from refdec.files import FORMAT, parse_dtype, read_config, refuse_pickles, write_atomic
from refdec.model import LoopedLM
from refdec.validate import is_int

DEFAULT_MODEL_DIR = Path(__file__).parent / "weights" / "default"  # the shipped model (refdec.load's)


def not_a_model(name: str) -> LoopcertError:
    """The error of a name that load_model cannot load: it lists every kind of name it takes."""
    return LoopcertError(
        f"{name!r} is neither a preset ({sorted(PRESETS)}), 'default' (the shipped model) nor a model folder"
    )


# -- the public entry points ------------------------------------------------------------------
def load_published(folder, raw: dict, dtype: torch.dtype, *, recurrence: int | None = None) -> LoopedLM:
    """A LoopedLM from a published checkpoint folder; `recurrence` overrides the config's R.

    The model gets `tokenizer` (refdec.tokenizer.Tokenizer, or None without tokenizer.json),
    `eos_token_ids` (tuple of the config's eos_token_id values) and `eos_token_id` (the first
    of them, or None).
    """
    folder = Path(folder)
    stored = scan(folder)
    cfg, layout = config_from_published(
        raw, stored.file_of, recurrence=recurrence, where=str(folder / "config.json"), name=folder.name
    )
    model = meta_model(cfg)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    entries = key_map(cfg, layout, shapes)
    check_stored(entries, stored, cfg, layout)
    state: dict[str, torch.Tensor] = {}
    with Reader(stored) as read:
        for e in entries:
            # copy=True: pieces of a fused tensor must not share storage with each other.
            stored_t = read(e.published)
            check_finite(e.published, stored_t, folder)
            pieces = {k: v.to(dtype=dtype, copy=True) for k, v in split(e, stored_t, shapes).items()}
            for v in pieces.values():
                check_representable(e.published, v, dtype, folder)
            state.update(pieces)
        if cfg.tie_embeddings and "lm_head.weight" in stored.file_of:
            if not torch.equal(read("lm_head.weight"), read(entries[0].published)):
                raise LoopcertError(
                    f"{folder}: lm_head.weight differs from {entries[0].published!r} but the config ties them"
                )
    model.load_state_dict(state, strict=True, assign=True)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    assert not left, f"LoopedLM tensors outside its state_dict were never materialised: {left}"
    model.eval()
    attach_extras(model, folder, raw)
    return model


def attach_extras(model: LoopedLM, folder: Path, raw: dict) -> None:
    from refdec.tokenizer import load_tokenizer

    model.tokenizer = load_tokenizer(folder)
    model.eos_token_ids = eos_ids(folder, raw)
    model.eos_token_id = model.eos_token_ids[0] if model.eos_token_ids else None


def eos_ids(folder: Path, raw: dict) -> tuple[int, ...]:
    """config.json's eos_token_id (an int or a list), else generation_config.json's."""
    source, v = "config.json", raw.get("eos_token_id")
    gen = folder / "generation_config.json"
    if v is None and gen.is_file():
        try:
            source, v = gen.name, json.loads(gen.read_text()).get("eos_token_id")
        except (ValueError, AttributeError) as e:
            raise LoopcertError(f"{gen}: not valid JSON ({e})") from None
    if v is None:
        return ()
    ids = v if isinstance(v, list) else [v]
    if not ids or any(not is_int(i, 0) for i in ids):
        raise LoopcertError(
            f"{folder / source}: eos_token_id must be an integer >= 0 or a non-empty list of them, got {v!r}"
        )
    return tuple(ids)


def load_checkpoint(folder, *, dtype=torch.float32, recurrence: int | None = None) -> LoopedLM:
    """refdec.load_model for a published folder, with R overridable (retrofitted configs'
    mean_recurrence may be stale: docs/checkpoints.md)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LoopcertError(f"{folder}: not a folder")
    refuse_pickles(folder)
    raw = read_config(folder)
    if isinstance(raw, dict) and raw.get("format") == FORMAT:
        raise LoopcertError(f"{folder}: a loopcert folder (R is in its config.json); use refdec.load_model")
    return load_published(folder, raw, parse_dtype(dtype), recurrence=recurrence)


def write_published(
    model: LoopedLM, folder, layout: str | None = None, shard_size: int | None = None, *, dtype=None
) -> Path:
    """Write config.json and safetensors in a published layout (default: the one matching the
    model's block). `shard_size` (bytes) splits the tensors into model-0000i-of-0000n.safetensors
    shards with a model.safetensors.index.json. The state init (init_state, state_seed,
    init_scale) and `name` have no published field; loading gives zeros."""
    cfg = model.cfg
    layout = layout or default_layout(cfg)
    raw = published_config(cfg, layout)
    folder = Path(folder)
    for name in (SINGLE, INDEX):
        if (folder / name).exists():
            raise LoopcertError(f"{folder / name} exists; write_published writes into a fresh folder")
    if shard_size is not None and not is_int(shard_size, 1):
        raise LoopcertError(f"shard_size must be a positive number of bytes, got {shard_size!r}")
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    cast = (lambda t: t) if dtype is None else (lambda t: t.to(parse_dtype(dtype)))
    tensors = {e.published: cast(join(e, state)).contiguous() for e in key_map(cfg, layout, shapes)}
    eos = getattr(model, "eos_token_ids", ())
    if eos:
        raw["eos_token_id"] = eos[0] if len(eos) == 1 else list(eos)
    meta = {"format": "pt"}
    if shard_size is None:
        write_atomic(folder / SINGLE, lambda p: save_file(tensors, p, metadata=meta))
    else:
        shards: list[dict[str, torch.Tensor]] = [{}]
        size = 0
        for k, t in tensors.items():
            nbytes = t.numel() * t.element_size()
            if shards[-1] and size + nbytes > shard_size:
                shards.append({})
                size = 0
            shards[-1][k] = t
            size += nbytes
        n = len(shards)
        weight_map = {}
        for i, shard in enumerate(shards, 1):
            name = f"model-{i:05d}-of-{n:05d}.safetensors"
            write_atomic(folder / name, lambda p, s=shard: save_file(s, p, metadata=meta))
            weight_map.update(dict.fromkeys(shard, name))
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        write_atomic(folder / INDEX, lambda p: Path(p).write_text(json.dumps(index, indent=2) + "\n"))
    if layout == LOOPCODER:  # the AutoConfig class config.json's auto_map names (vLLM --trust-remote-code)
        write_atomic(folder / iquest_config.FILE, lambda p: Path(p).write_text(iquest_config.SOURCE))
    if layout == NANBEIGE:  # a tokenizer, so that converters to GGUF (which need one) take the folder
        write_tokenizer(model, folder)
    if layout == "ouro":  # the modeling code auto_map names (optimum-intel's OpenVINO export)
        write_atomic(folder / ouro_code.FILE, lambda p: Path(p).write_text(ouro_code.source()))
    write_atomic(folder / "config.json", lambda p: Path(p).write_text(json.dumps(raw, indent=2) + "\n"))
    return folder


def write_tokenizer(model: LoopedLM, folder: Path) -> None:
    """tokenizer.json: the model's own (loaded from a folder) copied, else a byte-level one
    (refdec.tokenizer.byte_level_json, with its tokenizer_config.json) when the vocabulary holds
    the 256 bytes; none otherwise."""
    from refdec.tokenizer import CONFIG_FILE, FILE, byte_level_config, byte_level_json

    own = getattr(model, "tokenizer", None)
    if own is not None:
        text = own.path.read_text()
        config = own.path.parent / CONFIG_FILE
        if config.is_file():
            write_atomic(folder / CONFIG_FILE, lambda p: Path(p).write_text(config.read_text()))
    elif model.cfg.vocab_size >= 256:
        text = json.dumps(byte_level_json(model.cfg.vocab_size), ensure_ascii=False) + "\n"
        conf = json.dumps(byte_level_config(model.cfg.max_seq_len), indent=2) + "\n"
        write_atomic(folder / CONFIG_FILE, lambda p: Path(p).write_text(conf))
    else:
        return
    write_atomic(folder / FILE, lambda p: Path(p).write_text(text))


def recognise(name_or_path) -> tuple[ModelConfig, str, dict[str, int], int, bool | None]:
    """(config, source, stored dtype counts, files, has a tokenizer) of a preset or model folder,
    from config.json and the safetensors headers (describe's reading; no weights loaded)."""
    name = str(name_or_path)
    folder = Path(name_or_path)
    if name == "default":  # the shipped model, as load_model reads the name
        folder = DEFAULT_MODEL_DIR
    stored_dtypes: dict[str, int] = {}
    tokenizer = None
    if name in PRESETS:
        cfg, source, files = PRESETS[name], "preset (random weights)", 0
    elif folder.is_dir():
        refuse_pickles(folder)
        raw = read_config(folder)
        if isinstance(raw, dict) and raw.get("format") == FORMAT:
            try:
                cfg = ModelConfig.from_dict({k: v for k, v in raw.items() if k != "format"})
            except LoopcertError as e:  # name the file the bad field is in
                raise LoopcertError(f"{folder / 'config.json'}: {e}") from None
            source = "loopcert"
            path = folder / SINGLE
            if not path.is_file():
                raise LoopcertError(f"{folder}: no {SINGLE}")
            header = read_header(path)
            stored = Stored(
                dict.fromkeys(header, path),
                {k: v[0] for k, v in header.items()},
                {k: v[1] for k, v in header.items()},
            )
        else:
            stored = scan(folder)
            cfg, source = config_from_published(
                raw, stored.file_of, where=str(folder / "config.json"), name=folder.name
            )
            shapes = {k: tuple(v.shape) for k, v in meta_model(cfg).state_dict().items()}
            check_stored(key_map(cfg, source, shapes), stored, cfg, source)
        for dt in stored.dtype.values():
            stored_dtypes[dt] = stored_dtypes.get(dt, 0) + 1
        files = len(stored.files)
        tokenizer = (folder / "tokenizer.json").is_file()
    else:
        raise not_a_model(name)
    return cfg, source, stored_dtypes, files, tokenizer


def describe(name_or_path) -> dict:
    """What a preset or model folder is recognised as, from config.json and the safetensors
    headers (no weights loaded); the folder is checked as strictly as loading it would be."""
    cfg, source, stored_dtypes, files, tokenizer = recognise(name_or_path)
    return {
        "source": source,
        "family": cfg.family,
        "block": cfg.block,
        "recurrence": cfg.recurrence,
        "layers": f"{cfg.n_prelude} prelude / {cfg.n_core} core / {cfg.n_coda} coda",
        "d_model": cfg.d_model,
        "n_heads": cfg.n_heads,
        "n_kv_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate_size,
        "vocab_size": cfg.vocab_size,
        "max_seq_len": cfg.max_seq_len,
        "rope": cfg.rope,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling,
        "qk_bias": cfg.qk_bias,
        "qk_norm": cfg.qk_norm,
        "embed_scale": cfg.embed_scale,
        "tie_embeddings": cfg.tie_embeddings,
        "ln_f_before_coda": cfg.ln_f_before_coda,
        "early_exit_gate": cfg.early_exit_gate,
        "init_state": cfg.init_state,
        "loop_window_size": cfg.loop_window_size,  # LoopCoder's local window (0: not LoopCoder)
        "skip_loop_final_norm": cfg.skip_loop_final_norm,  # Nanbeige's flag (False: not Nanbeige)
        "parameters": sum(p.numel() for p in meta_model(cfg).parameters()),
        "stored_dtypes": stored_dtypes,
        "files": files,
        "tokenizer": tokenizer,
    }
