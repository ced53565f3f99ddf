"""Render `loopcert bench --serve-load` (loopcert/serve/load_run.py) as markdown."""

from __future__ import annotations

from reports.render import fmt, table


def render(res: dict) -> str:
    s, ip, st = res["summary"], res["in_process"], res.get("stamp", {})
    verdict = "pass" if res["passed"] else "**FAIL**"
    rows = [
        ["requests sent / answered / failed", f"{s['sent']} / {s['completed']} / {s['failed']}"],
        ["lost / duplicated", f"{len(s['lost'])} / {len(s['duplicated'])}"],
        [
            "responses equal to generate(prompt, seed)",
            f"{res['verify']['checked'] - res['mismatch_count']}/{res['verify']['checked']}",
        ],
        [
            "latency p50 / p99 / max (s)",
            f"{fmt(s['latency_p50_s'])} / {fmt(s['latency_p99_s'])} / {fmt(s['latency_max_s'])}",
        ],
        ["aggregate tokens/s through HTTP", fmt(s["tokens_per_s"])],
        ["requests/s", fmt(s["requests_per_s"])],
        ["in-process tokens/s, generate one after another", fmt(ip["sequential_tokens_per_s"])],
        [
            f"in-process tokens/s, generate_batch {ip['batch']} at a time",
            fmt(ip["batched_tokens_per_s"])
            if ip["batched_tokens_per_s"] is not None
            else "— (no generate_batch)",
        ],
        [
            "HTTP / in-process sequential",
            fmt(s["tokens_per_s"] / ip["sequential_tokens_per_s"]) if ip["sequential_tokens_per_s"] else "—",
        ],
        ["server batching", res.get("server_health", {}).get("batching", "—")],
        [
            "rounds (continuous: steps a request joined at); mean / largest batch",
            f"{s['rounds']}; {fmt(s['mean_batch_size'])} / {s['largest_batch']}",
        ],
        ["share of sequences decoded in a batch", fmt(s["batched_share"])],
        ["mean acceptance rate / gamma", f"{fmt(s['acceptance_rate'])} / {fmt(s['gamma'])}"],
    ]
    out = [
        f"# loopcert serve under load: {verdict}",
        f"`{st.get('command', '')}` — {s['clients']} concurrent clients for {fmt(s['seconds'])} s (at most "
        f"{s['max_requests']} requests), {s['max_tokens']} tokens each, loopback only, against "
        f"`loopcert serve {' '.join(res['command_args'])}`; commit {st.get('commit', '—')}, "
        f"{st.get('date', '')}, {st.get('device_name', '')}.",
        table(rows, ["", ""]),
        "Latency is per request, send to last byte. Aggregate tokens/s is completion tokens over the "
        "run's wall time. The in-process figures decode the same requests (same prompts, seeds and "
        "decoder settings) in the bench process after the load, on the same machine.",
    ]
    if "--compile" in res["command_args"]:
        out.append(
            "Compiled engine steps (`--compile`): the server compiles each graph when a request first "
            "needs it (nothing is compiled before it listens), so these latencies and tokens/s include "
            "those compiles, as the in-process figures include the bench process's own."
        )
    if res["mismatches"]:
        out.append(
            table(
                [[m["index"], m["seed"], fmt(m["served"]), fmt(m["generate"])] for m in res["mismatches"]],
                ["request", "seed", "served", "generate"],
            )
        )
    if s["failures"]:
        out.append(table([[f["index"], f["error"]] for f in s["failures"]], ["request", "error"]))
    return "\n\n".join(out) + "\n"
