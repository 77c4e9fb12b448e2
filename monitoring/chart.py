#!/usr/bin/env python3
"""Draws pg_shard_id's metrics from Prometheus into one PNG: ids/s, waits/s and the lead over the
clock, one line per sequence, over a time range (Prometheus's query_range API).

    chart.py --url http://127.0.0.1:9090 --start 1795463700 --end 1795463760 --out burst.png
    chart.py --url http://prometheus:9090 --start 2026-11-23T19:55:00Z --end 2026-11-23T19:56:00Z \
             --match '{datname="app",sequence="photos_id_seq"}' --out burst.png

--start and --end are Unix seconds or RFC 3339, passed to Prometheus as they are (default: the last
5 minutes). The metric names are monitoring/queries.yaml's. Needs matplotlib
(monitoring/requirements.txt); everything else is the standard library.
"""
import argparse
import datetime
import json
import sys
import time
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

CAP_IDS_PER_S = 1024 * 1000  # the layout's limit per sequence: 1,024 ids per millisecond


def query_range(url, expr, start, end, step):
    """[(labels, [(datetime, value)])] of a range query."""
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query_range?{params}", timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise SystemExit(f"Prometheus refused {expr}: {body}")
    return [
        (s["metric"], [(datetime.datetime.fromtimestamp(float(t), datetime.timezone.utc), float(v))
                       for t, v in s["values"]])
        for s in body["data"]["result"]
    ]


def label(metric):
    return f"{metric.get('datname', '')}/{metric.get('sequence', '')}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="Prometheus, e.g. http://127.0.0.1:9090")
    p.add_argument("--start", help="Unix seconds or RFC 3339 (default: 5 minutes before --end)")
    p.add_argument("--end", help="Unix seconds or RFC 3339 (default: now)")
    p.add_argument("--step", default="1s", help="resolution of the range query (default 1s)")
    p.add_argument("--window", default="5s",
                   help="the irate() window, at least two scrape intervals (default 5s)")
    p.add_argument("--match", default="", help='label matchers, e.g. {datname="app",sequence="s"}')
    p.add_argument("--title", default="pg_shard_id, scraped by Prometheus")
    p.add_argument("--out", required=True, help="the PNG to write")
    a = p.parse_args()
    end = a.end or f"{time.time():.3f}"
    start = a.start
    if not start:
        try:
            start = f"{float(end) - 300:.3f}"
        except ValueError:
            p.error("with --end in RFC 3339, give --start too")

    panels = [
        ("ids/s", f"irate(pg_shard_id_ids_total{a.match}[{a.window}])"),
        ("waits/s", f"irate(pg_shard_id_waits_total{a.match}[{a.window}])"),
        ("lead over the clock (ms)", f"pg_shard_id_lead_seconds{a.match} * 1000"),
    ]
    series = [query_range(a.url, expr, start, end, a.step) for _, expr in panels]
    if not any(series):
        sys.exit(f"no pg_shard_id series in Prometheus at {a.url} between {start} and {end}")

    fig, axes = plt.subplots(len(panels), 1, sharex=True, figsize=(9, 7.5))
    for ax, (title, expr), result in zip(axes, panels, series):
        for metric, points in result:
            ax.plot([t for t, _ in points], [v for _, v in points], label=label(metric), lw=1.5)
        ax.set_ylabel(title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.set_title(expr, fontsize=8, loc="left", family="monospace")
    axes[0].axhline(CAP_IDS_PER_S, color="grey", ls="--", lw=1, label="1,024 ids/ms")
    axes[0].yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    axes[0].legend(fontsize=8, loc="upper right")
    axes[-1].xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=datetime.timezone.utc))
    axes[-1].set_xlabel("time (UTC)")
    fig.suptitle(a.title)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
