"""The serving report: one serving run (:class:`simulators.serving.ServingResult`) — summary,
TTFT / TPOT / end-to-end percentiles, the design, latency distributions, KV cache, batch and
queue over time — and, with a :class:`simulators.serving.RateSweep`, throughput and tail
latency against the arrival rate. One self-contained HTML file, built like the one-design
report (:mod:`dse.report.design`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dse.report.design import cards, design_label, hardware_rows, kv_list
from dse.report.html import Markup, el, render_page, write_page
from dse.report.units import fmt


def target_label(target: dict[str, Any]) -> str:
    """``"gpu:h200"``, or ``"hgx-h200: 2 x gpu:h200, tp 2"`` for a system."""
    if "system" not in target:
        return design_label(target)
    dev = _first_device(target)
    layout = target.get("layout") or {}
    par = ", ".join(f"{k} {v}" for k, v in layout.items()
                    if k in ("tp", "pp", "ep", "dp") and v not in (None, 1))
    return (f"{target.get('system') or 'system'}: {(target.get('sys') or {}).get('devices', '?')}"
            f" x {design_label(dev)}" + (f", {par}" if par else ""))


def serving_totals(r: Any) -> list[tuple[str, str]]:
    """(label, formatted value) of a serving run's headline numbers, in display order."""
    rows = [("requests completed", f"{r.completed:,} of {r.requests:,}"),
            ("throughput", fmt(r.throughput_tok_s, "tokens/s")),
            ("requests served", fmt(r.throughput_req_s, "requests/s"))]
    if r.goodput_req_s is not None:
        rows.append(("goodput (met the SLOs)", fmt(r.goodput_req_s, "requests/s")))
    rows += [("TTFT p50 / p99", f"{fmt(r.ttft_s['p50'], 's')} / {fmt(r.ttft_s['p99'], 's')}"),
             ("TPOT p50 / p99", f"{fmt(r.tpot_s['p50'], 's')} / {fmt(r.tpot_s['p99'], 's')}"),
             ("end-to-end p99", fmt(r.e2e_s["p99"], "s")),
             ("energy per token", fmt(r.energy_per_token_j, "J")),
             ("cost per million tokens", fmt(r.cost_per_mtok_usd, "US$")),
             ("design cost", fmt(r.cost_usd, "US$")),
             ("preemptions", f"{r.preemptions:,}"), ("rejected", f"{r.rejected:,}"),
             ("arrival rate", fmt(r.arrival_rate, "requests/s")),
             ("span", fmt(r.span_s, "s")), ("iterations", f"{r.iterations:,}"),
             ("most running", f"{r.max_running:,}"),
             ("mean in system", f"{r.mean_in_system:.4g} requests"),
             ("KV cache", f"{r.kv_cache['capacity_tokens']:,} tokens, peak "
                          f"{100 * r.kv_cache['peak_occupancy']:.1f}%")]
    return rows


def percentile_table(r: Any) -> Markup:
    """TTFT, TPOT and end-to-end latency at p50 / p90 / p99 and their means."""
    cols = ("p50", "p90", "p99", "mean")
    head = el("tr", el("th", "latency"), [el("th", c) for c in cols])
    body = [el("tr", el("td", name), [el("td", fmt(d.get(c), "s")) for c in cols])
            for name, d in (("TTFT", r.ttft_s), ("TPOT", r.tpot_s), ("end-to-end", r.e2e_s))]
    return el("div", el("table", el("thead", head), el("tbody", body)), class_="tablewrap")


def sweep_table(sweep: Any) -> Markup:
    """One row per arrival rate: throughput, goodput, p99 TTFT / TPOT / end-to-end, counts."""
    cols = (("rate_req_s", "arrival rate", "requests/s"),
            ("throughput_tok_s", "throughput", "tokens/s"),
            ("throughput_req_s", "served", "requests/s"),
            ("goodput_req_s", "goodput", "requests/s"), ("ttft_p99_s", "p99 TTFT", "s"),
            ("tpot_p99_s", "p99 TPOT", "s"), ("e2e_p99_s", "p99 end-to-end", "s"),
            ("preemptions", "preemptions", ""), ("rejected", "rejected", ""))
    head = el("tr", [el("th", name) for _, name, _ in cols])
    body = [el("tr", [el("td", fmt(row[k], unit)) for k, _, unit in cols])
            for row in sweep.rows()]
    return el("div", el("table", el("thead", head), el("tbody", body)), class_="tablewrap")


def serving_figures(result: Any) -> dict[str, Any]:
    """The detail figures of one serving run, keyed ``latency_cdf``, ``occupancy``."""
    from dse.report.serving_figures import latency_cdfs, occupancy
    return {"latency_cdf": latency_cdfs(result), "occupancy": occupancy(result)}


def serving_page(result: Any, sweep: Any = None, title: str | None = None) -> str:
    """The HTML text of the serving report of ``result`` (and ``sweep``, if given)."""
    from dse.report.serving_figures import rate_sweep
    label = target_label(result.target)
    title = title or f"{result.model} serving {result.trace} on {label}"
    sched = result.scheduler
    figs = serving_figures(result)
    slo = ", ".join(f"{k[:-2].upper()} ≤ {fmt(v, 's')}"
                    for k, v in (result.slo or {}).items() if v)
    body: list[Any] = [
        el("h1", title),
        el("p", f"{result.requests:,} requests · {sched.get('name')} batching (at most "
                f"{sched.get('max_batch')} requests, {sched.get('token_budget')} tokens per "
                f"iteration)" + (f" · SLOs {slo}" if slo else "")
                + f" · simulated in {result.sim_wall_s:.3g} s", class_="note"),
        cards(serving_totals(result)),
        el("h2", "Latency percentiles"), percentile_table(result),
        el("h2", "Design"),
        kv_list([("target", label), ("model", result.model),
                 ("design cost", fmt(result.cost_usd, "US$"))] + economics_rows(result)
                + hardware_rows(_first_device(result.target))),
        el("h2", "Latency distributions"),
        el("div", id="fig-latency_cdf", class_="plot", data_figure="latency_cdf"),
        el("h2", "KV cache, running and waiting requests over time"),
        el("div", id="fig-occupancy", class_="plot", data_figure="occupancy")]
    if sweep is not None:
        figs["rate_sweep"] = rate_sweep(sweep, result.slo)
        body += [el("h2", "Throughput against arrival rate"),
                 el("p", "The same requests at each rate (the synthetic trace's gaps, or a CSV "
                         "trace's timestamps, scaled).", class_="note"),
                 el("div", id="fig-rate_sweep", class_="plot", data_figure="rate_sweep"),
                 sweep_table(sweep)]
    return render_page(title, el("main", *body), figs, {"kind": "serving"})


def _first_device(target: dict[str, Any]) -> dict[str, Any]:
    """The design of a target, or its (first) device for a system."""
    if "system" not in target:
        return target
    dev = target.get("device")
    return (dev[0] if isinstance(dev, list) and dev else dev) or {}


def write_serving_report(result: Any, path: str | Path, sweep: Any = None,
                         title: str | None = None) -> Path:
    """Write the serving report of ``result`` (and ``sweep``) to ``path`` (one self-contained
    HTML file, written atomically)."""
    return write_page(path, serving_page(result, sweep, title))


def economics_rows(result) -> list[tuple[str, str]]:
    """How the cost per token was made (:mod:`simulators.economics`): the cost per hour and
    its parts, the utilisation (measured or given) and the parameters."""
    ec = getattr(result, "economics", None) or {}
    if not ec:
        return [("cost amortised over", f"{result.lifetime_years:g} years + "
                                         f"{result.usd_per_kwh:g} US$/kWh")]
    per_h, par = ec["usd_per_hour"], ec["parameters"]
    given = par.get("utilisation") is not None
    return [("cost per hour", fmt(sum(per_h.values()), "US$") + " (hardware "
             + fmt(per_h["hardware"], "US$") + ", host " + fmt(per_h["host"], "US$")
             + ", energy " + fmt(per_h["energy"], "US$") + ")"),
            ("utilisation", f"{100 * ec['utilisation']:.1f}% "
             + ("(given; measured " + f"{100 * ec['utilisation_measured']:.1f}%)" if given
                else "(measured)")),
            ("amortised over", f"{par['amortisation_years']:g} years; host "
             + fmt(par["host_usd"], "US$") + " and " + fmt(par["host_w"], "W")
             + " per accelerator"),
            ("energy at", f"PUE {par['pue']:g}, {par['usd_per_kwh']:g} US$/kWh")]
