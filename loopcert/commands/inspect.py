"""`loopcert inspect`: what a model folder or preset is recognised as, without loading weights."""

from __future__ import annotations

from refdec.checkpoints import describe

HELP = "show what a model folder or preset is recognised as (family, block, R, sizes, parameters)"


def add_arguments(p) -> None:
    p.add_argument("model", help="preset name or model folder (config.json + *.safetensors)")


def loop_window(model: str, info: dict) -> int:
    """LoopCoder's local attention window W (docs/design.md section 2), as describe reads it."""
    return info["loop_window_size"]


def run(args) -> int:
    info = describe(args.model)
    scaling = info["rope_scaling"]
    rows = [
        ("model", args.model),
        ("recognised as", info["source"]),
        ("family / block", f"{info['family']} / {info['block']}"),
        ("recurrence R", info["recurrence"]),
        ("layers", info["layers"]),
        ("d_model", info["d_model"]),
        ("heads", f"{info['n_heads']} query, {info['n_kv_heads']} key/value, head_dim {info['head_dim']}"),
        ("mlp width", info["intermediate_size"]),
        ("vocab", info["vocab_size"]),
        ("context", info["max_seq_len"]),
        (
            "rope",
            f"{info['rope']}, theta {info['rope_theta']:g}"
            + (
                ""
                if scaling is None
                else f", llama3 scaling x{scaling.factor:g} "
                f"(original {scaling.original_max_position_embeddings})"
            ),
        ),
        ("embed scale", f"{info['embed_scale']:g}"),
        ("qk bias / qk norm", f"{info['qk_bias']} / {info['qk_norm']}"),
        ("tied head", info["tie_embeddings"]),
        ("ln_f before coda", info["ln_f_before_coda"]),
        (
            "early-exit gate",
            f"{info['early_exit_gate']}"
            + (" (loaded, ignored at fixed depth)" if info["early_exit_gate"] else ""),
        ),
        # Ouro's and LoopCoder's h(0) is the embedding: their init_state field is unused
        ("initial state", info["init_state"] if info["family"] == "raven" else "the embeddings"),
        ("parameters", f"{info['parameters']:,}"),
        ("stored dtypes", ", ".join(f"{k} x{v}" for k, v in sorted(info["stored_dtypes"].items())) or "-"),
        ("safetensors files", info["files"]),
        ("tokenizer.json", info["tokenizer"] if info["tokenizer"] is not None else "-"),
    ]
    if info["family"] == "loopcoder":
        w = loop_window(args.model, info)
        rows.insert(4, ("loop window", f"{w} (pass >= 2: own keys at t-{w - 1}..t, pass 1's at <= t)"))
    if info["family"] == "nanbeige":
        once = "once, before the head" if info["skip_loop_final_norm"] else "after every loop"
        rows.insert(4, ("loop final norm", f"{once} (skip_loop_final_norm {info['skip_loop_final_norm']})"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0
