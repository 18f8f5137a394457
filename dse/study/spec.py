"""The study file's schema, as pydantic models (``dse study schema`` prints their JSON Schema).

A study file is YAML; :mod:`dse.study.loader` reads it with ``yaml.safe_load``, validates it
against :class:`StudySpec`, then checks it against the templates and the model zoo. Shapes that
depend on a template's parameters (search ranges) or on the metrics (objectives, constraints) are
kept loose here and checked by :mod:`dse.study.space` and :mod:`dse.study.objectives`, which
know what is allowed and say so in one line.
"""

from __future__ import annotations

import typing
from typing import Any, Literal, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, ValidationInfo, WithJsonSchema,
                      field_validator)
from typing_extensions import Annotated

#: Names a study, a workload or a sub-accelerator may take (they become parameter-name parts).
IDENTIFIER = r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$"

#: Element types a workload may be captured in (mirrors ``workloads.ir.DTYPE_BYTES``).
DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8")

#: Samplers ``sampler.name`` may pick (Optuna's).
SAMPLERS = ("tpe", "nsga2", "nsga3", "gp", "random", "grid", "qmc", "cmaes",
            "nsga2-vectorized")


def _numeric_kind(annotation: Any) -> str | None:
    """"an int" or "a number" for a field that holds only numbers (and None), else None."""
    kinds: set[Any] = set()

    def walk(a: Any) -> None:
        args = typing.get_args(a)
        if typing.get_origin(a) is Annotated:
            walk(args[0])
        elif args and typing.get_origin(a) is Union:
            for x in args:
                walk(x)
        else:
            kinds.add(a)
    walk(annotation)
    kinds.discard(type(None))
    if kinds == {int}:
        return "an int"
    if kinds and kinds <= {int, float}:
        return "a number"
    return None


class _Strict(BaseModel):
    """Unknown keys are errors; values are not silently converted between kinds (``true`` or
    ``"3"`` is not a number)."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_numbers(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, (bool, str)):
            kind = _numeric_kind(cls.model_fields[info.field_name].annotation)
            if kind is not None:
                raise ValueError(f"expected {kind}" + (", not true/false" if isinstance(v, bool)
                                                       else ""))
        return v


class WorkloadSpec(_Strict):
    """One workload of the study: a zoo model in one phase and size. Several make a multi-task
    study; ``weight`` is how many runs of it one multi-task step makes (it scales its latency
    and energy in the totals)."""

    model: str = Field(description="zoo model name (see `dse models`)")
    name: Optional[Annotated[str, Field(pattern=IDENTIFIER)]] = Field(
        None, description="label (default: the model name); names per-workload metrics "
                          "such as `resnet18.latency_s`")
    phase: Optional[str] = Field(None, description="prefill | decode | forward (default: the "
                                                   "model's first phase)")
    batch: Optional[Annotated[int, Field(ge=1, le=2**31)]] = Field(None, description="batch size")
    seq: Optional[Annotated[int, Field(ge=1, le=2**31)]] = Field(
        None, description="sequence length, tokens (prefill, encoders)")
    context: Optional[Annotated[int, Field(ge=1, le=2**31)]] = Field(
        None, description="KV-cache length, tokens (decode)")
    dtype: Literal[DTYPES] = Field("bf16", description="element type of the captured graph")
    formats: Optional[dict[str, str]] = Field(
        None, description="number format per tensor role (weights, activations, kv, head, "
                          "attention; workloads.formats), e.g. {weights: int4_g128}; roles not "
                          "given stay in dtype")
    weight: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        1.0, description="runs per multi-task step (scales latency and energy in the totals)")

    @property
    def label(self) -> str:
        return self.name or self.model


Scalar = Union[bool, int, float, str]


class AcceleratorSpec(_Strict):
    """A template with an optional preset and fixed parameter values."""

    template: str = Field(description="template name (see `dse accelerators`)")
    preset: Optional[str] = Field(None, description="preset name (default: the template's)")
    hw: dict[str, Scalar] = Field(default_factory=dict,
                                  description="fixed parameter values (not searched)")


class NamedAcceleratorSpec(AcceleratorSpec):
    """A named template: one alternative of ``accelerators`` or one of ``sub_accelerators``."""

    name: Annotated[str, Field(pattern=IDENTIFIER)] = Field(
        description="label; prefixes its parameters in `search.hardware` (`NAME.rows`)")


class SystemSpec(_Strict):
    """The design runs as the devices of a system (see `dse systems`): a preset's interconnect
    and fixed system parameters, and a fixed parallel layout; ``search.system`` and
    ``search.parallel`` search the rest. The device count is the layout's
    (tp x pp x ep x dp) unless ``sys.devices`` is given."""

    preset: Optional[str] = Field(None, description="system preset whose interconnect the "
                                                    "design's devices use (its device is "
                                                    "replaced by the study's accelerator)")
    sys: dict[str, Scalar] = Field(default_factory=dict,
                                   description="fixed system parameters (see `dse systems`)")
    parallel: dict[str, Scalar] = Field(
        default_factory=dict, description="fixed layout: tp, pp, ep, dp, sequence_parallel, "
                                          "microbatches, ep_imbalance")


#: Schedulers a serving study may name (mirrors ``simulators.schedulers.SCHEDULERS``).
SCHEDULERS = ("continuous", "chunked", "static")


class ServingSpec(_Strict):
    """Serve a request trace instead of timing one workload (see `dse serve`): each design is
    scored by a serving simulation, with metrics ``ttft_p99_s``, ``tpot_p99_s``,
    ``throughput_tok_s``, ``cost_per_mtok_usd`` and more (docs/study.md, "Serving")."""

    model: str = Field(description="zoo model name (an LLM; see `dse models`)")
    trace: Annotated[str, Field(min_length=1, max_length=4096)] = Field(
        "sharegpt", description="sharegpt | alpaca (synthetic lengths like those datasets) or "
                                "a CSV file (arrival_s, input_len, output_len)")
    rate: Optional[Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]] = Field(
        None, description="arrivals, requests/s (required for sharegpt / alpaca)")
    requests: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        1000, description="requests served per design")
    arrival: Literal["poisson", "gamma"] = Field("poisson", description="arrival process")
    burstiness: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)] = Field(
        1.0, description="coefficient of variation of gamma inter-arrival gaps")
    seed: Annotated[int, Field(ge=0, lt=2**32)] = Field(0, description="trace seed")
    scheduler: Literal[SCHEDULERS] = Field("continuous", description="continuous (vLLM, "
                                           "prefill first) | chunked (Sarathi) | static")
    max_batch: Annotated[int, Field(ge=1, le=65536)] = Field(256, description="requests "
                                                             "running at most")
    token_budget: Optional[Annotated[int, Field(ge=1, le=65536)]] = Field(
        None, description="tokens per iteration at most (default 2048; chunked 512)")
    slo_ttft_s: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        None, description="TTFT objective for goodput_req_s, s")
    slo_tpot_s: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        None, description="TPOT objective for goodput_req_s, s")
    dtype: Literal[DTYPES] = Field("bf16", description="element type of the model")
    formats: Optional[dict[str, str]] = Field(
        None, description="number format per tensor role (weights, activations, kv, head, "
                          "attention; workloads.formats), e.g. {weights: int4_g128}; roles not "
                          "given stay in dtype")
    economics: Optional["EconomicsSpec"] = Field(
        None, description="cost_per_mtok_usd's parameters (simulators/economics.py; "
                          "docs/validation.md, 'Cost per token')")


class EconomicsSpec(_Strict):
    """The parameters of ``cost_per_mtok_usd`` (:mod:`simulators.economics`; None: the
    documented default)."""

    utilisation: Optional[Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]] = Field(
        None, description="share of hours the accelerator serves (default: what the run "
                          "measured)")
    amortisation_years: Optional[Annotated[float, Field(ge=0.1, le=50, allow_inf_nan=False)]] = \
        Field(None, description="years the hardware and host are paid off over (default 5)")
    hardware_usd: Optional[Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)]] = Field(
        None, description="what the accelerator costs, US$ (default: its manufacturing cost)")
    host_usd: Optional[Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)]] = Field(
        None, description="host server share per accelerator, US$ (default 4,000)")
    host_w: Optional[Annotated[float, Field(ge=0, le=1e5, allow_inf_nan=False)]] = Field(
        None, description="host power per accelerator, W (default 575)")
    pue: Optional[Annotated[float, Field(ge=1, le=5, allow_inf_nan=False)]] = Field(
        None, description="power usage effectiveness (default 1.58)")
    usd_per_kwh: Optional[Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)]] = Field(
        None, description="electricity, US$/kWh (default 0.0806)")


ServingSpec.model_rebuild()


class PoolSpec(_Strict):
    """A fixed part of a disaggregated pool (``search.pools`` searches the rest)."""

    count: Optional[Annotated[int, Field(ge=1, le=4096)]] = Field(
        None, description="instances (default 1; a pool of zero devices serves nothing)")
    tp: Optional[Annotated[int, Field(ge=1, le=64)]] = Field(
        None, description="tensor-parallel devices per instance (default 1)")
    device: Optional[str] = Field(None, description="the accelerator (its name in "
                                                    "`accelerators`) the pool's devices are")
    max_batch: Annotated[int, Field(ge=1, le=65536)] = Field(256, description="requests per "
                                                             "iteration at most")
    token_budget: Annotated[int, Field(ge=1, le=65536)] = Field(
        2048, description="prompt tokens per prefill iteration at most")


class DisaggregatedSpec(_Strict):
    """Serve a trace on a prefill pool and a decode pool joined by a link (see `dse
    disaggregate`): pools of the study's accelerators, their counts, devices and tensor
    parallelism fixed here or searched in `search.pools` (docs/study.md, "Disaggregated
    serving")."""

    model: str = Field(description="zoo model name (an LLM)")
    trace: Annotated[str, Field(min_length=1, max_length=4096)] = Field(
        "sharegpt", description="sharegpt | alpaca | arena | pubmed | mixed, or a CSV file")
    rate: Optional[Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]] = Field(
        None, description="arrivals, requests/s (required for synthetic lengths)")
    requests: Annotated[int, Field(ge=1, le=1_000_000)] = Field(300, description="requests "
                                                                "served per design")
    seed: Annotated[int, Field(ge=0, lt=2**32)] = Field(0, description="trace seed")
    slo_ttft_s: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        None, description="TTFT objective, s")
    slo_tpot_s: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        None, description="TPOT objective, s")
    link: str = Field("nvlink4", description="link standard between the pools")
    links: Annotated[int, Field(ge=1, le=1024)] = Field(1, description="links between the "
                                                        "pools")
    prefill: PoolSpec = Field(default_factory=PoolSpec, description="the prefill pool")
    decode: PoolSpec = Field(default_factory=PoolSpec, description="the decode pool")
    dtype: Literal[DTYPES] = Field("bf16", description="element type of the model")


class MenuEntrySpec(_Strict):
    """One device type a fleet may buy."""

    name: Annotated[str, Field(pattern=IDENTIFIER)] = Field(description="its label")
    accelerator: str = Field(description="template:preset, e.g. gpu:l4")
    price_usd_per_h: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)] = Field(
        description="US$ per instance-hour")


class FleetSpec(_Strict):
    """The study's accelerator joins a menu of priced devices; each design is scored by the
    cheapest fleet (Mélange's integer program, see `dse fleet`) that serves the traffic within
    the SLOs (docs/study.md, "Fleets")."""

    model: str = Field(description="zoo model name (an LLM)")
    trace: Annotated[str, Field(min_length=1, max_length=4096)] = Field(
        "arena", description="arena | pubmed | mixed | sharegpt | alpaca, or a CSV file")
    rate: Optional[Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]] = Field(
        None, description="arrivals, requests/s (required for synthetic lengths)")
    requests: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        500, description="requests simulated to confirm a fleet (with confirm)")
    seed: Annotated[int, Field(ge=0, lt=2**32)] = Field(0, description="trace seed")
    slo_ttft_s: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        None, description="TTFT objective, s")
    slo_tpot_s: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        None, description="TPOT objective, s")
    menu: Annotated[list[MenuEntrySpec], Field(min_length=1, max_length=32)] = Field(
        description="the device types the fleet may also buy")
    price_usd_per_h: Optional[Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]] = \
        Field(None, description="the designed accelerator's price, US$/h (default: priced "
                                "like `price_basis`)")
    price_basis: Optional[str] = Field(
        None, description="a menu entry: the design is priced at that entry's price times "
                          "the ratio of their manufacturing cost + energy (default: the first)")
    confirm: bool = Field(False, description="simulate each fleet on the trace (slow)")
    dtype: Literal[DTYPES] = Field("bf16", description="element type of the model")


class TrainingSpec(_Strict):
    """Score each design by one training step of the (one) workload's model (see `dse
    train`): a system with a training layout (``search.parallel``: dp, tp, pp, cp, sp, zero,
    micro_batch, recompute, schedule, chunks, ...), with metrics ``step_time_s``,
    ``tokens_per_s``, ``mfu``, ``peak_memory_bytes``, ``train_time_days``,
    ``train_cost_usd`` and more (docs/study.md, "Training"). A layout whose memory does not
    fit a device is a pruned trial with the numbers."""

    tokens: Annotated[float, Field(gt=0, le=1e16, allow_inf_nan=False)] = Field(
        description="tokens to train: the time, cost and energy metrics are for these")
    global_batch: Annotated[int, Field(ge=1, le=2**24)] = Field(
        description="samples (sequences) per optimizer step")
    precision: Literal["mixed", "mixed-fp32-grads", "amp", "bf16", "fp32", "fp8"] = Field(
        "mixed", description="precision of each tensor role (see `dse train --precision`)")
    optimizer: Literal["adamw", "adam", "momentum", "sgd"] = Field("adamw")
    optimizer_impl: Literal["fused", "foreach", "for-loop"] = Field("fused")
    host: Optional[str] = Field(None, description="host preset for offload (accelerators/host.py)")


class BudgetsSpec(_Strict):
    """Shared budgets of a heterogeneous design (constraints on the sum over sub-accelerators)."""

    total_pes: Optional[Annotated[int, Field(ge=1)]] = Field(
        None, description="processing elements summed over the sub-accelerators "
                          "(rows x cols x arrays)")
    total_bandwidth_Bps: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        None, description="off-chip bandwidth summed over the sub-accelerators, B/s")


class AssignmentSpec(_Strict):
    """How each workload's ops are split for assignment to sub-accelerators."""

    segments: Annotated[int, Field(ge=1, le=64)] = Field(
        1, description="contiguous segments (equal FLOPs, in topological order) per workload; "
                       "each is assigned to a sub-accelerator by a searched categorical")


_RANGE_SCHEMA = {
    "description": "null (the declared range), a value (fixed), [low, high] (numbers), "
                   "a list of choices (categorical parameters), or "
                   "{low, high, log, step} / {choices: [...]}",
    "anyOf": [
        {"type": "null"}, {"type": ["number", "string", "boolean"]},
        {"type": "array", "items": {"type": ["number", "string", "boolean"]}},
        {"type": "object", "additionalProperties": False,
         "properties": {"low": {"type": "number"}, "high": {"type": "number"},
                        "log": {"type": "boolean"}, "step": {"type": "number"},
                        "choices": {"type": "array"}}},
    ],
}

#: A search range; its shape depends on the parameter, so :mod:`dse.study.space` checks it.
RangeValue = Annotated[Any, WithJsonSchema(_RANGE_SCHEMA)]


class SearchSpec(_Strict):
    """What the search may change. Keys not listed keep their fixed or default value."""

    hardware: Annotated[Any, WithJsonSchema({
        "description": "template parameter -> range (`NAME.param` with several accelerators), "
                       "or a list of parameter names searched over their declared ranges",
        "anyOf": [{"type": "object", "additionalProperties": _RANGE_SCHEMA},
                  {"type": "array", "items": {"type": "string"}}]})] = Field(default_factory=dict)
    architecture: Annotated[Any, WithJsonSchema({
        "description": "zoo architecture key -> range (`WORKLOAD.key` with several workloads)",
        "anyOf": [{"type": "object", "additionalProperties": _RANGE_SCHEMA},
                  {"type": "array", "items": {"type": "string"}}]})] = Field(default_factory=dict)
    system: Annotated[Any, WithJsonSchema({
        "description": "system parameter -> range (with `system`)",
        "anyOf": [{"type": "object", "additionalProperties": _RANGE_SCHEMA},
                  {"type": "array", "items": {"type": "string"}}]})] = Field(default_factory=dict)
    parallel: Annotated[Any, WithJsonSchema({
        "description": "layout key (tp, pp, ep, dp, sequence_parallel, microbatches, "
                       "ep_imbalance) -> range (with `system`)",
        "anyOf": [{"type": "object", "additionalProperties": _RANGE_SCHEMA},
                  {"type": "array", "items": {"type": "string"}}]})] = Field(default_factory=dict)
    pools: Annotated[Any, WithJsonSchema({
        "description": "pool key (prefill_count, decode_count, prefill_tp, decode_tp, "
                       "prefill_device, decode_device) -> range (with `disaggregated`)",
        "anyOf": [{"type": "object", "additionalProperties": _RANGE_SCHEMA},
                  {"type": "array", "items": {"type": "string"}}]})] = Field(default_factory=dict)
    formats: Annotated[Any, WithJsonSchema({
        "description": "tensor role (weights, activations, kv, head, attention) -> a format or "
                       "a list of formats to choose from (every workload's tensors of that "
                       "role; workloads.formats), or a list of whole role -> format mappings "
                       "to choose from (one categorical, `fmt.scheme`)",
        "anyOf": [{"type": "object", "additionalProperties": {
            "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}},
                      {"type": "object", "properties": {"choices": {"type": "array"}}}]}},
            {"type": "array", "items": {"type": "object",
                                        "additionalProperties": {"type": "string"}}}]})] = \
        Field(default_factory=dict)


_OBJECTIVE_SCHEMA = {
    "description": "a metric (its usual direction) or {metric: minimize | maximize}",
    "anyOf": [{"type": "string"},
              {"type": "object", "maxProperties": 1,
               "additionalProperties": {"enum": ["minimize", "maximize", "min", "max"]}}],
}
_CONSTRAINT_SCHEMA = {
    "description": "'metric <= value', 'metric < value', 'metric >= value', 'metric > value', or {metric, op, value}",
    "anyOf": [{"type": "string"},
              {"type": "object", "additionalProperties": False,
               "required": ["metric", "op", "value"],
               "properties": {"metric": {"type": "string"}, "op": {"enum": ["<=", "<", ">=", ">"]},
                              "value": {"type": "number"}}}],
}


class QualitySpec(_Strict):
    """How ``quality`` is computed (see docs/study.md, "Quality")."""

    python: Optional[Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")]] = Field(
        None, description="`package.module:function`: called with the architecture parameters "
                          "(a dict), returns the quality (higher is better)")
    tokens: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        None, description="LLM training tokens for the Chinchilla loss (default: "
                          "tokens_per_param x parameters)")
    tokens_per_param: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        20.0, description="LLM training tokens per parameter when `tokens` is not given")
    steps: Annotated[int, Field(ge=1, le=100000)] = Field(
        200, description="neural fields: optimiser steps of the image fit")
    source: Literal["proxy", "published"] = Field(
        "proxy", description="proxy: the family's built-in proxy; published: measured top-1 of "
                             "trained networks from a table (`quality: published` for short)")
    table: Optional[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        None, description="with source published: a JSON accuracy table (default: the shipped "
                          "ImageNet top-1 table; for LLMs the format-quality table)")
    method: Optional[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        None, description="with source published on an LLM in number formats: the "
                          "quantisation method of the published result (RTN, GPTQ, AWQ, ...; "
                          "default: the best published for the formats)")


class SamplerSpec(_Strict):
    """The Optuna sampler and its few settings."""

    name: Literal[SAMPLERS] = Field("tpe", description="tpe | nsga2 | nsga3 | gp | random | "
                                                       "grid | qmc | cmaes (one objective) | "
                                                       "nsga2-vectorized (whole generations)")
    n_startup_trials: Optional[Annotated[int, Field(ge=0, le=100000)]] = Field(
        None, description="tpe, gp, cmaes: random trials before the model is used")
    population_size: Optional[Annotated[int, Field(ge=2, le=100000)]] = Field(
        None, description="nsga2, nsga3, nsga2-vectorized: population size")
    grid_points: Annotated[int, Field(ge=2, le=1000)] = Field(
        5, description="grid: points per float range without a step")
    operators: Literal["numpy", "evox"] = Field(
        "numpy", description="nsga2-vectorized: NSGA-II's selection, crossover and mutation "
        "from this package (numpy) or from EvoX (evox; pip install 'accel-dse[evox]')")
    device: Optional[Literal["cpu", "torch", "cuda", "auto"]] = Field(
        None, description="nsga2-vectorized at fidelity fast: where a generation's npu designs "
        "are costed as arrays (cpu: numpy; torch: its CPU build; cuda: the GPU; auto: CUDA "
        "when present, else numpy); unset: the fast path design by design")


class StudySpec(_Strict):
    """A co-search study: workloads, accelerator(s), search space, objectives, constraints."""

    name: Annotated[str, Field(pattern=IDENTIFIER)] = Field(description="study name")
    description: str = ""
    seed: Annotated[int, Field(ge=0, lt=2**32)] = Field(0, description="sampler seed")
    output: Optional[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        None, description="output directory (default runs/NAME)")
    workloads: Optional[Annotated[list[WorkloadSpec], Field(min_length=1, max_length=16)]] = Field(
        None, description="one workload, or several for a multi-task study (or `serving`)")
    serving: Optional[ServingSpec] = Field(None, description="score each design by serving a "
                                           "request trace (instead of `workloads`)")
    disaggregated: Optional[DisaggregatedSpec] = Field(
        None, description="score disaggregated prefill / decode pools of the accelerators on "
                          "a request trace (instead of `workloads`)")
    fleet: Optional[FleetSpec] = Field(None, description="score each design by the cheapest "
                                       "fleet it joins (instead of `workloads`)")
    accelerator: Optional[AcceleratorSpec] = Field(None, description="one template")
    accelerators: Optional[Annotated[list[NamedAcceleratorSpec],
                                     Field(min_length=2, max_length=16)]] = Field(
        None, description="alternative designs: each trial picks one (e.g. GPU vs NPU)")
    sub_accelerators: Optional[Annotated[list[NamedAcceleratorSpec],
                                         Field(min_length=2, max_length=16)]] = Field(
        None, description="a heterogeneous design: all of these at once, workloads' ops "
                          "assigned to them by the search")
    system: Optional[SystemSpec] = Field(None, description="run the design as the devices "
                                          "of a system with a parallel layout")
    training: Optional[TrainingSpec] = Field(None, description="score each design by a "
                                             "training step of the workload (with `system`)")
    budgets: Optional[BudgetsSpec] = None
    assignment: Optional[AssignmentSpec] = None
    search: SearchSpec = Field(default_factory=SearchSpec)
    objectives: Annotated[list[Annotated[Any, WithJsonSchema(_OBJECTIVE_SCHEMA)]],
                          Field(min_length=1, max_length=8)] = Field(
        description="latency_s, energy_j, area_mm2, avg_power_w, edp, throughput, quality, "
                    "params, flops (or WORKLOAD.metric), each minimised or maximised")
    constraints: list[Annotated[Any, WithJsonSchema(_CONSTRAINT_SCHEMA)]] = Field(
        default_factory=list, description="thresholds such as 'latency_s <= 0.02'")
    quality: Annotated[Optional[QualitySpec], WithJsonSchema({
        "anyOf": [{"enum": ["proxy", "published"]}, QualitySpec.model_json_schema(),
                  {"type": "null"}]})] = Field(
        None, description="how quality is computed: a mapping, or proxy / published")
    sampler: Annotated[SamplerSpec, WithJsonSchema({
        "anyOf": [{"enum": list(SAMPLERS)}, SamplerSpec.model_json_schema()]})] = Field(
        default_factory=SamplerSpec, description="sampler name or {name, ...}")
    trials: Annotated[int, Field(ge=1, le=10_000_000)] = Field(
        50, description="designs to evaluate in total (evaluated ones from earlier runs count; "
                        "failed trials are re-asked)")
    timeout_s: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        None, description="stop starting trials after this many seconds, s")
    storage: Optional[str] = Field(None, description="Optuna storage URL (default: SQLite "
                                                     "file study.db in the output directory)")
    fidelity: Literal["event", "fast", "multi"] = Field(
        "event", description="event: SimPy simulation per trial; fast: the vectorised screening "
                             "path (no contention); multi: screen with fast, then confirm the "
                             "feasible Pareto candidates with the event simulator")

    @field_validator("sampler", mode="before")
    @classmethod
    def _sampler_name(cls, v: Any) -> Any:
        return {"name": v} if isinstance(v, str) else v

    @field_validator("quality", mode="before")
    @classmethod
    def _quality_source(cls, v: Any) -> Any:
        return {"source": v} if isinstance(v, str) else v

    # ---------------------------------------------------------------- derived views
    @property
    def designs(self) -> list[NamedAcceleratorSpec]:
        """The named accelerators (alternatives or sub-accelerators); one for ``accelerator``."""
        if self.accelerator is not None:
            a = self.accelerator
            # not validated: the template name labels it and may be any string here (the
            # loader then says which templates exist)
            return [NamedAcceleratorSpec.model_construct(name=a.template, template=a.template,
                                                         preset=a.preset, hw=a.hw)]
        return list(self.accelerators or self.sub_accelerators or [])

    @property
    def heterogeneous(self) -> bool:
        return self.sub_accelerators is not None

    @property
    def alternatives(self) -> bool:
        return self.accelerators is not None


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a study file (for editors)."""
    schema = StudySpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "accel-dse study"
    schema["oneOf"] = [{"required": ["workloads"]}, {"required": ["serving"]},
                       {"required": ["disaggregated"]}, {"required": ["fleet"]}]
    return schema
