"""A training step's joint forward-backward graph, captured from PyTorch itself.

**How** (AOT autograd's own mechanism, not a re-derivation): the step ``loss = L(model(x));
grads = torch.autograd.grad(loss, params)`` is traced by ``make_fx`` (the tracer AOT autograd
builds its joint graph with) on fake tensors of the CPU device, so the backward ops are the
ATen ops PyTorch's autograd runs (``mm`` for both GEMMs of a linear layer's backward,
``_scaled_dot_product_flash_attention_for_cpu_backward``, ``native_layer_norm_backward``,
``convolution_backward``, ``embedding_dense_backward``, ...), each with its real shapes,
and nothing is allocated (a 70 B model is traced without its weights). A module built on the
meta device is moved to fake CPU tensors first, so attention dispatches to its fused kernel
(one forward and one backward op) as it would on a GPU. ``torch.export``'s joint export
(``_export_forward_backward``) was tried first: it needs every parameter to receive a
gradient and refuses meta tensors, so it is not used.

The ops then go through the inference capture's graph builder (``capture._build_graph``: the
same kinds, FLOPs and bytes), and each op gets

* ``attrs["pass"]``: ``fwd`` (before the loss's gradient seed) or ``bwd``;
* ``attrs["layer"]``: the repeated block it belongs to (``0 .. L-1`` in execution order; ``-1``
  before the first block: embeddings, a stem; ``L`` after the last: the head and the loss),
  from forward hooks on the blocks (their forward) and gradient hooks on their outputs and
  inputs (their backward);
* ``attrs["saved_bytes"]`` on a forward op: the bytes of its outputs that backward ops read
  (the activations kept for backward, through views), and ``attrs["param_elems"]`` /
  ``attrs["param_tensors"]``: the parameter elements / tensors whose first forward use is
  this op.

The blocks are the children of the ``nn.ModuleList`` / ``nn.Sequential`` containers of one
module type holding the most parameters (GPT's ``blocks``, Llama's ``model.layers``, BERT's
``encoder.layer``, ResNet's stages). ``Workload.train`` records ``layers``, ``loss``,
``trainable_params`` and the block module type.

**The loss.** A module whose forward returns a scalar (or an output with ``.loss``, as
Hugging Face models given ``labels``) is used as it is; otherwise ``loss`` names one
(``cross_entropy`` over the last dimension against class 0 labels, ``mse`` of every float
output) or is a callable ``loss(output) -> scalar``. The zoo's LLMs and classifiers train
with cross-entropy, its other models with ``mse``.
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager, nullcontext
from types import SimpleNamespace
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F

from dse.errors import BadInput, CaptureError, first_line
from workloads import ir
from workloads.capture import _build_graph, _count_params
from workloads.op_kinds import classify
from workloads.patterns import fuse_eager_attention

TRAIN = "train"
#: Version of the training capture's semantics, in its cache keys (bump when the graph a
#: capture builds changes).
CAPTURE_VERSION = 8   # 7: param_tensors on first-use ops; 8: attention dropout
LOSSES = ("cross_entropy", "mse")
ATTENTIONS = ("fused", "eager")
FWD, BWD, OPT = "fwd", "bwd", "opt"


# ------------------------------------------------------------------------------ blocks
def find_blocks(module: nn.Module) -> tuple[list[nn.Module], str]:
    """The repeated blocks of ``module`` (see the module docstring) and their type's name;
    ``([], "")`` for a model without any."""
    def n_params(m):
        return sum(p.numel() for p in m.parameters())
    candidates = []
    for m in module.modules():
        if isinstance(m, (nn.ModuleList, nn.Sequential)):
            kids = [c for c in m.children() if n_params(c)]
            if len(kids) >= 1 and len({type(c) for c in kids}) == 1:
                candidates.append((m, kids))
    if not candidates:
        return [], ""
    by_type: dict[type, list] = {}
    for m, kids in candidates:
        by_type.setdefault(type(kids[0]), []).append((m, kids))

    def weight(entries):
        return sum(n_params(c) for _, kids in entries for c in kids)
    best_type = max(by_type, key=lambda t: (weight(by_type[t]), -len(by_type[t])))
    chosen: list[nn.Module] = []
    inside: set[int] = set()
    for m, kids in sorted(by_type[best_type], key=lambda e: -weight([e])):
        if id(m) in inside:
            continue
        for sub in m.modules():
            inside.add(id(sub))
        chosen.extend(kids)
    if len(chosen) < 2:
        return [], ""
    return chosen, best_type.__name__


# ------------------------------------------------------------------------------ the loss
def _loss_value(out: Any, loss: str | Callable | None) -> torch.Tensor:
    if callable(loss):
        value = loss(out)
    elif loss is None:
        value = out
        if not isinstance(out, torch.Tensor):
            value = getattr(out, "loss", None)
            if value is None and isinstance(out, dict):
                value = out.get("loss")
    elif loss == "cross_entropy":
        logits = _first_float(out)
        if logits is None or logits.dim() < 1:
            raise BadInput("loss", loss, "expected a model whose output is logits [..., classes]")
        flat = logits.reshape(-1, logits.shape[-1])
        labels = torch.zeros(flat.shape[0], dtype=torch.long, device=flat.device)
        value = nn.functional.cross_entropy(flat, labels)
    elif loss == "mse":
        floats = [t for t in _tensors(out) if t.is_floating_point()]
        if not floats:
            raise BadInput("loss", loss, "expected a model with a floating-point output")
        value = sum(t.pow(2).mean() for t in floats)
    else:
        raise BadInput("loss", loss, "expected one of " + ", ".join(LOSSES)
                       + ", a callable loss(output), or none when forward returns the loss")
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or not value.is_floating_point():
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise BadInput("loss", shape, "a scalar loss: return one from forward (or an output "
                       "with .loss), or give loss=cross_entropy|mse|callable "
                       "(CLI: --loss cross_entropy|mse)")
    return value.reshape(())


def _tensors(out: Any) -> list[torch.Tensor]:
    leaves = torch.utils._pytree.tree_leaves(
        out.to_tuple() if hasattr(out, "to_tuple") else out)
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def _first_float(out: Any) -> torch.Tensor | None:
    if hasattr(out, "logits"):
        return out.logits
    return next((t for t in _tensors(out) if t.is_floating_point()), None)


# ------------------------------------------------------------------------------ tracing
class _Marks:
    """Names of the graph's last node at the hooks' moments (forward start / end of each
    block call, the gradient of its output and input ready, the loss)."""

    def __init__(self):
        self.fwd: list[list[str | None]] = []       # per call: [start, end]
        self.bwd_start: dict[int, str | None] = {}
        self.bwd_end: dict[int, str | None] = {}
        self.loss: str | None = None

    @staticmethod
    def last() -> str | None:
        from torch.fx.experimental.proxy_tensor import get_proxy_mode
        mode = get_proxy_mode()
        if mode is None:
            return None
        nodes = mode.tracer.graph.nodes
        return next(reversed(nodes)).name if len(nodes) else None

    def hooks(self, blocks: list[nn.Module]) -> list:
        handles = []
        for block in blocks:
            def pre(mod, args, kwargs):
                i = len(self.fwd)
                self.fwd.append([self.last(), None])
                x = next((t for t in [*args, *kwargs.values()] if isinstance(t, torch.Tensor)
                          and t.requires_grad), None)
                if x is not None:
                    x.register_hook(lambda g, i=i: self._set(self.bwd_end, i))
                mod._dse_call = i

            def post(mod, args, out):
                i = mod._dse_call
                self.fwd[i][1] = self.last()
                y = next((t for t in _tensors(out) if t.requires_grad), None)
                if y is not None:
                    y.register_hook(lambda g, i=i: self._set(self.bwd_start, i))
            handles.append(block.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(block.register_forward_hook(post))
        return handles

    def _set(self, table: dict, i: int) -> None:
        table.setdefault(i, self.last())


@contextmanager
def _fused_attention(causal: bool):
    """SDPA as the fused kernel a GPU runs: the CPU's flash kernel takes neither dropout nor
    a mask tensor and would fall back to the math path, so the trace passes no dropout (a
    fused kernel draws it in registers: no extra traffic, but time; the largest dropout
    probability seen is yielded and put on the attention ops) and, instead of a mask, causal
    attention where the capture is of a causal model with equal query and key lengths (what
    transformers hands SDPA on a GPU when nothing is padded), none otherwise."""
    original = F.scaled_dot_product_attention
    seen = {"dropout": 0.0}

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
        is_causal = bool(is_causal) or (attn_mask is not None and causal
                                        and query.shape[-2] == key.shape[-2])
        seen["dropout"] = max(seen["dropout"], float(dropout_p or 0.0))
        return original(query, key, value, dropout_p=0.0, is_causal=is_causal, scale=scale,
                        enable_gqa=enable_gqa)
    F.scaled_dot_product_attention = sdpa
    try:
        yield seen
    finally:
        F.scaled_dot_product_attention = original


#: The dtypes a step is traced in (bytes then follow each tensor's own dtype); others are
#: traced in fp32 and counted in the workload's dtype.
TRACE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@contextmanager
def _eager_attention():
    """SDPA as frameworks ran it before fused attention kernels: ``softmax(Q K^T * scale +
    mask) V`` as separate kernels in the inputs' dtype (the scores and probabilities written
    out and the probabilities kept for backward). Dropout is left out: the zoo's models have
    none, and a model with attention dropout would add its mask."""
    original = F.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
        if enable_gqa and key.shape[-3] != query.shape[-3]:
            group = query.shape[-3] // key.shape[-3]
            key = key.repeat_interleave(group, dim=-3)
            value = value.repeat_interleave(group, dim=-3)
        scores = query @ key.transpose(-2, -1) * (scale or query.shape[-1] ** -0.5)
        if is_causal:
            sq, sk = query.shape[-2], key.shape[-2]
            keep = torch.ones(sq, sk, dtype=torch.bool, device=query.device).tril()
            scores = scores.masked_fill(~keep, float("-inf"))
        elif attn_mask is not None:
            scores = scores + attn_mask if attn_mask.is_floating_point() else \
                scores.masked_fill(~attn_mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ value
    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def _fake(mode, t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    from torch._subclasses.fake_tensor import FakeTensor
    if dtype is not None and t.is_floating_point() and t.dtype != dtype:
        t = t.detach().to(device="meta", dtype=dtype)
    if t.device.type == "meta":
        return FakeTensor(mode, t, torch.device("cpu"))
    return mode.from_tensor(t.detach() if t.requires_grad else t)


def trace_step(module: nn.Module, args: tuple, kwargs: dict, loss, blocks: list[nn.Module],
               weights_dtype: torch.dtype | None = None, autocast: torch.dtype | None = None):
    """``(graph module, parameter names, buffer names, marks)`` of one traced step: the
    module's floating-point parameters, buffers and inputs in ``weights_dtype`` (as
    ``module.to(dtype)``), under ``torch.autocast`` to ``autocast`` when given (AMP)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functional_call
    mode = FakeTensorMode(allow_non_fake_inputs=False)
    params = dict(module.named_parameters())
    buffers = dict(module.named_buffers())
    pnames, bnames = list(params), list(buffers)
    trainable = [i for i, n in enumerate(pnames) if params[n].requires_grad]
    flat_in, spec = torch.utils._pytree.tree_flatten((args, kwargs))
    tensor_at = [i for i, v in enumerate(flat_in) if isinstance(v, torch.Tensor)]
    fake_p = [_fake(mode, params[n], weights_dtype).requires_grad_(params[n].requires_grad)
              for n in pnames]
    fake_b = [_fake(mode, buffers[n], weights_dtype) for n in bnames]
    fake_in = [_fake(mode, flat_in[i], weights_dtype) for i in tensor_at]
    marks = _Marks()
    np_, nb = len(pnames), len(bnames)

    def step(*flat):
        p, b, x = flat[:np_], flat[np_:np_ + nb], list(flat_in)
        for i, t in zip(tensor_at, flat[np_ + nb:]):
            x[i] = t
        a, kw = torch.utils._pytree.tree_unflatten(x, spec)
        with torch.autocast("cpu", dtype=autocast) if autocast else nullcontext():
            out = functional_call(module, {**dict(zip(pnames, p)), **dict(zip(bnames, b))},
                                  a, kw)
            value = _loss_value(out, loss)
        marks.loss = marks.last()
        wanted = [p[i] for i in trainable]
        grads = torch.autograd.grad(value, wanted, allow_unused=True) if wanted else []
        return value, [g for g in grads if g is not None]

    handles = marks.hooks(blocks)
    was_training = module.training
    module.train()
    try:
        with mode, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gm = make_fx(step, tracing_mode="real")(*fake_p, *fake_b, *fake_in)
    except BadInput:
        raise
    except Exception as exc:   # torch raises many types; the user gets one line
        raise CaptureError(f"tracing the training step failed: {type(exc).__name__}: "
                           f"{first_line(exc)[:300]}") from None
    finally:
        for h in handles:
            h.remove()
        for blk in blocks:
            blk.__dict__.pop("_dse_call", None)
        module.train(was_training)
    if marks.loss is None:
        raise CaptureError("tracing the training step recorded no loss")
    return gm, pnames, bnames, trainable, marks


# ------------------------------------------------------------------------------ labels
def _regions(nodes: list, marks: _Marks) -> tuple[dict[str, str], dict[str, int]]:
    """Pass and layer of every node name."""
    pos = {n.name: i for i, n in enumerate(nodes)}

    def at(name):
        return -1 if name is None else pos.get(name, -1)
    loss_at = at(marks.loss)
    layers = len(marks.fwd)
    fwd_spans = [(at(s), at(e)) for s, e in marks.fwd]
    starts = {i: at(n) for i, n in marks.bwd_start.items()}
    ends = {i: at(n) for i, n in marks.bwd_end.items()}
    bwd_spans = []
    for i in range(layers):
        if i not in starts:
            continue
        end = ends.get(i)
        if end is None or end <= starts[i]:
            later = [starts[j] for j in range(i) if j in starts]
            end = max(later) if later else len(nodes)
        bwd_spans.append((starts[i], end, i))
    first_bwd = min((s for s, _, _ in bwd_spans), default=len(nodes))
    passes, layer_of = {}, {}
    for i, node in enumerate(nodes):
        if i <= loss_at:
            passes[node.name] = FWD
            layer = next((j for j, (s, e) in enumerate(fwd_spans) if s < i <= e), None)
            if layer is None:
                layer = -1 if not fwd_spans or i <= fwd_spans[0][0] else layers
        else:
            passes[node.name] = BWD
            layer = next((j for s, e, j in bwd_spans if s < i <= e), None)
            if layer is None:
                layer = layers if i <= first_bwd else -1
        layer_of[node.name] = layer
    return passes, layer_of


def _storage_base(node, cache: dict) -> tuple[Any, int]:
    """(producer node, output index) behind ``node``'s value, through view ops."""
    key = node.name
    if key in cache:
        return cache[key]
    import operator
    out: tuple[Any, int] = (node, 0)
    if node.op == "call_function":
        if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
            parent = node.args[0]
            out = (parent, int(node.args[1])) if parent.op == "call_function" else (parent, 0)
        elif _is_view(node):
            src = next((a for a in node.args if isinstance(a, torch.fx.Node)), None)
            if src is not None:
                out = _storage_base(src, cache)
    cache[key] = out
    return out


def _value_bytes(val: Any, index: int, elem: int) -> int:
    if isinstance(val, (tuple, list)):
        val = val[index] if index < len(val) else None
    if not isinstance(val, torch.Tensor):
        return 0
    size = elem if val.dtype.is_floating_point and elem else val.element_size()
    return math.prod(int(s) for s in val.shape) * size


def _saved_and_params(nodes: list, passes: dict[str, str], param_of: dict[str, str],
                      elem: int, numel: dict[str, int]
                      ) -> tuple[dict[str, int], dict[str, tuple[int, int]], int]:
    """Bytes each forward op keeps for backward; parameter elements and tensors first used by
    each op; bytes of graph inputs kept for backward."""
    cache: dict = {}
    saved: dict[tuple[str, int], tuple[str, int]] = {}
    inputs_saved: set[str] = set()
    first_use: dict[str, str] = {}

    def args_of(node):
        return [a for a in torch.utils._pytree.tree_leaves((node.args, node.kwargs))
                if isinstance(a, torch.fx.Node)]
    for node in nodes:
        if node.op != "call_function":
            continue
        in_bwd = passes.get(node.name) == BWD
        for a in args_of(node):
            base, idx = _storage_base(a, cache)
            if base.op == "placeholder":
                if base.name in param_of:
                    if not in_bwd and not _is_view(node):
                        first_use.setdefault(base.name, node.name)
                elif in_bwd:
                    inputs_saved.add(base.name)
                continue
            if in_bwd and passes.get(base.name) == FWD:
                saved[(base.name, idx)] = (base.name, _value_bytes(base.meta.get("val"), idx,
                                                                   elem))
    saved_bytes: dict[str, int] = {}
    for name, b in saved.values():
        saved_bytes[name] = saved_bytes.get(name, 0) + b
    param_elems: dict[str, tuple[int, int]] = {}
    for ph, user in first_use.items():
        e, t = param_elems.get(user, (0, 0))
        param_elems[user] = (e + numel[ph], t + 1)
    by_name = {n.name: n for n in nodes}
    input_bytes = sum(_value_bytes(by_name[n].meta.get("val"), 0, elem) for n in inputs_saved)
    return saved_bytes, param_elems, input_bytes


def _is_view(node) -> bool:
    """Whether a traced node only views its input (a dtype cast is a copy: AMP's casts)."""
    import operator
    if node.target is operator.getitem:
        return True
    from workloads.capture import _aten_name, _casts
    name = _aten_name(node.target)
    return classify(name) == "free" and not (name in ("_to_copy", "to") and _casts(node))


def _owner(name: str, graph_names: set[str], cache: dict, by_name: dict) -> str | None:
    """The IR op a traced node's value belongs to: itself, or (a view) its storage base."""
    if name in graph_names:
        return name
    node = by_name.get(name)
    if node is None:
        return None
    base, _ = _storage_base(node, cache)
    return base.name if base.name in graph_names else None


# ------------------------------------------------------------------------------ capture
def capture_train(module: nn.Module, args: tuple = (), kwargs: dict | None = None, *,
                  loss: str | Callable | None = None, model: str | None = None,
                  dtype: str = "bf16", batch: int = 1, seq: int = 0,
                  arch: dict[str, Any] | None = None, causal: bool = False,
                  attention: str = "fused", weights: str | None = None) -> ir.Workload:
    """The joint forward-backward :class:`~workloads.ir.Workload` (phase ``train``) of one
    training step of ``module`` on ``args`` / ``kwargs`` with ``loss`` (see the module
    docstring). Bytes are counted in ``dtype`` (the compute precision); ``batch`` and ``seq``
    are recorded (tokens per step = ``batch x seq``). ``attention``: ``fused`` (SDPA runs its
    fused kernel, one op each way) or ``eager`` (SDPA's math path: score matmul, softmax,
    matmul with V, the scores kept for backward, as frameworks before FlashAttention ran).
    ``weights``: the dtype the parameters are stored in (default ``dtype``); ``fp32`` with a
    16-bit ``dtype`` traces PyTorch's AMP (fp32 weights under ``torch.autocast``: the casts
    are copy kernels and their outputs kept for backward). A step in fp32, bf16 or fp16 is
    traced in its real dtypes, so a model's own upcasts (a loss in fp32, fp32 norms) count
    their real bytes."""
    if dtype not in ir.DTYPE_BYTES:
        raise BadInput("dtype", dtype, "expected one of " + ", ".join(ir.DTYPE_BYTES))
    if not isinstance(module, nn.Module):
        raise BadInput("module", type(module).__name__, "a torch.nn.Module")
    if loss is not None and not callable(loss) and loss not in LOSSES:
        raise BadInput("loss", loss, "expected one of " + ", ".join(LOSSES)
                       + ", a callable loss(output), or none when forward returns the loss")
    if attention not in ATTENTIONS:
        raise BadInput("attention", attention, "expected one of " + ", ".join(ATTENTIONS))
    kwargs = dict(kwargs or {})
    blocks, block_type = find_blocks(module)
    weights = weights or dtype
    if weights not in ir.DTYPE_BYTES:
        raise BadInput("weights", weights, "expected one of " + ", ".join(ir.DTYPE_BYTES))
    traced = dtype in TRACE_DTYPES and weights in TRACE_DTYPES
    amp = TRACE_DTYPES[dtype] if traced and weights != dtype else None
    with _eager_attention() if attention == "eager" else _fused_attention(causal) as seen:
        gm, pnames, bnames, trainable, marks = trace_step(
            module, tuple(args), kwargs, loss, blocks,
            TRACE_DTYPES[weights] if traced else None, amp)
    if not trainable:
        raise BadInput("module", type(module).__name__, "a module with trainable parameters "
                       "(every parameter has requires_grad=False)")
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    params = dict(module.named_parameters())
    buffers = dict(module.named_buffers())
    param_of = {placeholders[i].name: pnames[i] for i in range(len(pnames))}
    buffer_of = {placeholders[len(pnames) + i].name: bnames[i] for i in range(len(bnames))}
    numel = {ph: params[fqn].numel() for ph, fqn in param_of.items()}
    ep = SimpleNamespace(graph=gm.graph, graph_module=gm, graph_signature=SimpleNamespace(
        inputs_to_parameters=param_of, inputs_to_buffers=buffer_of))
    free: dict[str, int] = {}
    graph, unknown = _build_graph(ep, dtype, free, kv_names=(), traced_dtypes=traced)
    fuse_eager_attention(graph, causal)      # eager attention stays unfused: backward reads it
    passes, layer_of = _regions(nodes, marks)
    elem = ir.DTYPE_BYTES[dtype]
    saved, param_elems, input_bytes = _saved_and_params(nodes, passes, param_of,
                                                        0 if traced else elem, numel)
    names = set(graph.nodes)
    by_name = {n.name: n for n in nodes}
    cache: dict = {}
    owned_saved: dict[str, int] = {}
    for n, b in saved.items():
        owner = _owner(n, names, cache, by_name)
        if owner is not None:
            owned_saved[owner] = owned_saved.get(owner, 0) + b
    owned_params: dict[str, tuple[int, int]] = {}
    for n, (e, t) in param_elems.items():
        owner = _owner(n, names, cache, by_name)
        if owner is None:   # a parameter first used by a view that feeds nothing: its layer's
            owner = next(iter(names))
        e0, t0 = owned_params.get(owner, (0, 0))
        owned_params[owner] = (e0 + e, t0 + t)
    layers = len(marks.fwd)
    for name in graph.nodes:
        op = graph.nodes[name]["op"]
        extra = {"pass": passes.get(name, BWD), "layer": layer_of.get(name, layers)}
        if op.kind == ir.ATTENTION and (seen or {}).get("dropout"):
            extra["dropout"] = seen["dropout"]   # the fused kernel draws it (not traced)
        if owned_saved.get(name):
            extra["saved_bytes"] = owned_saved[name]
        if owned_params.get(name):
            extra["param_elems"], extra["param_tensors"] = owned_params[name]
        graph.nodes[name]["op"] = op.with_attrs(**extra)
    if unknown:
        warnings.warn("unknown ops (costed by their bytes only): "
                      + ", ".join(f"{k} x{v}" for k, v in sorted(unknown.items())), stacklevel=2)
    trainable_params = sum(params[pnames[i]].numel() for i in trainable)
    loss_name = loss if isinstance(loss, str) else ("callable" if callable(loss) else "model")
    return ir.Workload(graph=graph, model=model or type(module).__name__, phase=TRAIN,
                       dtype=dtype, batch=batch, seq=seq, context=0, arch=dict(arch or {}),
                       params=_count_params(module), unknown_targets=unknown,
                       free_ops=tuple(sorted(free.items())),
                       train={"layers": layers, "block": block_type, "loss": loss_name,
                              "attention": attention, "weights": weights,
                              "trainable_params": int(trainable_params),
                              "input_saved_bytes": int(input_bytes)})


def layers_of(w: ir.Workload) -> tuple[int, int]:
    """(the model's blocks, the blocks captured): a capture of a deep model may hold only its
    first blocks (``Workload.train["captured_layers"]``, :func:`source_layer`)."""
    layers = int(w.train.get("layers", 0))
    return layers, int(w.train.get("captured_layers", layers))


def source_layer(w: ir.Workload, layer: int) -> int:
    """The captured block that stands for block ``layer`` of the model (``-1`` before the
    blocks, ``layers`` after them): itself in a full capture; in a capture of the first
    ``c`` blocks of identical ones, blocks ``c-1 .. layers-1`` are block ``c - 1`` and the
    head is captured block ``c``."""
    layers, captured = layers_of(w)
    if layer < 0 or captured == layers:
        return layer
    if layer >= layers:
        return captured
    return min(layer, captured - 1)


def layer_multiplicity(w: ir.Workload) -> dict[int, int]:
    """How many of the model's blocks each captured layer id stands for."""
    layers, _ = layers_of(w)
    out: dict[int, int] = {}
    for layer in range(-1, layers + 1):
        src = source_layer(w, layer)
        out[src] = out.get(src, 0) + 1
    return out


def ops_of(w: ir.Workload, pass_: str | None = None, layer: int | None = None) -> list[ir.Op]:
    """``w``'s ops of one pass and/or layer, in order."""
    return [op for op in w.ops if (pass_ is None or op.attrs.get("pass") == pass_)
            and (layer is None or op.attrs.get("layer") == layer)]
