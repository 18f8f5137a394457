"""Capture any ``nn.Module`` with ``torch.export`` into the workload IR.

The module is exported (non-strict, ATen training IR, which keeps ``linear``, ``conv2d`` and
``scaled_dot_product_attention`` as single nodes); each ``call_function`` node becomes an
:class:`~workloads.ir.Op` with FLOPs and bytes from the exported shapes. View ops are free and
route their input through; everything unclassified becomes an ``unknown`` op.

Bytes are counted in the requested ``dtype`` for floating-point tensors (the module may be built
in fp32 on the meta device: nothing is allocated) and in their own dtype for integer tensors.
Tensors reached from the user input named ``kv_cache`` (or the names given as ``kv_input``,
e.g. Hugging Face's ``past_key_values``) are KV cache: a ``cat`` onto them is a cache append
(``attrs["kv_append"]``), costed as ``kv_update`` says (:mod:`workloads.kv_update`:
``in_place`` writes only the new entries, ``concat`` reads and writes the whole cache), and
attention reading them reads KV cache bytes. View ops are counted (``Workload.free_ops``).
Eager attention (matmul -> softmax -> matmul) is fused into one ``attention`` op
(``workloads/patterns.py``).
"""

from __future__ import annotations

import math
import operator
import warnings
from dataclasses import dataclass
from typing import Any

import networkx as nx
import torch

from dse.errors import BadInput, CaptureError
from workloads import backward_attrs, ir, op_attrs
from workloads.kv_update import check_kv_update, with_kv_update
from workloads.op_kinds import BACKWARD, FLOPS_PER_ELEMENT, classify
from workloads.patterns import causal_visible, fuse_eager_attention

KV_INPUT_NAME = "kv_cache"

WEIGHT, ACT, KV = "weight", "activation", "kv"


@dataclass(frozen=True)
class _Tensor:
    """A tensor flowing through the graph: its producer op (None for graph inputs), role, meta.
    ``stored`` is the elements behind it in memory: fewer than ``numel`` for a broadcast view
    (``expand``), whose reader reads the source once (e.g. grouped-query K/V repeated to every
    query head by a view)."""

    producer: str | None
    role: str
    shape: tuple[int, ...]
    numel: int
    itemsize: int
    stored: int | None = None

    @property
    def nbytes(self) -> int:
        return (self.numel if self.stored is None else min(self.stored, self.numel)) * self.itemsize


def export_module(module: torch.nn.Module, args: tuple, kwargs: dict | None = None):
    """``torch.export`` the module in eval mode; :class:`CaptureError` on rejection."""
    import contextlib
    import io
    import logging
    module.eval()
    # fake tensors log a failing kernel's traceback: the user gets one line
    quiet = logging.getLogger("torch._subclasses.fake_tensor")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:   # a rejected export prints its partial graph to stderr: the user gets one line
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
            # inference graphs (flex_attention refuses to trace autograd on CPU)
            return torch.export.export(module, tuple(args), kwargs or {}, strict=False)
    except Exception as exc:  # torch raises many types; the user gets one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CaptureError(f"torch.export rejected the module: {type(exc).__name__}: {first}") from None
    finally:
        quiet.setLevel(level)


def capture(module: torch.nn.Module, args: tuple, kwargs: dict | None = None, *,
            model: str | None = None, phase: str = "forward", dtype: str = "bf16",
            batch: int = 1, seq: int = 0, context: int = 0,
            arch: dict[str, Any] | None = None, kv_update: str = "in_place",
            kv_input: str | tuple[str, ...] = KV_INPUT_NAME, causal: bool = False,
            record: dict | None = None) -> ir.Workload:
    """Export ``module`` on ``args``/``kwargs`` and build its :class:`~workloads.ir.Workload`.

    Works on any module torch.export accepts; pass meta tensors (and build the module under
    ``torch.device("meta")``) to capture large models without allocating their weights.
    ``kv_update``: how decode updates the KV cache (:mod:`workloads.kv_update`). ``kv_input``:
    the forward argument name(s) holding the KV cache. ``causal``: eager attention
    whose query and key lengths are equal is causal (a causal LM's prefill). ``record``, when
    given, receives what :mod:`workloads.reshape` needs to rebuild the graph at other sizes:
    ``ops`` (per op in insertion order: FX node, op name, ATen name, kind, input and output
    ``_Tensor``s), ``params`` (each parameter's qualified name and shape) and ``exported``
    (the ``ExportedProgram``).
    """
    if dtype not in ir.DTYPE_BYTES:
        raise BadInput("dtype", dtype, "expected one of " + ", ".join(ir.DTYPE_BYTES))
    if phase not in ir.PHASES:
        raise BadInput("phase", phase, "expected one of " + ", ".join(ir.PHASES))
    check_kv_update(kv_update)
    ep = export_module(module, args, kwargs)
    if record is not None:
        record["exported"] = ep
    params = _count_params(module)
    free: dict[str, int] = {}
    kv_names = (kv_input,) if isinstance(kv_input, str) else tuple(kv_input)
    graph, unknown = _build_graph(ep, dtype, free, kv_names, record)
    if record is not None:
        shapes = {n.name: tuple(int(d) for d in n.meta["val"].shape) for n in ep.graph.nodes
                  if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)}
        canonical: dict[str, str] = {}   # a tied parameter counts under its first name
        first: dict[int, str] = {}
        for fqn, p in module.named_parameters(remove_duplicate=False):
            canonical[fqn] = first.setdefault(id(p), fqn)
        record["params"] = [(fqn, shapes[name]) for name, fqn in
                            ep.graph_signature.inputs_to_parameters.items()
                            if canonical.get(fqn, fqn) == fqn]
    fuse_eager_attention(graph, causal)
    if unknown:
        warnings.warn("unknown ops (costed by their bytes only): "
                      + ", ".join(f"{k} x{v}" for k, v in sorted(unknown.items())), stacklevel=2)
    w = ir.Workload(graph=graph, model=model or type(module).__name__, phase=phase,
                    dtype=dtype, batch=batch, seq=seq, context=context, arch=dict(arch or {}),
                    params=params, unknown_targets=unknown, free_ops=tuple(sorted(free.items())))
    return with_kv_update(w, kv_update)


def _count_params(module: torch.nn.Module) -> int:
    """Unique parameters (``parameters()`` counts a tied weight once)."""
    return sum(p.numel() for p in module.parameters())


#: Higher-order ops that wrap a subgraph (``torch.no_grad()``/autocast regions); inlined.
_WRAPPERS = ("wrap_with_set_grad_enabled", "wrap_with_autocast")


def _build_graph(ep, dtype: str, free: dict[str, int],
                 kv_names: tuple[str, ...] = (KV_INPUT_NAME,),
                 record: dict | None = None, traced_dtypes: bool = False
                 ) -> tuple[nx.DiGraph, dict[str, int]]:
    """The op graph and the unknown operators; ``free`` receives the view ops by name, ``record``
    (when given) each op's inputs (see :func:`capture`). ``traced_dtypes``: the graph was
    traced in its real dtypes (a training step): every tensor's bytes are its own dtype's,
    and a dtype cast (``_to_copy`` to another dtype) is a copy kernel, not a view."""
    recorded = record.setdefault("ops", []) if record is not None else None
    elem = ir.DTYPE_BYTES[dtype]
    sig = ep.graph_signature
    constant_inputs = set(sig.inputs_to_parameters) | set(sig.inputs_to_buffers) | set(
        getattr(sig, "inputs_to_lifted_tensor_constants", {}))
    graph = nx.DiGraph()
    unknown: dict[str, int] = {}

    def meta_tensor(val, producer, role) -> _Tensor | None:
        if not isinstance(val, torch.Tensor):
            return None
        shape = tuple(int(s) for s in val.shape)
        itemsize = elem if val.dtype.is_floating_point and not traced_dtypes \
            else val.element_size()
        return _Tensor(producer, role, shape, math.prod(shape), itemsize)

    def walk(fx_graph, tensors: dict, prefix: str, bound_inputs: list | None):
        """Add the ops of ``fx_graph``; return what its output node returns."""
        def value(a):
            """The tracked tensor of node ``a``; a node whose output no op produced (a
            factory such as ``zeros``, a constant) is an activation from nowhere, so that
            every operand of an op is counted."""
            if not isinstance(a, torch.fx.Node):
                return None
            t = tensors.get(a.name)
            if t is None and a.op in ("call_function", "get_attr"):
                t = meta_tensor(a.meta.get("val"), None, ACT)
                if t is not None:
                    tensors[a.name] = t
            return t

        placeholders = 0
        for node in fx_graph.nodes:
            if node.op == "placeholder":
                if bound_inputs is not None:  # a wrapped subgraph: operands bound by position
                    if placeholders < len(bound_inputs) and bound_inputs[placeholders] is not None:
                        tensors[node.name] = bound_inputs[placeholders]
                    placeholders += 1
                    continue
                if node.name in constant_inputs:
                    role = WEIGHT
                elif node.name.startswith(kv_names):
                    role = KV
                else:
                    role = ACT
                t = meta_tensor(node.meta.get("val"), None, role)
                if t is not None:
                    tensors[node.name] = t
                continue
            if node.op == "output":
                outs = node.args[0]
                return tuple(value(o) for o in (outs if isinstance(outs, (list, tuple)) else [outs]))
            if node.op != "call_function":
                continue
            if node.target is operator.getitem:
                parent = value(node.args[0])
                if isinstance(parent, tuple) and node.args[1] < len(parent):
                    tensors[node.name] = parent[node.args[1]]
                continue
            name = _aten_name(node.target)
            if name in _WRAPPERS:
                sub_index = next(i for i, a in enumerate(node.args)
                                 if isinstance(a, torch.fx.Node) and a.op == "get_attr")
                sub = getattr(ep.graph_module, node.args[sub_index].target)
                operands = [value(a) for a in node.args[sub_index + 1:]]
                tensors[node.name] = walk(sub.graph, {}, f"{prefix}{node.name}.", operands)
                continue
            kind = classify(name)
            inputs = _tensor_inputs(node, value)
            val = node.meta.get("val")
            outs = val if isinstance(val, (tuple, list)) else (val,)
            if traced_dtypes and name in ("_to_copy", "to") and _casts(node):
                kind = ir.DATA_MOVEMENT
            elif traced_dtypes and name in _TRAINING_KERNELS:
                kind = ir.ELEMENTWISE     # dropout / its random mask in a training step
            elif kind == "free" and name in _RESHAPES and _reshape_copies(node):
                kind = ir.DATA_MOVEMENT
            if kind == "free" or (name == "contiguous" and all(
                    isinstance(v, torch.Tensor) and v.is_contiguous() for v in outs)):
                free[name] = free.get(name, 0) + 1
                src = inputs[0] if inputs else None
                if src is not None:
                    stored = src.numel if src.stored is None else src.stored
                    out_ts = tuple(None if t is None else _Tensor(
                        t.producer, t.role, t.shape, t.numel, t.itemsize, min(stored, t.numel))
                        for t in (meta_tensor(o, src.producer, src.role) for o in outs))
                    tensors[node.name] = out_ts if isinstance(val, (tuple, list)) else out_ts[0]
                continue
            if kind is None:
                kind = ir.UNKNOWN
                unknown[name] = unknown.get(name, 0) + 1
            if name == "contiguous":
                kind = ir.DATA_MOVEMENT
            op_name = prefix + node.name
            out_tensors = [t for t in (meta_tensor(o, op_name, ACT) for o in outs) if t is not None]
            op, out_role = _make_op(node, op_name, name, kind, inputs, out_tensors, dtype, elem)
            if recorded is not None:
                recorded.append((node, op_name, name, kind, inputs, out_tensors))
            out_tensors = [_Tensor(t.producer, out_role, t.shape, t.numel, t.itemsize)
                           for t in out_tensors]
            if isinstance(val, (tuple, list)):
                tensors[node.name] = tuple(out_tensors)
            elif out_tensors:
                tensors[node.name] = out_tensors[0]
            graph.add_node(op.name, op=op, index=graph.number_of_nodes())
            for t in inputs:
                if t.producer is not None and t.producer in graph:
                    b = t.nbytes
                    if graph.has_edge(t.producer, op.name):
                        graph.edges[t.producer, op.name]["bytes"] += b
                    else:
                        graph.add_edge(t.producer, op.name, bytes=b)
        return ()

    walk(ep.graph, {}, "", None)
    return graph, unknown


#: Dropout and the random masks it draws: kernels in a training step (free in inference,
#: where dropout is the identity).
_TRAINING_KERNELS = ("native_dropout", "dropout", "feature_dropout", "alpha_dropout",
                     "bernoulli", "bernoulli_", "rand", "rand_like", "uniform_", "normal_")


def _casts(node) -> bool:
    """Whether a ``_to_copy`` node changes its tensor's dtype (a real copy kernel)."""
    src = node.args[0] if node.args else None
    a = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    b = node.meta.get("val")
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype != b.dtype


def _aten_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        ns, _, rest = target.name().partition("::")
        return rest.split(".")[0] if ns in ("aten", "dse") else target.name()
    if isinstance(target, torch._ops.HigherOrderOperator):
        return target.name()
    return getattr(target, "__name__", str(target))


def _tensor_inputs(node, value) -> list[_Tensor]:
    out: list[_Tensor] = []

    def visit(a):
        if isinstance(a, (list, tuple)):
            for x in a:
                visit(x)
        else:
            t = value(a)
            if isinstance(t, _Tensor):
                out.append(t)
    for a in node.args:
        visit(a)
    for a in node.kwargs.values():
        visit(a)
    return out


def _bytes(t: _Tensor) -> int:
    return t.nbytes


def node_facts(node, name: str, kind: str, inputs: list[_Tensor]) -> dict[str, Any] | None:
    """What :func:`_make_op` reads from exported ``node`` besides its tensors, as JSON values
    (a re-shape template keeps these instead of the node, so it can be stored on disk:
    ``workloads/reshape.py``): a KV-cache append's strided-input flag, a convolution's stride,
    padding, groups and transposition, an attention kernel's causal flag; ``{}`` where it reads
    nothing more; None where it reads more (backward kernels, einsum, MoE, scans, recurrences,
    hash grids, sparse attention): those ops need the node itself."""
    if name in ("cat", "concat") and any(t.role == KV for t in inputs):
        return {"strided_inputs": _strided_inputs(node)}
    if name in ("copy_", "copy") and len(inputs) >= 2 and inputs[0].role == KV:
        return {}
    if kind == ir.EMBEDDING and inputs and inputs[0].role == WEIGHT:
        return {}
    if (name in BACKWARD[ir.ATTENTION] or name in BACKWARD[ir.CONV] or name == "einsum"
            or kind in (ir.MOE, ir.SCAN, ir.RECURRENT, ir.HASHGRID, ir.SPARSE_ATTENTION)):
        return None
    if kind == ir.CONV:
        return _conv_facts(name, node)
    if kind == ir.ATTENTION and name != "mla_attention":
        return {"causal": bool(backward_attrs.schema_arg(node, "is_causal", False))}
    return {}


def _make_op(node, op_name: str, name: str, kind: str, inputs: list[_Tensor], outputs: list[_Tensor],
             dtype: str, elem: int, facts: dict[str, Any] | None = None) -> tuple[ir.Op, str]:
    """The Op of one exported node, and the role of its outputs; ``facts``
    (:func:`node_facts`), where given, instead of what the node would give."""
    if facts is None:
        facts = node_facts(node, name, kind, inputs)
    weight = act_r = kv_r = act_w = kv_w = 0
    out_role = ACT
    attrs: dict[str, Any] = {}
    out_elems = sum(t.numel for t in outputs)
    flops = FLOPS_PER_ELEMENT.get(kind, 0) * out_elems

    if name in ("cat", "concat") and any(t.role == KV for t in inputs):
        # In-place KV-cache append: only the new entries are written.
        new = [t for t in inputs if t.role != KV]
        act_r = sum(_bytes(t) for t in new)
        kv_w = act_r
        out_role = KV
        attrs["kv_append"] = True
        attrs["elements"] = sum(t.numel for t in new)
        if facts["strided_inputs"]:
            attrs["strided_inputs"] = True
    elif name in ("copy_", "copy") and len(inputs) >= 2 and inputs[0].role == KV:
        # In-place update of a cached state (a recurrent state, a conv window): read the
        # source, write the cache.
        src = inputs[1]
        kv_r, act_r = (_bytes(src), 0) if src.role == KV else (0, _bytes(src))
        kv_w = _bytes(inputs[0])
        out_role = KV
        attrs["elements"] = inputs[0].numel
    elif kind == ir.EMBEDDING and inputs and inputs[0].role == WEIGHT:
        weight = sum(_bytes(t) for t in outputs)  # only the gathered rows are read
        act_r = sum(_bytes(t) for t in inputs[1:])
        attrs["elements"] = out_elems
    else:
        for t in inputs:
            if t.role == WEIGHT:
                weight += _bytes(t)
            elif t.role == KV:
                kv_r += _bytes(t)
            else:
                act_r += _bytes(t)
        if name in BACKWARD[ir.ATTENTION]:
            attrs, flops = backward_attrs.attention_backward_attrs(node, inputs)
        elif name in BACKWARD[ir.CONV]:
            attrs, flops = backward_attrs.conv_backward_attrs(node, inputs, conv_shape_attrs)
        elif name == "einsum":
            attrs, flops = op_attrs.einsum_attrs(node, inputs)
        elif kind == ir.MATMUL:
            attrs = _matmul_attrs(name, node, inputs)
            flops = 2 * attrs["batch"] * attrs["m"] * attrs["n"] * attrs["k"]
        elif kind == ir.MOE:
            attrs, flops, weight = (op_attrs.moe_experts_attrs(node, inputs)
                                    if name == "moe_experts" else op_attrs.grouped_mm_attrs(node, inputs))
        elif kind == ir.SCAN:
            attrs, flops = op_attrs.scan_attrs(node, inputs, outputs)
        elif kind == ir.RECURRENT:
            attrs, flops = op_attrs.recurrent_attrs(name, node, inputs)
        elif kind == ir.CONV:
            attrs = conv_shape_attrs(inputs[0], inputs[1], outputs[0].shape, facts["stride"],
                                     facts["padding"], facts["groups"], facts["transposed"])
            flops = 2 * attrs["gemm_m"] * attrs["gemm_n"] * attrs["gemm_k"] * attrs["groups"]
        elif kind == ir.ATTENTION and name == "mla_attention":
            from workloads.mla_op import capture_attrs
            attrs, flops = capture_attrs(inputs)
        elif kind == ir.ATTENTION:
            attrs = _attention_attrs(facts["causal"], inputs)
            flops = attrs.pop("_flops")
        elif kind == ir.HASHGRID:
            attrs = _hashgrid_attrs(node, inputs)
            flops = attrs["points"] * attrs["levels"] * (2 ** attrs["dims"]) * attrs["features"] * 2
        elif kind == ir.SPARSE_ATTENTION:
            from workloads.sparse_attention import capture_attrs
            attrs = capture_attrs(node, [t.shape for t in inputs])
            flops = attrs.pop("_flops")
        else:
            attrs["elements"] = out_elems
    act_w = sum(_bytes(t) for t in outputs) if out_role == ACT else 0
    op = ir.Op(name=op_name, kind=kind, target=name,
               input_shapes=tuple(t.shape for t in inputs),
               output_shapes=tuple(t.shape for t in outputs), dtype=dtype,
               bytes_per_element=elem, flops=int(flops), weight_bytes=int(weight),
               activation_bytes_read=int(act_r), activation_bytes_written=int(act_w),
               kv_bytes_read=int(kv_r), kv_bytes_written=int(kv_w), attrs=attrs)
    return op, out_role


#: View ops that copy when their input's strides cannot express the new shape.
_RESHAPES = ("reshape", "flatten", "_reshape_alias", "reshape_as")


def _reshape_copies(node) -> bool:
    """Whether a ``reshape`` must copy: its input's strides cannot be viewed as the output
    shape (a broadcast K/V repeated to every query head and flattened, as transformers'
    ``repeat_kv`` does, is materialised)."""
    src = node.args[0].meta.get("val") if node.args and isinstance(node.args[0], torch.fx.Node) \
        else None
    out = node.meta.get("val")
    if not (isinstance(src, torch.Tensor) and isinstance(out, torch.Tensor)) or not src.numel():
        return False
    try:
        torch.empty_strided(src.shape, src.stride(), device="meta").view(out.shape)
        return False
    except RuntimeError:
        return True


def _strided_inputs(node) -> bool:
    """Whether a ``cat``'s inputs include a strided (non-contiguous) view, as GPT-2's keys and
    values sliced out of its fused ``c_attn`` output are: PyTorch's CUDA ``cat`` then copies
    with its scalar kernel instead of its vectorized one (``benchmarks/hf_decode_profile.py``
    measures the difference)."""
    tensors = node.args[0] if node.args and isinstance(node.args[0], (list, tuple)) else ()
    for a in tensors:
        val = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
        if isinstance(val, torch.Tensor) and val.numel() and not val.is_contiguous():
            return True
    return False


def _matmul_attrs(name: str, node, inputs: list[_Tensor]) -> dict[str, Any]:
    """GEMM dimensions C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]."""
    if name == "linear":
        a, w = inputs[0], inputs[1]
        k = a.shape[-1]
        n = w.shape[0]
        return {"m": a.numel // max(k, 1), "n": n, "k": k, "batch": 1,
                "weight_operand": w.role == WEIGHT}
    if name in ("addmm", "baddbmm"):
        a, b = inputs[1], inputs[2]
    else:
        a, b = inputs[0], inputs[1]
    sa, sb = list(a.shape), list(b.shape)
    if len(sa) == 1:
        sa = [1] + sa
    if len(sb) == 1:
        sb = sb + [1]
    m, k = sa[-2], sa[-1]
    n = sb[-1]
    batch_a, batch_b = sa[:-2], sb[:-2]
    nd = max(len(batch_a), len(batch_b))
    batch_a = [1] * (nd - len(batch_a)) + batch_a
    batch_b = [1] * (nd - len(batch_b)) + batch_b
    batch = math.prod(max(x, y) for x, y in zip(batch_a, batch_b))
    if math.prod(batch_b) == 1 and batch > 1:  # broadcast weight: fold batch into m
        m, batch = m * batch, 1
    return {"m": m, "n": n, "k": k, "batch": batch, "weight_operand": b.role == WEIGHT}


def _conv_facts(name: str, node) -> dict[str, Any]:
    """A convolution node's stride, padding, groups and transposition (:func:`node_facts`)."""
    args = list(node.args) + [None] * 10
    transposed = name.startswith("conv_transpose")
    if name in ("convolution", "_convolution"):
        stride, padding, groups = args[3], args[4], args[8]
        transposed = bool(args[6])
    else:   # convNd / conv_transposeNd(input, weight, bias, stride, padding, ..., groups at 6)
        stride = node.kwargs.get("stride", args[3] if args[3] is not None else 1)
        padding = node.kwargs.get("padding", args[4] if args[4] is not None else 0)
        groups = node.kwargs.get("groups", args[6] if args[6] is not None else 1)
    return {"stride": _as_list(stride), "padding": _as_list(padding),
            "groups": int(groups or 1), "transposed": transposed}


def conv_shape_attrs(x: _Tensor, w: _Tensor, out: tuple, stride, padding, groups: int,
                     transposed: bool) -> dict[str, Any]:
    """The attrs of a convolution of input ``x`` and weight ``w`` giving output shape ``out``."""
    if transposed:   # weight [c_in, k_out / groups, ...]: a GEMM per input pixel (col2im after)
        return _transposed_conv_attrs(x, w, groups, stride, padding)
    spatial_out = out[2:] if len(out) > 2 else (1,)
    spatial_w = w.shape[2:]
    p = spatial_out[0] if spatial_out else 1
    q = math.prod(spatial_out[1:]) if len(spatial_out) > 1 else 1
    r = spatial_w[0] if spatial_w else 1
    s = math.prod(spatial_w[1:]) if len(spatial_w) > 1 else 1
    n, c = x.shape[0], x.shape[1]
    k = w.shape[0]
    h = x.shape[2] if len(x.shape) > 2 else 1
    width = math.prod(x.shape[3:]) if len(x.shape) > 3 else 1
    gemm_k = (c // groups) * r * s
    return {"n": n, "c": c, "h": h, "w": width, "k": k, "r": r, "s": s, "p": p, "q": q,
            "stride": _as_list(stride), "padding": _as_list(padding), "groups": groups,
            "gemm_m": n * p * q, "gemm_n": k // groups, "gemm_k": gemm_k}


def _transposed_conv_attrs(x: _Tensor, w: _Tensor, groups: int, stride, padding) -> dict[str, Any]:
    """A transposed convolution as the GEMM torch's FlopCounterMode counts: every input pixel
    times every filter tap, ``p x q`` = the input's spatial size, ``k`` = output channels."""
    spatial_in = x.shape[2:] if len(x.shape) > 2 else (1,)
    p = spatial_in[0]
    q = math.prod(spatial_in[1:]) if len(spatial_in) > 1 else 1
    taps = w.shape[2:]
    r = taps[0] if taps else 1
    s = math.prod(taps[1:]) if len(taps) > 1 else 1
    n, c = x.shape[0], x.shape[1]
    k = w.shape[1] * groups
    return {"n": n, "c": c, "h": p, "w": q, "k": k, "r": r, "s": s, "p": p, "q": q,
            "stride": _as_list(stride), "padding": _as_list(padding), "groups": groups,
            "transposed": True, "gemm_m": n * p * q, "gemm_n": (k // groups) * r * s,
            "gemm_k": c // groups}


def _as_list(v) -> list:
    if isinstance(v, (list, tuple)):
        return [int(x) if not isinstance(x, str) else x for x in v]
    return [v]


def _attention_attrs(causal: bool, inputs: list[_Tensor]) -> dict[str, Any]:
    q, k, v = inputs[0], inputs[1], inputs[2]
    b = math.prod(q.shape[:-3]) if len(q.shape) > 3 else 1
    heads, sq, d = (q.shape[-3] if len(q.shape) >= 3 else 1), q.shape[-2], q.shape[-1]
    kv_heads, skv, dv = (k.shape[-3] if len(k.shape) >= 3 else 1), k.shape[-2], v.shape[-1]
    flops = 2 * b * heads * sq * skv * d + 2 * b * heads * sq * skv * dv
    if causal:  # torch's is_causal keeps the lower triangle of [sq, skv] (top-left aligned)
        causal_flops = flops * causal_visible(sq, skv) // (sq * skv)
    else:
        causal_flops = flops
    return {"batch": b, "heads": heads, "kv_heads": kv_heads, "q_len": sq, "kv_len": skv,
            "head_dim": d, "value_dim": dv, "causal": causal, "causal_flops": int(causal_flops),
            "_flops": flops}


def _hashgrid_attrs(node, inputs: list[_Tensor]) -> dict[str, Any]:
    """Attrs of ``dse::hash_grid_encode(positions, table, levels, features, log2_table_size,
    base_resolution, per_level_scale, dense)``."""
    from workloads.hashgrid_op import level_resolutions
    pos, table = inputs[0], inputs[1]
    levels, features, log2_t, base, scale, dense = node.args[2:8]
    resolutions = level_resolutions(int(levels), int(base), float(scale))
    return {"points": math.prod(pos.shape[:-1]), "dims": pos.shape[-1], "levels": int(levels),
            "features": int(features), "log2_table_size": int(log2_t), "dense": bool(dense),
            "base_resolution": int(base), "per_level_scale": float(scale),
            "finest_resolution": resolutions[-1], "resolutions": resolutions,
            "table_rows_per_level": int(table.shape[1]),
            "table_bytes_per_level": int(table.shape[1] * features * table.itemsize)}
