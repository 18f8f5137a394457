"""``dse train``: one training step of a model on a design or a system (``dse.api.train``),
printed as text or JSON, with a Chrome trace and an HTML report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from dse.errors import BadInput


def train_command(
        model: Optional[str] = typer.Argument(None, help="Zoo model name; omit with --hf-config "
                                                          "or --module."),
        hf_config: Optional[Path] = typer.Option(None, "--hf-config", help="A Hugging Face "
                                                 "config.json (trained with its task head)."),
        module: Optional[str] = typer.Option(None, "--module", help="Your own model: "
                                             "package.module:factory returning (nn.Module, "
                                             "inputs); give --loss unless forward returns it."),
        loss: Optional[str] = typer.Option(None, "--loss", help="cross_entropy | mse (your own "
                                           "module only)."),
        accelerator: Optional[str] = typer.Option(None, "--accelerator", "-a",
                                                  help="template[:preset] (default npu)."),
        hw: Optional[list[str]] = typer.Option(None, "--hw", help="Hardware KEY=VALUE."),
        system: Optional[str] = typer.Option(None, "--system", help="System preset."),
        devices: Optional[int] = typer.Option(None, "--devices", help="Devices (default: "
                                              "dp x tp x pp x cp)."),
        sys_pairs: Optional[list[str]] = typer.Option(None, "--sys", help="System KEY=VALUE."),
        dp: int = typer.Option(1, "--dp", help="Data-parallel replicas."),
        tp: int = typer.Option(1, "--tp", help="Tensor-parallel ranks."),
        pp: int = typer.Option(1, "--pp", help="Pipeline stages."),
        cp: int = typer.Option(1, "--cp", help="Context-parallel ranks."),
        sp: bool = typer.Option(False, "--sp", help="Sequence parallelism (with --tp)."),
        zero: int = typer.Option(0, "--zero", help="ZeRO stage 0-3 (3 = FSDP)."),
        schedule: str = typer.Option("1f1b", "--schedule", help="1f1b | interleaved | gpipe."),
        chunks: int = typer.Option(1, "--chunks", help="Model chunks per stage (interleaved)."),
        recompute: str = typer.Option("none", "--recompute", help="none | selective | full."),
        micro_batch: int = typer.Option(1, "--micro-batch", help="Samples per micro-batch."),
        global_batch: int = typer.Option(0, "--global-batch", help="Samples per step (0: dp x "
                                         "micro-batch)."),
        seq: Optional[int] = typer.Option(None, "--seq", help="Sequence length."),
        arch: Optional[list[str]] = typer.Option(None, "--arch", help="Architecture KEY=VALUE."),
        precision: str = typer.Option("mixed", "--precision", help="mixed | mixed-fp32-grads | "
                                      "amp | bf16 | fp32 | fp8 (the blocks' GEMMs in FP8, "
                                      "Transformer Engine's recipe); ROLE=FORMAT pairs may "
                                      "follow: mixed,gemm=nvfp4."),
        optimizer: str = typer.Option("adamw", "--optimizer", help="adamw | adam | momentum | "
                                      "sgd."),
        optimizer_impl: str = typer.Option("fused", "--optimizer-impl", help="fused | foreach "
                                           "| for-loop."),
        offload_optimizer: str = typer.Option("none", "--offload-optimizer",
                                              help="none | host | nvme."),
        offload_params: str = typer.Option("none", "--offload-params", help="none | host | "
                                           "nvme (zero 3)."),
        host: Optional[str] = typer.Option(None, "--host", help="Host preset (offload)."),
        bucket_mb: float = typer.Option(25.0, "--bucket-mb", help="Gradient bucket, MB."),
        tokens: float = typer.Option(0.0, "--tokens", help="Tokens to train: time, cost, "
                                     "energy."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
        trace: Optional[Path] = typer.Option(None, "--trace", help="Write a Chrome trace."),
        report: Optional[Path] = typer.Option(None, "--report", help="Write an HTML report.")
) -> None:
    """Simulate one training step: step time, tokens/s, MFU/HFU, memory per device,
    time / cost / energy to train --tokens, timeline."""
    from dse import api
    from dse.cli import _busy, _print_json, _si, out, parse_pairs
    from dse.files import atomic_write_text, output_errors
    if sum(x is not None for x in (model, hf_config, module)) != 1:
        raise BadInput("model", model, "exactly one of a zoo model, --hf-config or --module")
    inputs = mod = None
    if module:
        from workloads.user_module import load_factory
        mod, args, kwargs = load_factory(module)
        inputs = kwargs if kwargs and not args else args
    parallel = {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "sp": sp, "zero": zero,
                "schedule": schedule, "chunks": chunks, "recompute": recompute,
                "bucket_mb": bucket_mb, "offload_optimizer": offload_optimizer,
                "offload_params": offload_params}
    with _busy("capturing and simulating the training step"):
        r = api.train(mod if mod is not None else model, accelerator=accelerator,
                      hw=parse_pairs(hw, "--hw") or None, system=system, devices=devices,
                      sys=parse_pairs(sys_pairs, "--sys") or None, parallel=parallel,
                      micro_batch=micro_batch, global_batch=global_batch or None, seq=seq,
                      arch=parse_pairs(arch, "--arch") or None,
                      hf_config=str(hf_config) if hf_config else None, inputs=inputs,
                      loss=loss, precision=precision, optimizer=optimizer,
                      optimizer_impl=optimizer_impl, host=host, train_tokens=tokens)
    if trace:
        with output_errors("--trace", trace):
            atomic_write_text(trace, json.dumps(r.to_chrome_trace()))
    if report:
        from dse.report.training import write_training_report
        with output_errors("--report", report):
            write_training_report(r, report)
    if as_json:
        _print_json(r.to_dict())
        return
    lay = r.layout
    out.print(f"[bold]{r.model}[/] training step on {r.devices} x "
              f"{r.device.get('template')}{':' + r.device['preset'] if r.device.get('preset') else ''}"
              f" — dp {lay['dp']} tp {lay['tp']} pp {lay['pp']} cp {lay['cp']}"
              f"{' sp' if lay['sp'] else ''} zero {lay['zero']}, {r.microbatches} x "
              f"{lay['micro_batch']} samples, recompute {lay['recompute']}, {lay['schedule']}")
    unit = "tokens/s" if r.tokens_per_step != r.samples_per_step else "samples/s"
    out.print(f"step {_si(r.step_time_s, 's')}   {r.tokens_per_s:,.4g} {unit}   "
              f"MFU {100 * r.mfu:.1f}%   HFU {100 * r.hfu:.1f}%   bubble "
              f"{100 * r.bubble_fraction:.1f}%   energy/step {_si(r.energy_per_step_j, 'J')}")
    out.print("time: " + "  ".join(f"{k[:-2].replace('_', ' ')} {_si(v, 's')}"
                                   for k, v in r.breakdown_s.items() if k.endswith("_s") and v))
    for i, m in enumerate(r.memory):
        out.print(f"memory stage {i}: {_si(sum(m.values()), 'B')} of "
                  f"{_si(r.capacity_of(i), 'B')} — " + "  ".join(
                      f"{k.replace('_', ' ')} {_si(v, 'B')}" for k, v in m.items() if v))
    if r.host_memory_bytes:
        out.print("offloaded per node: " + "  ".join(f"{k} {_si(v, 'B')}"
                                                     for k, v in r.host_memory_bytes.items()))
    t = r.to_train()
    if t:
        out.print(f"train {t['tokens']:.4g} tokens: {t['steps']:,} steps, {t['time_days']:.3g} "
                  f"days, ${t['cost_usd']:,.4g} (system ${r.system_cost_usd:,.0f} over "
                  f"{r.lifetime_years:g} years + ${r.usd_per_kwh:g}/kWh), "
                  f"{t['energy_mwh']:.4g} MWh")
    if trace:
        out.print(f"trace: {trace}")
    if report:
        out.print(f"report: {report}")
