"""A benchmark record as a Markdown page: the verdict first, then the figures behind it."""

from __future__ import annotations

METRIC_NAMES = {"itl_ms": "ITL", "ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E"}


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _mib(x: float | None) -> str:
    return "not measured" if x is None else f"{x / (1 << 20):.1f} MiB"


def render(doc: dict) -> str:
    cfg = doc["config"]
    base, test = cfg["arms"]
    lines = [
        f"# Benchmark of {doc['cell']}: {test} vs {base}",
        "",
        f"**{doc['headline'].get('verdict', 'no comparison')}** (concurrency {doc['headline'].get('concurrency', '–')})"
        if doc["headline"]
        else "**no comparison: no level completed**",
        "",
    ]
    if doc["outcome"] != "ok":
        lines += [f"> Stopped early: {doc['failure'].splitlines()[0]}", ""]
    if doc.get("stand_in"):
        lines += [f"> Served by {doc['stand_in']}.", ""]
    lines += [
        f"{doc['execution']} on {doc['host']['detected']} ({doc['host']['gpu'] or 'no GPU'}); server {doc['server']}, "
        f"vLLM {doc['vllm_version']}; kit {doc['kit_commit']}; started {doc['started_at']}, {doc['seconds']} s.",
        f"{cfg['rounds_completed']} of {cfg['rounds']} rounds, arms interleaved; {cfg['requests_per_level']} requests "
        f"per arm, round and level; input {cfg['input_len']} / output {cfg['output_len']} tokens; "
        f"CPU offload {cfg['cpu_offload_gb']} GB; {cfg['confidence']:.0%} bootstrap intervals "
        f"({cfg['resamples']} resamples over requests within rounds).",
        "",
        "| concurrency | metric | " + f"{base} median / p90 / p99 | {test} median / p90 / p99 | difference [CI] "
        "| requests per arm for 5% |",
        "|---:|---|---|---|---|---:|",
    ]
    for level in doc["levels"]:
        for metric, name in METRIC_NAMES.items():
            a, b = level["arms"][base][metric], level["arms"][test][metric]
            c = level["comparisons"][metric]
            diff = (
                f"{c['relative']:+.1%} [{c['low']:+.1%}, {c['high']:+.1%}]" + (" ✔" if c["resolved"] else "")
                if c.get("low") is not None
                else f"{c['relative']:+.1%} (no interval)"
                if c.get("relative") is not None
                else "–"
            )
            spreads = " | ".join(f"{_ms(s['median'])} / {_ms(s['p90'])} / {_ms(s['p99'])}" for s in (a, b))
            needed = c.get("needed_per_arm") or "–"
            lines.append(f"| {level['concurrency']} | {name} ms | {spreads} | {diff} | {needed} |")
        t = level["comparisons"]["output_tokens_per_s"]
        rates = [", ".join(f"{x:.0f}" for x in level["arms"][arm]["output_tokens_per_s"]) for arm in (base, test)]
        lines.append(f"| {level['concurrency']} | tok/s per round | {rates[0]} | {rates[1]} | {t['verdict']} | |")
    lines += ["", "## Verdicts", ""]
    for level in doc["levels"]:
        lines += [f"- concurrency {level['concurrency']}: {c['verdict']}" for c in level["comparisons"].values()]
    lines += [
        "",
        "## Memory and GPU time per decode step",
        "",
        "| arm | server start | peak host RSS | peak pinned host | peak GPU | GPU busy / step | GPU idle / step "
        "| pageable H2D | pinned H2D | stream syncs |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, arm in doc["arms"].items():
        p = arm["profile"]
        figures = (
            f"{p['busy_ms_per_step']:.3f} ms | {p['idle_ms_per_step']:.3f} ms | {p['pageable_h2d']} | "
            f"{p['pinned_h2d']} | {p['stream_syncs']}"
            if "error" not in p
            else f"{p['error']} | | | |"
        )
        starts = ", ".join(f"{x:.1f} s" for x in arm.get("start_s", [])) or "–"
        memory = " | ".join(_mib(arm[k]) for k in ("peak_rss_bytes", "peak_pinned_host_bytes", "peak_gpu_bytes"))
        lines.append(f"| {name} | {starts} | {memory} | {figures} |")
    lines += [
        "",
        "Host memory is the resident and the page-locked or pinned memory of the server's process group, "
        "read from /proc/<pid>/status (which takes no lock the engine needs), every 2 s while the arm serves; "
        f"GPU memory is what nvidia-smi reports for the group. GPU memory between arms: "
        f"{doc.get('gpu_memory_between_arms') or 'not recorded'}. The profile is one request of "
        f"{cfg['output_len']} tokens per arm after its last round.",
        "",
    ]
    return "\n".join(lines)
