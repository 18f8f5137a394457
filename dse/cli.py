"""The ``dse`` command line. Every user error is one line on stderr and exit code 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from dse.errors import BadInput, DSEError, first_line
from dse.report.cli import report_command
from dse.study.cli import study_app

try:  # typer >= 0.20 vendors click as typer._click; older typer uses click itself
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as click_exc

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None,
                  help="Design-space exploration of accelerators co-searched with models.")
calibrate_app = typer.Typer(no_args_is_help=True, help="Calibrate templates on real hardware.")
app.add_typer(study_app, name="study")
app.add_typer(calibrate_app, name="calibrate")
app.command("report", help="Write a study's interactive HTML report.")(report_command)
from dse.train_cli import train_command  # noqa: E402  (its body lives in its own module)
app.command("train")(train_command)

out = Console()
DTYPES = ["fp32", "fp16", "bf16", "fp8", "int8"]


def parse_pairs(pairs: list[str] | None, flag: str) -> dict[str, str]:
    """``["k=v", ...]`` -> dict; a pair without ``=`` is a BadInput naming the flag."""
    result: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInput(flag, pair, "expected KEY=VALUE")
        result[key.strip()] = value.strip()
    return result


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=_json_default) + "\n")


def _economics(pairs: list[str] | None) -> dict[str, float] | None:
    """``--economics KEY=VALUE`` pairs as numbers (one BadInput line for a bad value)."""
    out: dict[str, float] = {}
    for k, v in parse_pairs(pairs, "--economics").items():
        try:
            out[k] = float(v)
        except ValueError:
            raise BadInput(f"economics.{k}", v, "expected a number") from None
    return out or None


def _json_default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


def _si(x: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.3g} {prefix}{unit}"
    if x != 0 and abs(x) < 1:
        for factor, prefix in ((1e-3, "m"), (1e-6, "u"), (1e-9, "n"), (1e-12, "p")):
            if abs(x) >= factor:
                return f"{x / factor:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


# ----------------------------------------------------------------------------- models, workload
@app.command()
def models(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The model zoo: each model's architecture parameters and defaults."""
    from dse import api
    rows = api.models()
    if as_json:
        _print_json(rows)
        return
    t = Table(title="Model zoo")
    for col in ("model", "family", "phases", "architecture parameters (defaults)"):
        t.add_column(col)
    for m in rows:
        t.add_row(m["name"], m["family"], ",".join(m["phases"]),
                  " ".join(f"{k}={v}" for k, v in m["arch"].items()))
    out.print(t)


def _workload_from_flags(model, phase, batch, seq, context, dtype, arch, hf_config,
                         kv_update=None, module=None, strict=False, formats=None,
                         media=None):
    from dse import api
    media = {k: v for k, v in (media or {}).items() if v is not None}
    if media and not hf_config:
        flag = "--" + next(iter(media)).replace("_", "-")
        raise BadInput(flag, next(iter(media.values())), "an input size of a Hugging Face "
                       "model: use it with --hf-config")
    given = [f for f, v in (("MODEL", model), ("--hf-config", hf_config), ("--module", module))
             if v]
    if len(given) > 1:
        raise BadInput(given[1], {"MODEL": model, "--hf-config": hf_config,
                                  "--module": module}[given[1]],
                       f"expected one source of the model, not both {given[0]} and {given[1]}")
    if module and arch:
        raise BadInput("--arch", arch[0], "expected no --arch with --module (your factory "
                       "builds the module: change it there)")
    if formats is not None:
        from workloads.formats import formatted, parse_formats
        spec = parse_formats(formats, dtype, "--formats")   # a bad value fails before capture
        api._no_train_formats(phase, formats, "--formats")
        return formatted(_workload_from_flags(model, phase, batch, seq, context, dtype, arch,
                                              hf_config, kv_update, module, strict,
                                              media=media), spec)
    if module:   # package.module:factory -> (nn.Module, inputs)
        from workloads.user_module import capture_module, load_factory
        mod, args, kwargs = load_factory(module)
        with _busy(f"capturing {module} with torch.export"):
            w = capture_module(mod, args, kwargs, phase=phase or "forward", dtype=dtype,
                               model=module, batch=batch, seq=seq or 0,
                               context=context or 0,
                               kv_update="in_place" if kv_update is None else kv_update)
        return api.check_unknown_ops(w, strict)
    if model and not hf_config:
        from workloads.build import check_sizes_apply
        check_sizes_apply(model, phase, seq, context)
    with _busy(f"capturing {hf_config or model} with torch.export"):
        return api.workload(model, phase=phase, batch=batch, seq=seq, context=context,
                            dtype=dtype, arch=parse_pairs(arch, "--arch"), hf_config=hf_config,
                            kv_update=kv_update, strict=strict, media=media or None)


def _busy(what: str):
    """A spinner on stderr while a slow step runs, on a terminal only (so pipes and scripts
    get nothing but the result or the one-line error)."""
    return Console(stderr=True).status(f"{what}...")


PhaseOpt = typer.Option(None, "--phase", help="prefill | decode | forward (default: the model's first).")
BatchOpt = typer.Option(None, "--batch", help="Batch size (points per batch for neural fields).")
SeqOpt = typer.Option(None, "--seq", help="Sequence length (prefill, encoders).")
ContextOpt = typer.Option(None, "--context", help="KV-cache length in tokens (decode).")
DtypeOpt = typer.Option("bf16", "--dtype", help="fp32 | fp16 | bf16 | fp8 | int8.")
ArchOpt = typer.Option(None, "--arch", help="Architecture override KEY=VALUE (repeatable).")
HfOpt = typer.Option(None, "--hf-config", help="A Hugging Face config.json (needs transformers).")
KvUpdateOpt = typer.Option(None, "--kv-update", help="in_place | concat: how decode updates the "
                           "KV cache (default: as the model does; zoo in_place, HF concat).")
ModuleOpt = typer.Option(None, "--module", help="Your own model: package.module:factory, a "
                         "function returning (nn.Module, inputs).")
ImageSizeOpt = typer.Option(None, "--image-size", help="Image side in pixels of a Hugging Face "
                            "vision or multimodal model's input (default: its config's).")
FramesOpt = typer.Option(None, "--frames", help="Mel frames of a Hugging Face audio model's input.")
AudioSecondsOpt = typer.Option(None, "--audio-seconds", help="Seconds of audio (16 kHz, 100 mel "
                               "frames/s) of a Hugging Face audio model's input.")
FormatsOpt = typer.Option(None, "--formats", help="Number format per tensor role, e.g. "
                          "weights=int4_g128,activations=fp8_e4m3,kv=fp8_e4m3 (roles: weights, "
                          "activations, kv, head, attention; unlisted roles stay in --dtype).")


@app.command()
def workload(model: Optional[str] = typer.Argument(
                 None, help="Zoo model name (see `dse models`); omit with --hf-config or --module."),
             phase: Optional[str] = PhaseOpt, batch: Optional[int] = BatchOpt,
             seq: Optional[int] = SeqOpt, context: Optional[int] = ContextOpt,
             dtype: str = DtypeOpt, arch: Optional[list[str]] = ArchOpt,
             hf_config: Optional[Path] = HfOpt, kv_update: Optional[str] = KvUpdateOpt,
             module: Optional[str] = ModuleOpt, formats: Optional[str] = FormatsOpt,
             strict: bool = typer.Option(False, "--strict", help="Unknown ops are an error."),
             as_json: bool = typer.Option(False, "--json", help="Print JSON."),
             image_size: Optional[int] = ImageSizeOpt, frames: Optional[int] = FramesOpt,
             audio_seconds: Optional[float] = AudioSecondsOpt) -> None:
    """Capture a model with torch.export and summarise its op graph."""
    import warnings
    with warnings.catch_warnings():   # unknown ops are listed below (or refused by --strict)
        warnings.simplefilter("ignore")
        w = _workload_from_flags(model, phase, batch, seq, context, dtype, arch,
                                 str(hf_config) if hf_config else None, kv_update, module,
                                 strict, formats, {"image_size": image_size, "frames": frames,
                                                   "audio_seconds": audio_seconds})
    s = w.summary()
    if as_json:
        _print_json(s)
        return
    out.print(f"[bold]{s['model']}[/] {s['phase']} batch={s['batch']} seq={s['seq']} "
              f"context={s['context']} dtype={s['dtype']}")
    if s.get("formats"):
        out.print("formats " + " ".join(f"{k}={v}" for k, v in s["formats"].items()))
    out.print(f"params {s['params']:,}   ops {s['ops']}   FLOPs {_si(s['flops'], 'FLOP')}   "
              f"weights {_si(s['bytes']['weights'], 'B')}   activations "
              f"{_si(s['bytes']['activations'], 'B')}   KV cache {_si(s['bytes']['kv_cache'], 'B')}")
    t = Table()
    for col in ("kind", "ops", "FLOPs", "share"):
        t.add_column(col, justify="right" if col != "kind" else "left")
    total = max(s["flops"], 1)
    for kind, n in sorted(s["ops_by_kind"].items(), key=lambda kv: -s["flops_by_kind"].get(kv[0], 0)):
        f = s["flops_by_kind"].get(kind, 0)
        t.add_row(kind, str(n), _si(f, "FLOP"), f"{100 * f / total:.1f}%")
    out.print(t)
    if s["unknown_ops"]:
        out.print("[yellow]unknown ops (costed by bytes only):[/] " + ", ".join(
            f"{k} x{v}" for k, v in s["unknown_ops"].items()))


# ----------------------------------------------------------------------------- accelerators
@app.command()
def accelerators(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Accelerator templates, their presets and parameters (units, defaults, ranges)."""
    from dse import api
    from dse.cli_format import accelerators_text
    rows = api.accelerators()
    if as_json:
        _print_json(rows)
        return
    sys.stdout.write(accelerators_text(rows, out.width))


# ----------------------------------------------------------------------------- simulate
@app.command()
def simulate(model: Optional[str] = typer.Argument(None, help="Zoo model name."),
             accelerator: Optional[str] = typer.Option(
                 None, "--accelerator", "-a", help="TEMPLATE[:PRESET], e.g. gpu:h200 (default "
                 "npu; with --system: the preset's device)."),
             hw: Optional[list[str]] = typer.Option(None, "--hw", help="Hardware KEY=VALUE (repeatable)."),
             phase: Optional[str] = PhaseOpt, batch: Optional[int] = BatchOpt,
             seq: Optional[int] = SeqOpt, context: Optional[int] = ContextOpt,
             dtype: str = DtypeOpt, arch: Optional[list[str]] = ArchOpt,
             hf_config: Optional[Path] = HfOpt, kv_update: Optional[str] = KvUpdateOpt,
             module: Optional[str] = ModuleOpt, formats: Optional[str] = FormatsOpt,
             as_json: bool = typer.Option(False, "--json", help="Print the Result as JSON."),
             trace: Optional[Path] = typer.Option(None, "--trace", help="Write a Chrome trace (Perfetto)."),
             report: Optional[Path] = typer.Option(None, "--report", help="Write a one-design HTML report."),
             system: Optional[str] = typer.Option(None, "--system", help="System preset (see `dse systems`)."),
             devices: Optional[int] = typer.Option(None, "--devices", help="Devices of the system (default: the layout's)."),
             sys_pairs: Optional[list[str]] = typer.Option(None, "--sys", help="System parameter KEY=VALUE (repeatable)."),
             tp: int = typer.Option(1, "--tp", help="Tensor-parallel ranks."),
             pp: int = typer.Option(1, "--pp", help="Pipeline stages."),
             ep: int = typer.Option(1, "--ep", help="Expert-parallel ranks (mixture-of-experts models)."),
             dp: int = typer.Option(1, "--dp", help="Data-parallel replicas."),
             sp: bool = typer.Option(False, "--sp", help="Sequence parallelism with tensor parallelism."),
             microbatches: int = typer.Option(0, "--microbatches", help="Pipeline microbatches (0: pp when the batch splits so)."),
             ep_imbalance: float = typer.Option(1.0, "--ep-imbalance", help="Hottest expert-parallel rank's load over the mean."),
             image_size: Optional[int] = ImageSizeOpt, frames: Optional[int] = FramesOpt,
             audio_seconds: Optional[float] = AudioSecondsOpt) -> None:
    """Simulate one design (or a system of devices) on one model: latency, energy, area,
    power, timeline."""
    from dse import api
    from dse.files import atomic_write_text, output_errors
    w = _workload_from_flags(model, phase, batch, seq, context, dtype, arch,
                             str(hf_config) if hf_config else None, kv_update, module,
                             formats=formats, media={"image_size": image_size, "frames": frames,
                                                     "audio_seconds": audio_seconds})
    parallel = {"tp": tp, "pp": pp, "ep": ep, "dp": dp, "sequence_parallel": sp,
                "microbatches": microbatches, "ep_imbalance": ep_imbalance}
    design = None
    if system is not None or sys_pairs or devices is not None or (tp, pp, ep, dp) != (1, 1, 1, 1) \
            or sp:
        with _busy(f"simulating {len(w)} ops on {system or 'a system'}"):
            r = api.simulate(w, accelerator=accelerator, hw=parse_pairs(hw, "--hw") or None,
                             system=system, devices=devices, parallel=parallel,
                             sys=parse_pairs(sys_pairs, "--sys"))
    else:
        design = api.accelerator("npu" if accelerator is None else accelerator,
                                 parse_pairs(hw, "--hw"))
        with _busy(f"simulating {len(w)} ops on {accelerator or 'npu'}"):
            r = api.simulate(w, design)
    if trace:
        with output_errors("--trace", trace):
            atomic_write_text(trace, json.dumps(r.to_chrome_trace()))
    if report:
        from dse.report import write_design_report
        with output_errors("--report", report):
            write_design_report(r, report)
    if as_json:
        _print_json(r.to_dict())
        return
    _print_result(r, w, design)
    if trace:
        out.print(f"trace: {trace}")
    if report:
        out.print(f"report: {report}")


def _print_ran(w, design) -> None:
    """What ran: the workload (sizes, architecture) and the design (every parameter)."""
    from dse.cli_format import items_text, wrapped
    sizes = {"batch": w.batch, "seq": w.seq, "context": w.context}
    text = (f"workload: {w.dtype}, " + items_text({k: v for k, v in sizes.items() if v})
            + f", {len(w)} ops" + (f"; arch {items_text(w.arch)}" if w.arch else ""))
    units = {p.name: p.unit for p in design.PARAMS}
    for line in (text, f"design: {items_text(dict(design.hw), units)}"):
        out.print(wrapped(line, out.width), markup=False, highlight=False)


def _print_result(r, w=None, design=None) -> None:
    if hasattr(r, "per_device"):
        _print_system_result(r)
        return
    out.print(f"[bold]{r.model}[/] {r.phase} on [bold]{r.accelerator['template']}"
              f"{':' + r.accelerator['preset'] if r.accelerator.get('preset') else ''}[/]")
    if w is not None:
        _print_ran(w, design)
    out.print(f"latency {_si(r.latency_s, 's')}   energy {_si(r.energy_j, 'J')}   "
              f"area {r.area_mm2:,.1f} mm²   avg power {_si(r.avg_power_w, 'W')}   "
              f"throughput {r.throughput:,.4g} {r.throughput_unit}")
    if r.accelerator.get("latency_is"):
        out.print(f"latency is {r.accelerator['latency_is']}")
    out.print("energy: " + "  ".join(f"{k} {_si(v, 'J')}" for k, v in r.energy_breakdown_j.items() if v))
    if r.memory:
        m = r.memory
        out.print(f"memory: {m['devices']} x {m['standard']}, {_si(m['capacity_bytes'], 'B')}, "
                  f"{_si(m['bandwidth_Bps'], 'B/s')}   cost ${r.cost_usd:,.0f} per chip   "
                  f"TDP {_si(r.tdp_w, 'W')}")
    out.print("area: " + "  ".join(f"{k} {v:,.1f} mm²" for k, v in r.area_breakdown_mm2.items()
                                   if v))
    out.print("busy: " + "  ".join(f"{k} {100 * v:.1f}%" for k, v in r.busy_fraction.items())
              + (f"   compute utilisation {100 * r.compute_utilisation:.1f}% of peak FLOP/s"
                 if r.compute_utilisation == r.compute_utilisation else ""))
    t = Table(title="top ops by time")
    for col in ("op", "kind", "unit", "time", "bound", "FLOPs", "bytes"):
        t.add_column(col)
    for o in sorted(r.ops, key=lambda o: -o.duration_s)[:10]:
        t.add_row(o.name, o.kind, o.unit, _si(o.duration_s, "s"), o.bound,
                  _si(o.flops, "FLOP"), _si(o.bytes, "B"))
    out.print(t)


def _print_system_result(r) -> None:
    lay = r.layout
    sysd = r.accelerator
    out.print(f"[bold]{r.model}[/] {r.phase} on [bold]{sysd.get('system') or 'a system'}[/] "
              f"of {r.devices} devices ({sysd['topology']['kind']}, "
              f"{sysd['topology']['link']}) — tp {lay['tp']} pp {lay['pp']} ep {lay['ep']} "
              f"dp {lay['dp']}{' sp' if lay['sequence_parallel'] else ''}"
              f"{' microbatches ' + str(lay['microbatches']) if lay['pp'] > 1 else ''}")
    out.print(f"latency {_si(r.latency_s, 's')}   energy {_si(r.energy_j, 'J')}   "
              f"communication {_si(r.communication_s, 's')}   "
              f"throughput {r.throughput:,.4g} {r.throughput_unit}")
    out.print(f"system: cost ${r.cost_usd:,.0f}   TDP {_si(r.tdp_w, 'W')}   silicon "
              f"{r.area_mm2:,.0f} mm²   avg power {_si(r.avg_power_w, 'W')}")
    if r.fill_latency_s != r.latency_s:
        out.print(f"pipeline: fill {_si(r.fill_latency_s, 's')}, steady state per token "
                  f"{_si(r.latency_s, 's')}")
    out.print("energy: " + "  ".join(f"{k} {_si(v, 'J')}" for k, v in r.energy_breakdown_j.items() if v))
    busiest = sorted(r.link_utilisation.items(), key=lambda kv: -kv[1])[:4]
    if busiest:
        out.print("links: " + "  ".join(f"{k} {100 * v:.1f}%" for k, v in busiest))


# ----------------------------------------------------------------------------- generate, serve
AccelOpt = typer.Option(None, "--accelerator", "-a", help="TEMPLATE[:PRESET], e.g. gpu:h200 "
                        "(default npu; with --system: the preset's device).")
HwOpt = typer.Option(None, "--hw", help="Hardware KEY=VALUE (repeatable).")
SystemOpt = typer.Option(None, "--system", help="System preset (see `dse systems`).")
DevicesOpt = typer.Option(None, "--devices", help="Devices of the system (default: the layout's).")
SysOpt = typer.Option(None, "--sys", help="System parameter KEY=VALUE (repeatable).")
TpOpt = typer.Option(1, "--tp", help="Tensor-parallel ranks.")
FidelityOpt = typer.Option("fast", "--fidelity", help="How iterations are simulated: fast "
                           "(no contention between parallel ops; never below the floors) | "
                           "event (SimPy, contention). A system always runs event.")


def _formats_flag(formats: str | None, dtype: str):
    """``--formats`` checked (one line naming ``--formats`` when bad), or None."""
    if formats is None:
        return None
    from workloads.formats import parse_formats
    return parse_formats(formats, dtype, "--formats")


def _target_args(accelerator, hw, system, devices, sys_pairs, tp, pp=1, dp=1) -> dict[str, Any]:
    sysp = parse_pairs(sys_pairs, "--sys")
    many = bool(system is not None or sysp or devices is not None or (tp, pp, dp) != (1, 1, 1))
    return {"accelerator": accelerator, "hw": parse_pairs(hw, "--hw") or None,
            "system": system, "devices": devices, "sys": sysp or None,
            "parallel": ({"tp": tp, "pp": pp, **({"dp": dp} if dp != 1 else {})}
                         if many else None)}


@app.command()
def generate(model: str = typer.Argument(..., help="Zoo model name (an LLM)."),
             input_len: int = typer.Option(..., "--input-len", help="Prompt tokens per sequence."),
             output_len: int = typer.Option(..., "--output-len", help="Tokens generated per sequence."),
             batch: int = typer.Option(1, "--batch", help="Sequences generated together."),
             accelerator: Optional[str] = AccelOpt, hw: Optional[list[str]] = HwOpt,
             system: Optional[str] = SystemOpt, devices: Optional[int] = DevicesOpt,
             sys_pairs: Optional[list[str]] = SysOpt, tp: int = TpOpt,
             pp: int = typer.Option(1, "--pp", help="Pipeline stages."),
             dtype: str = DtypeOpt, arch: Optional[list[str]] = ArchOpt,
             formats: Optional[str] = FormatsOpt,
             exact: bool = typer.Option(False, "--exact", help="Simulate every decode step "
                                        "(default: a few, interpolated within 1 %)."),
             fidelity: str = FidelityOpt,
             as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Prefill then every decode step of a batch: TTFT, TPOT, end-to-end latency, tokens/s,
    energy per token."""
    from dse import api
    with _busy(f"generating {output_len} tokens of {model}"):
        g = api.generate(model, input_len, output_len, batch, dtype=dtype,
                         arch=parse_pairs(arch, "--arch") or None, exact=exact,
                         fidelity=fidelity, formats=_formats_flag(formats, dtype),
                         **_target_args(accelerator, hw, system, devices, sys_pairs, tp, pp))
    if as_json:
        _print_json(g.to_dict())
        return
    out.print(f"[bold]{model}[/] batch {batch}, {input_len} in / {output_len} out on "
              f"[bold]{system or accelerator or 'npu'}[/]")
    steps = g.step_latency_s
    out.print(f"TTFT {_si(g.ttft_s, 's')}   TPOT {_si(g.tpot_s, 's')} (first "
              f"{_si(steps[0] if steps else 0, 's')}, last {_si(steps[-1] if steps else 0, 's')})"
              f"   end-to-end {_si(g.e2e_s, 's')}")
    out.print(f"throughput {g.tokens_per_s:,.4g} tokens/s   energy {_si(g.energy_j, 'J')} "
              f"({_si(g.energy_per_token_j, 'J')} per token)   decode steps simulated "
              f"{len(g.simulated_steps)} of {max(output_len - 1, 0)}")


@app.command()
def serve(model: str = typer.Argument(..., help="Zoo model name (an LLM)."),
          trace: str = typer.Option("sharegpt", "--trace", help="sharegpt | alpaca | FILE.csv "
                                    "(columns arrival_s, input_len, output_len)."),
          rate: Optional[float] = typer.Option(None, "--rate", help="Arrivals, requests/s "
                                               "(a CSV trace: rescales its timestamps)."),
          duration: Optional[float] = typer.Option(None, "--duration", help="Arrivals during "
                                                   "this many seconds, s."),
          requests: Optional[int] = typer.Option(None, "--requests", help="Requests (default "
                                                 "1000 unless --duration or a CSV)."),
          scheduler: str = typer.Option("continuous", "--scheduler", help="continuous (vLLM, "
                                        "prefill first) | chunked (Sarathi) | static."),
          max_batch: int = typer.Option(256, "--max-batch", help="Requests running at most."),
          token_budget: Optional[int] = typer.Option(None, "--token-budget", help="Tokens per "
                                                     "iteration at most (default 2048; chunked 512)."),
          block_size: int = typer.Option(16, "--block-size", help="KV-cache block, tokens."),
          arrival: str = typer.Option("poisson", "--arrival", help="poisson | gamma."),
          burstiness: float = typer.Option(1.0, "--burstiness", help="Coefficient of variation "
                                           "of gamma inter-arrival gaps (>1: bursty)."),
          seed: int = typer.Option(0, "--seed", help="Seed of the synthetic trace."),
          slo_ttft: Optional[float] = typer.Option(None, "--slo-ttft", help="TTFT SLO for goodput, s."),
          slo_tpot: Optional[float] = typer.Option(None, "--slo-tpot", help="TPOT SLO for goodput, s."),
          accelerator: Optional[str] = AccelOpt, hw: Optional[list[str]] = HwOpt,
          system: Optional[str] = SystemOpt, devices: Optional[int] = DevicesOpt,
          sys_pairs: Optional[list[str]] = SysOpt, tp: int = TpOpt,
          pp: int = typer.Option(1, "--pp", help="Pipeline stages of a replica (batches in "
                                 "flight, one per stage)."),
          dp: int = typer.Option(1, "--dp", help="Replicas behind a router."),
          router: str = typer.Option("round_robin", "--router", help="round_robin | "
                                     "least_loaded (fewest outstanding requests)."),
          preemption: str = typer.Option("recompute", "--preemption", help="recompute | swap "
                                         "(KV to host memory over the host link)."),
          swap_space: Optional[str] = typer.Option(None, "--swap-space", help="Host swap "
                                                   "space per device, e.g. 4GiB (vLLM's default)."),
          memory_utilization: Optional[float] = typer.Option(
              None, "--memory-utilization", help="Share of device memory for weights, "
              "activations and KV cache (vLLM's gpu_memory_utilization; default 0.9)."),
          dtype: str = DtypeOpt, arch: Optional[list[str]] = ArchOpt,
          formats: Optional[str] = FormatsOpt,
          chrome_trace: Optional[Path] = typer.Option(None, "--chrome-trace", help="Write the "
                                                      "iterations as a Chrome trace (Perfetto)."),
          rates: Optional[str] = typer.Option(None, "--rates", help="Also serve the trace at "
                                              "each of these arrival rates, requests/s, e.g. "
                                              "5,10,20,40: throughput and p99 TTFT / TPOT "
                                              "against the rate (without --rate the detailed "
                                              "run is the highest)."),
          report: Optional[Path] = typer.Option(None, "--report", help="Write an HTML report "
                                                "(latency distributions, KV cache, batch and "
                                                "queue over time; throughput against rate "
                                                "with --rates)."),
          fidelity: str = FidelityOpt,
          economics: Optional[list[str]] = typer.Option(
              None, "--economics", help="Cost-per-token parameter KEY=VALUE (repeatable): "
              "utilisation (default: measured), amortisation_years, hardware_usd (default: "
              "the design's manufacturing cost), host_usd, host_w, pue, usd_per_kwh."),
          as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Serve a request trace: TTFT / TPOT / end-to-end percentiles, throughput, goodput,
    energy and cost per million tokens, KV-cache occupancy, preemptions."""
    from dse import api
    from dse.files import atomic_write_text, output_errors
    sweep_rates = api.check_rates(rates, "--rates") if rates is not None else None
    if sweep_rates and rate is None:
        rate = sweep_rates[-1]
    kw = dict(trace=trace, requests=requests, duration_s=duration, scheduler=scheduler,
              max_batch=max_batch, token_budget=token_budget, block_size=block_size,
              arrival=arrival, burstiness=burstiness, seed=seed, slo_ttft_s=slo_ttft,
              slo_tpot_s=slo_tpot, dtype=dtype, arch=parse_pairs(arch, "--arch") or None,
              formats=_formats_flag(formats, dtype),
              log_iterations=chrome_trace is not None, preemption=preemption, router=router,
              swap_space_bytes=(parse_bytes(swap_space, "--swap-space")
                                if swap_space is not None else None),
              memory_utilization=memory_utilization, fidelity=fidelity,
              economics=_economics(economics),
              **_target_args(accelerator, hw, system, devices, sys_pairs, tp, pp, dp))
    sweep = None
    what = f"serving {trace} on {system or accelerator or 'npu'}"
    with _busy(what) as status:
        kw["progress"] = lambda done, total: status.update(
            f"{what}: {done:,} of {total:,} requests done...")
        if sweep_rates:
            sweep = api.serve_sweep(model, sweep_rates, **kw)
        r = (sweep.results[sweep.rates.index(rate)] if sweep and rate in sweep.rates
             else api.serve(model, rate=rate, **kw))
    if chrome_trace:
        with output_errors("--chrome-trace", chrome_trace):
            atomic_write_text(chrome_trace, json.dumps(r.to_chrome_trace()))
    if report:
        from dse.report import write_serving_report
        with output_errors("--report", report):
            write_serving_report(r, report, sweep)
    if as_json:
        _print_json({**r.to_dict(), **({"sweep": sweep.to_dict()} if sweep else {})})
        return
    out.print(f"[bold]{model}[/] serving {r.trace} ({r.requests} requests, "
              f"{r.arrival_rate:.3g} req/s) on [bold]{system or accelerator or 'npu'}[/], "
              f"{r.scheduler['name']} batching (max {r.scheduler['max_batch']}, "
              f"{r.scheduler['token_budget']} tokens/iteration)")
    t = Table(box=None, padding=(0, 2))
    for col in ("", "p50", "p90", "p99", "mean"):
        t.add_column(col, justify="right" if col else "left")
    for name, d in (("TTFT", r.ttft_s), ("TPOT", r.tpot_s), ("end-to-end", r.e2e_s)):
        t.add_row(name, *(_si(d[k], "s") for k in ("p50", "p90", "p99", "mean")))
    out.print(t)
    good = (f"   goodput {r.goodput_req_s:.3g} req/s" if r.goodput_req_s is not None else "")
    good_run = (f", goodput {r.goodput_run_req_s:.3g} req/s" if r.goodput_run_req_s
                is not None else "")
    out.print(f"over the arrival window ({_si(r.window_s, 's')}): throughput "
              f"{r.throughput_tok_s:,.4g} tokens/s, {r.throughput_req_s:.3g} req/s{good}")
    out.print(f"over the whole run ({_si(r.span_s, 's')}): throughput "
              f"{r.throughput_run_tok_s:,.4g} tokens/s, {r.throughput_run_req_s:.3g} req/s"
              f"{good_run}   completed {r.completed}, rejected {r.rejected}")
    ec = r.economics
    per_h, par = ec["usd_per_hour"], ec["parameters"]
    out.print(f"energy {_si(r.energy_per_token_j, 'J')} per token   cost "
              f"${r.cost_per_mtok_usd:.3g} per million tokens at {100 * ec['utilisation']:.0f}% "
              f"utilisation: ${sum(per_h.values()):.3g}/h (hardware ${per_h['hardware']:.3g}, "
              f"host ${per_h['host']:.3g}, energy ${per_h['energy']:.3g} at PUE {par['pue']:g} "
              f"and ${par['usd_per_kwh']:g}/kWh; {par['amortisation_years']:g} years)")
    kv = r.kv_cache
    out.print(f"KV cache {kv['capacity_tokens']:,} tokens ({kv['blocks']:,} blocks of "
              f"{kv['block_size']}), peak {100 * kv['peak_occupancy']:.1f}% full   "
              f"preemptions {r.preemptions}"
              + (f" (swapped {r.swaps}, {_si(r.swapped_bytes, 'B')})" if r.swaps else "")
              + f"   iterations {r.iterations:,}   most running {r.max_running}")
    if sweep:
        t = Table(box=None, padding=(0, 1), title="against the arrival rate")
        for col in ("rate req/s", "tokens/s", "served req/s", "p99 TTFT", "p99 TPOT",
                    "preempted", "rejected"):
            t.add_column(col, justify="right")
        for row in sweep.rows():
            t.add_row(f"{row['rate_req_s']:g}", f"{row['throughput_tok_s']:,.0f}",
                      f"{row['throughput_req_s']:,.4g}", _si(row["ttft_p99_s"], "s"),
                      _si(row["tpot_p99_s"], "s"), str(row["preemptions"]),
                      str(row["rejected"]))
        out.print(t)
    if chrome_trace:
        out.print(f"trace: {chrome_trace}")
    if report:
        out.print(f"report: {report}")


def parse_bytes(text: str, field: str = "--bytes") -> float:
    """``256MiB``, ``4 KiB``, ``1GB``, ``1e6`` -> bytes; a BadInput naming ``field`` else."""
    units = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10,
             "mib": 2**20, "gib": 2**30, "tib": 2**40, "k": 2**10, "m": 2**20, "g": 2**30}
    t = text.strip().lower().replace(" ", "")
    i = len(t)
    while i > 0 and t[i - 1].isalpha():
        i -= 1
    try:
        value = float(t[:i]) * units[t[i:]]
    except (ValueError, KeyError):
        raise BadInput(field, text, "expected a size like 4096, 256MiB, 1GiB or 512KB") from None
    if not (value >= 0 and value < 2**50):
        raise BadInput(field, text, "expected a size between 0 and 1 PiB")
    return value


# ----------------------------------------------------------------------------- systems
@app.command()
def systems(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """System presets: devices, topology, links, and the system's cost and power."""
    from dse import api
    rows = api.systems()
    if as_json:
        _print_json(rows)
        return
    t = Table(title="Systems")
    for col in ("system", "device", "topology", "link", "cost", "TDP"):
        t.add_column(col)
    for s in rows:
        topo = s["topology"]
        t.add_row(s["name"], f"{s['sys']['devices']}x {s['device']}",
                  topo["kind"] + (" " + "x".join(map(str, topo["shape"])) if topo["shape"] else ""),
                  f"{topo['links_per_device']}x {topo['link']}", f"${s['cost_usd']:,.0f}",
                  _si(s["tdp_w"], "W"))
    out.print(t)
    for s in rows:
        out.print(f"  {s['name']}: {s['description']}")
    from accelerators.system import SYSTEM_PARAMS
    p = Table(title="system parameters (--sys KEY=VALUE)", box=None, padding=(0, 2))
    for col in ("param", "unit", "default", "allowed", "description"):
        p.add_column(col)
    for prm in SYSTEM_PARAMS:
        d = prm.to_dict()
        allowed = (", ".join(map(str, d["choices"])) if d["choices"]
                   else f"[{d['low']:g}, {d['high']:g}]" if d["low"] is not None else "")
        p.add_row(d["name"], d["unit"], str(d["default"]), allowed, d["description"])
    out.print(p)


@app.command()
def collective(kind: str = typer.Argument(..., help="all_reduce | all_gather | reduce_scatter | "
                                                    "all_to_all | broadcast | send_recv"),
               nbytes: str = typer.Option(..., "--bytes", help="Size, e.g. 256MiB (nccl-tests' convention)."),
               system: str = typer.Option("hgx-h200", "--system", help="System preset."),
               devices: Optional[int] = typer.Option(None, "--devices", help="Devices taking part (default: the preset's)."),
               algorithm: Optional[str] = typer.Option(None, "--algorithm", help="auto | nccl | ring | tree | direct | two_shot | switch_reduce | torus | hierarchical (default: the system's)."),
               sys_pairs: Optional[list[str]] = typer.Option(None, "--sys", help="System parameter KEY=VALUE (repeatable)."),
               call: str = typer.Option("device", "--call", help="device (time on the GPUs) | eager_b2b | eager_call | graph_b2b | graph_call (issued from PyTorch, with the link's measured per-call latency)."),
               as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Time, algorithm and bus bandwidth of one collective on a system."""
    from dse import api
    sysm = api.system(system, devices, sys=parse_pairs(sys_pairs, "--sys"))
    c = api.collective(kind, parse_bytes(nbytes), sysm, algorithm=algorithm, call=call)
    d = {**c.to_dict(), "system": system, "devices": sysm.devices}
    if as_json:
        _print_json(d)
        return
    out.print(f"{kind} of {_si(c.nbytes, 'B')} on {sysm.devices} devices of {system}: "
              f"{_si(c.time_s, 's')} ({c.algorithm}, {c.protocol})   bus bandwidth "
              f"{_si(c.bus_bandwidth_Bps, 'B/s')}   algorithm bandwidth {_si(c.algbw_Bps, 'B/s')}")


# ----------------------------------------------------------------------------- reproduce
@app.command()
def reproduce(name: str = typer.Argument(..., help="pim-gpt | neupims | ngpc | waferllm | gna | "
                                          "nasaic | formats | melange | distserve | speculative | "
                                          "megatron"),
              as_json: bool = typer.Option(False, "--json", help='Print {"rows": [...]}.'),
              gpu_hw: Optional[list[str]] = typer.Option(
                  None, "--gpu-hw", help="GPU baseline KEY=VALUE (pim-gpt), e.g. runtime=eager "
                  "host_profile=FILE (repeatable).")) -> None:
    """Reproduce a seed paper's headline numbers: metric, paper, ours, ratio."""
    from dse.reproduce import run_reproduction
    from dse.reproduce.table import summary
    rows = run_reproduction(name, parse_pairs(gpu_hw, "--gpu-hw"))
    counts = summary(rows)
    if as_json:
        _print_json({"rows": [r.to_dict() for r in rows], "summary": counts})
        return
    t = Table(title=f"reproduction: {name}")
    for col in ("metric", "source", "paper", "ours", "ratio", "ok"):
        t.add_column(col)
    for r in rows:
        t.add_row(r.metric, r.source, r.paper_text(), f"{r.ours:.4g}", f"{r.ratio:.3f}",
                  "fitted" if r.fitted else ("yes" if r.within() else "NO"))
    out.print(t)
    tols = sorted({r.tolerance for r in rows if not r.fitted}) or [0.35]
    out.print(f"{counts['within']} of {counts['predictions']} predictions within "
              + " / ".join(f"+-{100 * t:g} %" for t in tols)
              + (f" ({counts['fitted']} fitted rows not counted)" if counts["fitted"] else ""))


# ----------------------------------------------------------------------------- fleets, pools
from dse.serving_cli import COMMANDS as _SERVING_COMMANDS  # noqa: E402

for _name, _command in _SERVING_COMMANDS:
    app.command(_name)(_command)


# ----------------------------------------------------------------------------- calibrate
@calibrate_app.command("gpu")
def calibrate_gpu(out_file: Path = typer.Option(Path("gpu_calibration.json"), "--out",
                                                help="Calibration file to write."),
                  quick: bool = typer.Option(False, "--quick", help="A smaller grid (~1 min).")) -> None:
    """Microbenchmark this machine's CUDA GPU and fit the gpu template to it."""
    from dse.calibrate import calibrate_gpu as run
    cal = run(out_file, quick=quick)
    out.print(f"calibration: {out_file}  (load with --hw calibration={out_file})")
    held = cal.get("heldout_error", cal.get("heldout"))
    if held:
        out.print(f"held-out error: {held}")


# ----------------------------------------------------------------------------- entry point
def main(argv: list[str] | None = None) -> None:
    """Run the CLI: user errors become one line on stderr and exit code 2."""
    try:
        app(args=argv, standalone_mode=False, prog_name="dse")
    except DSEError as exc:
        _fail(str(exc))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("error: interrupted\n")
        sys.exit(130)
    except click_exc.NoArgsIsHelpError as exc:
        sys.stdout.write(exc.format_message() + "\n")
        sys.exit(0)
    except click_exc.ClickException as exc:
        _fail(exc.format_message().replace("\n", " "))
    except OSError as exc:  # the machine refused (a full disk, no permission, a missing path)
        _fail(f"{exc.filename}: {exc.strerror}" if exc.filename else first_line(exc))
    except SystemExit as exc:  # dse's own commands never exit: user code or a plugin did
        module = _exiting_module(exc)
        if module.split(".")[0] in _OWN_EXITS:
            raise
        _fail(f"module {module} called sys.exit({exc.code!r}) while dse ran it; a factory, "
              "quality function or plugin must return or raise, not exit")


#: Packages whose ``sys.exit`` is the CLI's own (rich on a closed pipe, click, typer, dse).
_OWN_EXITS = {"dse", "accelerators", "workloads", "simulators", "rich", "click", "typer"}


def _exiting_module(exc: BaseException) -> str:
    """The module whose code raised ``exc`` (the innermost frame's), for the message."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_globals.get("__name__", "?") if tb is not None else "?"


def _fail(message: str) -> None:
    sys.stderr.write(f"error: {message}\n")
    sys.exit(2)


__all__ = ["app", "main", "parse_pairs"]
