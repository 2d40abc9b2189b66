"""The bench's terminal table: one row per figure, with the baseline or goal it is read against."""

from __future__ import annotations


def _rows(r: dict) -> list[tuple[str, str, str]]:
    p, s = r["parse"], r["sidecar"]
    rows = [
        (
            "log parse, sidecar (hyperscan)",
            f"{p['parser_s']:.2f} s",
            f"{p['parser_lines_per_s']:,.0f} lines/s; {p['ratio']:.2f}x grep (goal < 2x)",
        ),
        ("log parse, sidecar (find fallback)", f"{p['find_s']:.2f} s", f"{p['find_ratio']:.2f}x grep"),
        (
            "log parse, grep -E (baseline)",
            f"{p['grep_s']:.2f} s",
            f"{p['lines']:,} lines, {p['bytes'] / 2**20:.0f} MiB",
        ),
        (
            "detection latency (log line -> /metrics)",
            f"{s['detect_latency_s_median'] * 1000:.0f} ms median",
            f"max {s['detect_latency_s_max'] * 1000:.0f} ms (goal < 1 s)",
        ),
        ("CPU at idle", f"{s['idle_cpu_s_per_min']:.2f} s/min", ""),
        (
            "CPU under log load",
            f"{s['load_cpu_s_per_min']:.1f} s/min",
            f"{s['load_lines'] / s['load_wall_s']:,.0f} lines/s followed",
        ),
        (
            "RSS over a long log",
            f"{s['rss_start_mib']:.0f} -> {s['rss_after_slices_mib'][-1]:.0f} MiB",
            f"slope {s['rss_growth_mib_per_million_lines']:+.2f} MiB per 1M lines (2nd half)",
        ),
    ]
    live = r.get("live")
    if live:
        ld, fl, h = live["load"], live["flip"], live["hours"]
        rows += [
            (
                "canary load, tokens (defaults)",
                f"{ld['canary_tokens_per_hour']:,.0f} /h",
                f"{ld['token_share'] * 100:.2f}% of {ld['served_tokens_per_hour']:,.0f} served/h (goal < 1%)",
            ),
            (
                "canary load, requests (defaults)",
                f"{ld['canary_requests_per_hour']:,.0f} /h",
                f"{ld['request_share'] * 100:.2f}% of {ld['served_requests_per_hour']:,.0f} served/h",
            ),
            (
                "canary latency, idle / under load",
                f"{ld['latency_idle_s']:.1f} s",
                f"{ld['latency_under_load_s_median']:.1f} s median under {ld['load_concurrency']} clients",
            ),
            (
                "wrong answers -> canary metric",
                f"{fl['fail_latency_s_median']:.1f} s median",
                f"max {fl['fail_latency_intervals_max']:.2f} intervals of {fl['interval_s']:.0f} s (goal <= 1)",
            ),
            ("right answers again -> recovered", f"{fl['recover_latency_s_median']:.1f} s median", ""),
            (
                f"RSS over {h['hour_equivalents']:g} h-equivalent (log+canary)",
                f"{h['rss_start_mib']:.0f} -> {h['rss_mib'][-1]:.0f} MiB",
                f"slope {h['rss_slope_mib_per_hour']:+.2f} MiB/h (2nd half); {h['canary_runs']} runs, "
                f"{h['log_lines']:,} lines",
            ),
            ("CPU per hour-equivalent (log+canary)", f"{h['cpu_s_per_hour_equivalent']:.1f} s/h", ""),
        ]
    return rows


def table(result: dict) -> str:
    rows = _rows(result)
    width = max(len(r[0]) for r in rows)
    m = result["machine"]
    head = f"machine: {m['cpus']} CPUs, {m['cpu']}, {m['platform']}, Python {m['python']}"
    return "\n".join([head, ""] + [f"  {a:<{width}}  {b:>20}  {c}".rstrip() for a, b, c in rows])
