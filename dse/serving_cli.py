"""``dse fleet``, ``dse disaggregate`` and ``dse speculate``: the serving questions past one
server (:mod:`dse.serving_api`), registered by :mod:`dse.cli`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from dse.errors import BadInput

TraceOpt = typer.Option("sharegpt", "--trace", help="sharegpt | alpaca | arena | pubmed | "
                        "mixed (synthetic lengths like those datasets) | FILE.csv.")
RateOpt = typer.Option(None, "--rate", help="Arrivals, requests/s (a CSV trace: rescales it).")
RequestsOpt = typer.Option(None, "--requests", help="Requests simulated.")
SloTtftOpt = typer.Option(None, "--slo-ttft", help="TTFT SLO, s.")
SloTpotOpt = typer.Option(None, "--slo-tpot", help="TPOT SLO, s.")
JsonOpt = typer.Option(False, "--json", help="Print JSON.")


#: Largest menu or routing file read, bytes [E: a menu of 100 device types is ~10 KB].
MAX_DATA_BYTES = 1 << 20


def _read_data(path: Path, flag: str) -> Any:
    """A YAML or JSON file's data: a regular file (no pipe or device), at most
    :data:`MAX_DATA_BYTES`, read as the study files are (safe types only, YAML 1.2 scalars,
    aliases bounded; :func:`dse.study.loader.parse_yaml`)."""
    from dse.safe_io import read_regular
    from dse.study.loader import parse_yaml
    data = read_regular(path, flag, MAX_DATA_BYTES, "a YAML or JSON file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(flag, str(path), "expected a UTF-8 YAML or JSON file") from None
    return parse_yaml(text, flag)


def _pool(text: Optional[str], flag: str) -> dict[str, Any]:
    """``accelerator=gpu:a100,count=2,tp=2`` -> a pool mapping."""
    from dse.cli import parse_pairs
    pairs = parse_pairs([p for p in (text or "").split(",") if p], flag)
    out: dict[str, Any] = {}
    for k, v in pairs.items():
        if k in ("count", "devices", "max_batch", "token_budget", "tp"):
            try:
                out[k] = int(v)
            except ValueError:
                raise BadInput(f"{flag}.{k}", v, "expected an int") from None
        elif k in ("accelerator", "system"):
            out[k] = v
        else:
            raise BadInput(f"{flag}.{k}", v, "expected accelerator, system, devices, tp, "
                           "count, max_batch or token_budget")
    tp = out.pop("tp", None)
    if tp is not None:
        out["parallel"] = {"tp": tp}
    return out


def fleet(model: str = typer.Argument(..., help="Zoo model name (an LLM)."),
          menu: Optional[Path] = typer.Option(None, "--menu", help="YAML/JSON list of device "
                                              "types: {name, accelerator | system, ..., "
                                              "price_usd_per_h}."),
          device: Optional[list[str]] = typer.Option(None, "--device", help="A device type "
                                                     "PRESET=PRICE, e.g. gpu:l4=0.70 "
                                                     "(US$/h; repeatable)."),
          trace: str = TraceOpt, rate: Optional[float] = RateOpt,
          requests: Optional[int] = RequestsOpt, slo_ttft: Optional[float] = SloTtftOpt,
          slo_tpot: Optional[float] = SloTpotOpt,
          counts: Optional[str] = typer.Option(None, "--counts", help="Simulate this fleet "
                                               "instead of solving: NAME=N,... (with "
                                               "--routing)."),
          routing: Optional[Path] = typer.Option(None, "--routing", help="YAML/JSON {bucket "
                                                 "label or '*': {device: weight}}."),
          confirm: bool = typer.Option(True, "--confirm/--no-confirm", help="Simulate the "
                                       "fleet on the trace."),
          as_json: bool = JsonOpt) -> None:
    """The cheapest mix of device types serving a workload within its SLOs (Mélange), the
    routing of request sizes to types, and the simulated fleet's SLO attainment."""
    from dse import api
    from dse.cli import _busy, _print_json, out, parse_pairs
    entries = _read_data(menu, "--menu") if menu else []
    for i, d in enumerate(device or []):
        spec, sep, price = d.rpartition("=")
        try:
            value = float(price)
        except ValueError:
            value = None
        if not sep or not spec or value is None:
            raise BadInput("--device", d, "expected PRESET=PRICE, e.g. gpu:l4=0.70")
        entries = list(entries or []) + [{"name": spec.split(":")[-1], "accelerator": spec,
                                         "price_usd_per_h": value}]
    n = None
    if counts is not None:
        n = {}
        for k, v in parse_pairs(counts.split(","), "--counts").items():
            try:
                n[k] = int(v)
            except ValueError:
                raise BadInput(f"--counts.{k}", v, "expected an int") from None
    rt = _read_data(routing, "--routing") if routing else None
    with _busy(f"solving a fleet for {model}"):
        f = api.fleet(model, entries, trace=trace, rate=rate, requests=requests,
                      slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot, counts=n, routing=rt,
                      confirm=confirm)
    if as_json:
        _print_json(f.to_dict())
        return
    mix = ", ".join(f"{v} x {k}" for k, v in f.counts.items())
    out.print(f"[bold]{model}[/] at {f.rate:g} req/s ({trace}): {mix}, "
              f"${f.cost_usd_per_h:,.4g}/h")
    if f.best_single:
        out.print(f"cheapest single type: {f.best_single} "
                  f"(${f.single[f.best_single]['cost_usd_per_h']:,.4g}/h); saving "
                  f"{100 * f.saving:.1f} %")
    for label, w in f.routing.items():
        out.print(f"  {label}: " + ", ".join(f"{k} {100 * v:.0f} %" for k, v in w.items()))
    if f.confirm:
        c = f.confirm
        out.print(f"simulated: {c['completed']}/{c['requests']} requests, SLO attainment "
                  f"{100 * c['slo_attainment']:.1f} %, TTFT p99 {c['ttft_s']['p99']:.3g} s, "
                  f"TPOT p99 {c['tpot_s']['p99']:.3g} s")


def disaggregate(model: str = typer.Argument(..., help="Zoo model name (an LLM)."),
                 prefill: str = typer.Option(..., "--prefill", help="Prefill pool, e.g. "
                                             "accelerator=gpu:a100,count=2[,tp=2]."),
                 decode: str = typer.Option(..., "--decode", help="Decode pool, as --prefill."),
                 link: str = typer.Option("nvlink4", "--link", help="Link standard between "
                                          "the pools (nvlink3, nvlink4, pcie5x16, ib_ndr, ...)."),
                 links: int = typer.Option(1, "--links", help="Links between the pools."),
                 trace: str = TraceOpt, rate: Optional[float] = RateOpt,
                 requests: Optional[int] = RequestsOpt, slo_ttft: Optional[float] = SloTtftOpt,
                 slo_tpot: Optional[float] = SloTpotOpt, as_json: bool = JsonOpt) -> None:
    """Serve a trace on separate prefill and decode pools joined by a link (DistServe,
    Splitwise): TTFT / TPOT, goodput per device, KV bytes moved and transfer times."""
    from dse import api
    from dse.cli import _busy, _print_json, out
    with _busy(f"serving {model} on disaggregated pools"):
        r = api.serve_disaggregated(model, _pool(prefill, "--prefill"),
                                    _pool(decode, "--decode"), link=link, links=links,
                                    trace=trace, rate=rate, requests=requests,
                                    slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot)
    s = r.summary()
    if as_json:
        _print_json(s)
        return
    out.print(f"[bold]{model}[/]: {s['completed']}/{s['requests']} requests on "
              f"{s['devices']} devices ({r.prefill['count']} prefill + {r.decode['count']} "
              f"decode instances, {link} x{links})")
    out.print(f"TTFT p50 {s['ttft_s']['p50']:.3g} s p99 {s['ttft_s']['p99']:.3g} s   TPOT "
              f"p50 {s['tpot_s']['p50']:.3g} s p99 {s['tpot_s']['p99']:.3g} s")
    out.print(f"goodput {s['goodput_req_s']:.3g} req/s ({s['goodput_per_device_req_s']:.3g} "
              f"per device), SLO attainment {100 * s['slo_attainment']:.1f} %")
    out.print(f"KV moved {s['kv_bytes_transferred'] / 1e9:.3g} GB (written "
              f"{s['kv_bytes_written'] / 1e9:.3g} GB), transfer p99 "
              f"{s['kv_transfer_s']['p99'] * 1e3:.3g} ms, link busy "
              f"{100 * s['link_busy']:.2f} %")


def speculate(model: str = typer.Argument(..., help="Zoo model name (the target)."),
              draft: Optional[str] = typer.Option(None, "--draft", help="Draft zoo model."),
              draft_accelerator: Optional[str] = typer.Option(
                  None, "--draft-accelerator", help="Run the draft on its own device."),
              heads: bool = typer.Option(False, "--heads", help="Self-drafting heads "
                                         "(Medusa-style) instead of a draft model."),
              k: int = typer.Option(4, "--k", help="Drafted tokens per round."),
              acceptance: Optional[float] = typer.Option(None, "--acceptance", help="Per-token "
                                                         "acceptance probability, [0, 1]."),
              accepted_tokens: Optional[float] = typer.Option(
                  None, "--accepted-tokens", help="Mean tokens kept per round, [1, k + 1]."),
              input_len: int = typer.Option(128, "--input-len", help="Prompt tokens."),
              output_len: int = typer.Option(128, "--output-len", help="Output tokens."),
              batch: int = typer.Option(1, "--batch", help="Sequences."),
              accelerator: Optional[str] = typer.Option(None, "--accelerator", "-a",
                                                        help="Target device."),
              overlap: bool = typer.Option(False, "--overlap", help="Draft on its own device "
                                           "while the target verifies (Mirror-SD)."),
              as_json: bool = JsonOpt) -> None:
    """Speculative decoding: TPOT and speed-up over plain decoding on the same target."""
    from dse import api
    from dse.cli import _busy, _print_json, out
    d: Any = draft
    if draft and draft_accelerator:
        d = {"model": draft, "accelerator": draft_accelerator}
    with _busy(f"speculating {model}"):
        r = api.speculate(model, draft=d, heads=heads, k=k, acceptance=acceptance,
                          accepted_tokens=accepted_tokens, input_len=input_len,
                          output_len=output_len, batch=batch, accelerator=accelerator,
                          overlap=overlap)
    if as_json:
        _print_json(r.to_dict())
        return
    out.print(f"[bold]{model}[/] k={r.k}, acceptance {r.acceptance:.3g}: "
              f"{r.tokens_per_round:.3g} tokens per round (expected "
              f"{r.expected_tokens_per_round:.3g})")
    out.print(f"TPOT {r.tpot_s * 1e3:.3g} ms (plain decoding {r.baseline_tpot_s * 1e3:.3g} ms):"
              f" speed-up {r.speedup:.3g}x, end to end {r.e2e_speedup:.3g}x   round: draft "
              f"{r.draft_s * 1e3:.3g} ms, verify {r.verify_s * 1e3:.3g} ms")


COMMANDS = (("fleet", fleet), ("disaggregate", disaggregate), ("speculate", speculate))
__all__ = ["COMMANDS"]
