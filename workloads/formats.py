"""Number formats as data, and a workload's tensors in a format per role.

**The table** (:data:`FORMATS`): every element type and block format the tool knows, with its
bits, block size, scale and the source it is taken from. A format's storage cost is exact:
``bits_per_element = element bits + (scale bits + zero-point bits) / block``, so MXFP4 is
4 + 8/32 = 4.25 bits, NVFP4 4 + 8/16 = 4.5 bits (its one FP32 scale per tensor is not a
per-element cost), INT4 with groups of 128 and an FP16 scale 4 + 16/128 = 4.125 bits.

Names: a base name from the table, optionally a group or block suffix and a zero point:

* plain element types: ``fp32 tf32 bf16 fp16 fp8_e4m3 fp8_e5m2 fp6_e2m3 fp6_e3m2 fp4_e2m1
  int8 int4 int2 ternary`` (``fp8`` is ``fp8_e4m3``; a per-tensor scale, no per-element cost);
* OCP Microscaling (MX v1.0): ``mxfp8_e4m3 mxfp8_e5m2 mxfp6_e2m3 mxfp6_e3m2 mxfp4 mxint8``:
  blocks of 32 elements sharing an E8M0 scale (``_b32`` may be written; no other block);
* ``nvfp4``: FP4 E2M1 in blocks of 16 with an FP8 E4M3 scale (``_b16``; no other block);
* group-wise integers (GPTQ, AWQ): ``int8_g128``, ``int4_g32``, ``int2_g64`` ...: groups of
  32, 64 or 128 along the reduction dimension with an FP16 scale; ``_zp`` adds a zero point
  per group stored at the element width (GPTQ's and AWQ's packed ``qzeros``).

**Roles** (:data:`ROLES`): ``weights`` (the weight operand of every matmul, conv and moe op
but the head), ``activations`` (the activation operand those ops read: what W8A8 / W4A4
quantise), ``kv`` (the KV cache, read and appended), ``head`` (the weight matmuls whose output
leaves the graph: an LM head, a classifier; GPTQ, AWQ and SmoothQuant keep it in 16 bits, so
by default it stays in the workload's dtype and so do its activations; a head in another
format reads its activations in ``activations``) and ``attention`` (the queries attention
reads; the base dtype unless given, as serving stacks run it with a quantised KV cache
dequantised in the kernel; a fused fp8 attention kernel, FlashAttention-3's, or a low-bit NPU
quantises them). Every other tensor (norm and bias weights, embedding tables, the activations
between vector ops, every output) stays in the workload's dtype, its ``base``. The training
issue's roles (gradients, optimizer states, master weights) join through
:func:`register_role`.

**The pass** (:func:`apply_formats`): a captured workload (bytes at its dtype) in, the same
graph out with each op's bytes in its roles' formats and the op's formats in
``attrs["formats"]`` (``w=..,a=..,kv=..,b=..``): templates read it to pick the datapath an op
runs on (:func:`op_formats`), and no longer rescale bytes to a datapath dtype of their own.
Blocks run along a tensor's rows of ``row`` elements (a GEMM's K, an attention head's
dimension): a row that is not a whole number of blocks pays one more scale.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Mapping

from dse.errors import BadInput
from workloads import ir
from workloads.memo import per_workload


@dataclass(frozen=True)
class Format:
    """One number format. ``kind``: ``float`` | ``int`` | ``ternary``; ``bits``: element
    storage bits; ``exp`` / ``man``: exponent and mantissa bits of a float element;
    ``block``: elements sharing one scale (0: a per-tensor scale); ``scale``: the scale's
    format (``e8m0``, ``fp8_e4m3``, ``fp16``) and ``scale_bits`` its bits; ``zero_bits`` a
    zero point's bits per block; ``scaling``: ``tensor`` | ``mx`` | ``nv`` | ``group``;
    ``element``: the plain element type a datapath multiplies; ``blocks``: the block sizes
    the format allows; ``source`` and ``confidence`` ([P] published, [D] datasheet or vendor
    documentation, [E] estimate)."""

    name: str
    kind: str
    bits: int
    exp: int = 0
    man: int = 0
    block: int = 0
    scale: str = ""
    scale_bits: int = 0
    zero_bits: int = 0
    scaling: str = "tensor"
    element: str = ""
    blocks: tuple[int, ...] = ()
    source: str = ""
    confidence: str = "P"

    @property
    def bits_per_element(self) -> float:
        """Storage bits per element, scales and zero points included."""
        if not self.block:
            return float(self.bits)
        return self.bits + (self.scale_bits + self.zero_bits) / self.block

    @property
    def element_format(self) -> "Format":
        """The plain element type (itself for a format without block scales)."""
        return FORMATS[self.element] if self.element and self.element != self.name else self

    @property
    def significand_bits(self) -> int:
        """Bits of precision a value carries: mantissa + hidden bit for floats, the magnitude
        bits for integers (two's complement), 1 for ternary."""
        if self.kind == "float":
            return self.man + 1
        return 1 if self.kind == "ternary" else self.bits - 1

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "element_bits": self.bits,
                "exp": self.exp, "man": self.man, "block": self.block, "scale": self.scale,
                "scale_bits": self.scale_bits, "zero_bits": self.zero_bits,
                "scaling": self.scaling, "element": self.element_format.name,
                "bits_per_element": self.bits_per_element, "source": self.source,
                "confidence": self.confidence}


_IEEE = "IEEE 754-2008 binary formats"
_OCP_FP8 = ("OCP 8-bit Floating Point specification (OFP8) rev 1.0, 2023; Micikevicius et "
            "al., 'FP8 formats for deep learning', 2022")
_OCP_MX = "OCP Microscaling Formats (MX) specification v1.0, 2023, Tables 1-2"
_NVFP4 = ("NVIDIA, 'Introducing NVFP4 for efficient and accurate low-precision inference' "
          "(technical blog, 2025) and the PTX ISA's block-scaled mma (scale_vec::4X, ue4m3)")
_GROUPS = ("Frantar et al., GPTQ (ICLR 2023); Lin et al., AWQ (MLSys 2024): groups along the "
           "input dimension, an FP16 scale (and packed integer zero point) per group")


def _plain() -> dict[str, Format]:
    f = [
        Format("fp32", "float", 32, 8, 23, source=_IEEE),
        Format("tf32", "float", 32, 8, 10, source="NVIDIA A100 Tensor Core GPU architecture "
               "whitepaper, 2020: 8 exponent and 10 mantissa bits, held in 32-bit registers "
               "and memory", confidence="D"),
        Format("bf16", "float", 16, 8, 7, source="Google, 'bfloat16: the secret to high "
               "performance on Cloud TPUs', 2019; Kalamkar et al. 2019"),
        Format("fp16", "float", 16, 5, 10, source=_IEEE),
        Format("fp8_e4m3", "float", 8, 4, 3, source=_OCP_FP8),
        Format("fp8_e5m2", "float", 8, 5, 2, source=_OCP_FP8),
        Format("fp6_e2m3", "float", 6, 2, 3, source=_OCP_MX + " (element types)"),
        Format("fp6_e3m2", "float", 6, 3, 2, source=_OCP_MX + " (element types)"),
        Format("fp4_e2m1", "float", 4, 2, 1, source=_OCP_MX + " (element types)"),
        Format("int8", "int", 8, source="two's complement; per-tensor scale"),
        Format("int4", "int", 4, source="two's complement; per-tensor scale"),
        Format("int2", "int", 2, source="two's complement; per-tensor scale"),
        Format("ternary", "ternary", 2, source="Ma et al., 'The era of 1-bit LLMs' (BitNet "
               "b1.58), 2024: values {-1, 0, 1} (1.58 bits of information) stored packed in "
               "2 bits as its kernels do", confidence="E"),
    ]
    return {x.name: replace(x, element=x.name) for x in f}


def _block_formats(plain: dict[str, Format]) -> dict[str, Format]:
    out = {}
    for name, elem in (("mxfp8_e4m3", "fp8_e4m3"), ("mxfp8_e5m2", "fp8_e5m2"),
                       ("mxfp6_e2m3", "fp6_e2m3"), ("mxfp6_e3m2", "fp6_e3m2"),
                       ("mxfp4", "fp4_e2m1"), ("mxint8", "int8")):
        e = plain[elem]
        out[name] = replace(e, name=name, block=32, scale="e8m0", scale_bits=8, scaling="mx",
                            element=elem, blocks=(32,), source=_OCP_MX)
    e = plain["fp4_e2m1"]
    out["nvfp4"] = replace(e, name="nvfp4", block=16, scale="fp8_e4m3", scale_bits=8,
                           scaling="nv", element="fp4_e2m1", blocks=(16,), source=_NVFP4,
                           confidence="D")
    return out


#: Group sizes a group-wise integer format allows (elements along the reduction dimension).
GROUP_SIZES = (32, 64, 128)
#: Integer element types that take group scales.
GROUPED_INTS = ("int8", "int4", "int2")

#: The table: every format by its canonical name (group-wise integers are built by
#: :func:`get_format` from their names, e.g. ``int4_g128_zp``).
FORMATS: dict[str, Format] = {}
FORMATS.update(_plain())
FORMATS.update(_block_formats(FORMATS))

#: Other names of table formats.
ALIASES = {"fp8": "fp8_e4m3", "e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2", "mxfp4_e2m1": "mxfp4"}

_NAME = re.compile(r"^(?P<base>[a-z0-9_]+?)(?:_(?P<sfx>[gb])(?P<size>\d+))?(?P<zp>_zp)?$")


def allowed_names() -> str:
    """The format names, for messages."""
    groups = "|".join(str(g) for g in GROUP_SIZES)
    return (", ".join(FORMATS) + f"; group-wise {'/'.join(GROUPED_INTS)}_g{{{groups}}}"
            "[_zp]")


@lru_cache(maxsize=512)
def get_format(name: str, field: str = "format") -> Format:
    """The :class:`Format` called ``name`` (see the module docstring); :class:`BadInput`
    naming ``field`` when it is not one, or its block or group size is not allowed."""
    if not isinstance(name, str):
        raise BadInput(field, name, f"expected a format name: {allowed_names()}")
    text = ALIASES.get(name.strip().lower(), name.strip().lower())
    if text in FORMATS:
        return FORMATS[text]
    m = _NAME.match(text)
    base = ALIASES.get(m.group("base"), m.group("base")) if m else ""
    if not m or base not in FORMATS:
        raise BadInput(field, name, f"expected a format name: {allowed_names()}")
    f, size, zp = FORMATS[base], m.group("size"), bool(m.group("zp"))
    size_i = int(size) if size else 0
    if m.group("sfx") == "b":
        if not f.block:
            raise BadInput(field, name, f"{base} has no blocks (a per-tensor scale); block "
                           "formats: " + ", ".join(k for k, v in FORMATS.items() if v.block))
        if size_i not in f.blocks:
            raise BadInput(field, name, f"{base} allows blocks of "
                           + ", ".join(map(str, f.blocks)) + f" ({f.source.split(',')[0]})")
        if zp:
            raise BadInput(field, name, f"{base} has no zero point (its scale is a power of "
                           "two or an FP8 value)")
        return f
    if m.group("sfx") == "g":
        if base not in GROUPED_INTS:
            raise BadInput(field, name, "group scales are for " + ", ".join(GROUPED_INTS)
                           + f" (MX and NVFP4 have their own blocks); got {base}")
        if size_i not in GROUP_SIZES:
            raise BadInput(field, name, f"{base} groups of " + ", ".join(map(str, GROUP_SIZES))
                           + " elements")
        canon = f"{base}_g{size_i}" + ("_zp" if zp else "")
        return replace(f, name=canon, block=size_i, scale="fp16", scale_bits=16,
                       zero_bits=f.bits if zp else 0, scaling="group", element=base,
                       blocks=GROUP_SIZES, source=_GROUPS)
    if zp:
        raise BadInput(field, name, "a zero point needs groups: e.g. int4_g128_zp")
    raise BadInput(field, name, f"expected a format name: {allowed_names()}")


def tensor_bytes(fmt: Format, elements: float, row: int | None = None) -> int:
    """Bytes of ``elements`` values in ``fmt``, scales included: blocks of ``fmt.block``
    along rows of ``row`` elements (a row that is not a whole number of blocks pays one more
    scale), or over the flat tensor without ``row``; rounded up to a whole byte."""
    if elements <= 0:
        return 0
    bits = elements * fmt.bits
    if fmt.block:
        if row and row > 0:
            blocks = (elements / row) * math.ceil(row / fmt.block)
        else:
            blocks = math.ceil(elements / fmt.block)
        bits += blocks * (fmt.scale_bits + fmt.zero_bits)
    return int(math.ceil(bits / 8 - 1e-9))


# ------------------------------------------------------------------------------- roles

#: Roles a workload's tensors play and what each covers. Roles not given take the
#: workload's dtype (``base``). Extended by :func:`register_role`.
ROLES: dict[str, str] = {
    "weights": "weight operands of matmul, conv and moe ops (the head apart)",
    "activations": "activation operands read by matmul, conv, moe and attention ops",
    "kv": "the KV cache: read by attention, written by the append",
    "head": "weights of the matmuls whose output leaves the graph (LM head, classifier); "
            "the workload's dtype unless given",
    "attention": "queries read by attention; the workload's dtype unless given",
}


def register_role(name: str, description: str) -> None:
    """Add a tensor role (e.g. ``gradients``, ``optimizer``, ``master`` for training steps):
    it parses in ``--formats`` and study spaces, defaults to the workload's dtype, and
    :func:`role_format` returns its format for the pass that applies it."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise BadInput("role", name, "expected a lower-case identifier")
    ROLES.setdefault(name, description)


@dataclass(frozen=True)
class Formats:
    """A format per role (every role of :data:`ROLES`; unlisted ones are ``base``)."""

    base: str
    roles: tuple[tuple[str, str], ...]

    def of(self, role: str) -> Format:
        """The :class:`Format` of ``role`` (``base`` for a role not given)."""
        return get_format(dict(self.roles).get(role, self.base))

    def to_dict(self) -> dict[str, str]:
        out = {r: self.base for r in ROLES}
        out.update(dict(self.roles))
        return out

    def key(self) -> str:
        """A short canonical string (cache keys, labels)."""
        return ",".join(f"{r}={n}" for r, n in sorted(self.to_dict().items()))

    @property
    def is_base(self) -> bool:
        """True when every role is the base dtype."""
        return all(get_format(n).name == get_format(self.base).name for _, n in self.roles)


def parse_formats(spec: "str | Mapping[str, str] | Formats | None", base: str = "bf16",
                  field: str = "formats") -> Formats | None:
    """``spec`` (``"weights=int4_g128,activations=fp8_e4m3,kv=fp8_e4m3"``, a dict, or
    None) as :class:`Formats` over ``base`` (the workload's dtype); None for None. Each
    role and format is checked (:class:`BadInput` naming ``field.role``)."""
    if spec is None or isinstance(spec, Formats):
        return spec
    if isinstance(spec, str):
        pairs: dict[str, str] = {}
        for part in (p.strip() for p in spec.split(",")):
            if "=" not in part:
                raise BadInput(field, spec, "expected role=format pairs separated by commas, "
                               "e.g. weights=int4_g128,activations=fp8_e4m3,kv=fp8_e4m3")
            role, _, name = part.partition("=")
            if role.strip() in pairs:
                raise BadInput(f"{field}.{role.strip()}", spec, "expected each role once")
            pairs[role.strip()] = name.strip()
        spec = pairs
    if not isinstance(spec, Mapping):
        raise BadInput(field, spec, "expected role=format pairs or a mapping of role to format")
    get_format(base, "dtype")
    roles = []
    for role, name in spec.items():
        if role not in ROLES:
            raise BadInput(f"{field}.{role}", role, "expected a role: " + ", ".join(ROLES))
        roles.append((str(role), get_format(name, f"{field}.{role}").name))
    return Formats(base=get_format(base, "dtype").name, roles=tuple(sorted(roles)))


# ------------------------------------------------------------------------------- per op

@dataclass(frozen=True)
class OpFormats:
    """The formats one op's tensors are in: ``w`` its weights, ``a`` the activations it reads,
    ``kv`` its KV cache, ``base`` everything else (its outputs)."""

    w: Format
    a: Format
    kv: Format
    base: Format

    def as_formats(self) -> "Formats":
        """These formats as roles (for ops an op is costed as: a composite op's parts)."""
        return Formats(base=self.base.name, roles=(("activations", self.a.name),
                                                   ("kv", self.kv.name),
                                                   ("weights", self.w.name)))

    def operands(self, kind: str) -> tuple[Format, Format]:
        """The two operands a GEMM-class op of ``kind`` multiplies: (activations, weights),
        or (activations, KV cache) for attention."""
        if kind in (ir.ATTENTION, ir.SPARSE_ATTENTION):
            return self.a, self.kv
        return self.a, self.w


@lru_cache(maxsize=1024)
def _parse_op(text: str) -> OpFormats:
    d = dict(part.split("=", 1) for part in text.split(","))
    return OpFormats(get_format(d["w"]), get_format(d["a"]), get_format(d["kv"]),
                     get_format(d["b"]))


def op_formats(op: ir.Op) -> OpFormats | None:
    """The formats of ``op``'s tensors, or None for an op of a workload without formats
    (its bytes are at its dtype and a template may run it on its own datapath)."""
    text = op.attrs.get("formats")
    return _parse_op(text) if text else None


def has_formats(workload: ir.Workload) -> bool:
    """True when ``workload`` went through :func:`apply_formats`."""
    return per_workload(workload, "has-formats",
                        lambda: any("formats" in op.attrs for op in workload.ops))


#: Op kinds whose activation operands are in the ``activations`` format.
GEMM_KINDS = (ir.MATMUL, ir.CONV, ir.MOE, ir.ATTENTION, ir.SPARSE_ATTENTION)


def head_ops(workload: ir.Workload) -> set[str]:
    """The weight matmuls whose output leaves the graph (no op consumes it): an LM head or a
    classifier (the same rule as :func:`workloads.iteration.logit_ops`)."""
    g = workload.graph
    return {op.name for op in workload.ops if op.kind == ir.MATMUL
            and op.attrs.get("weight_operand") and not g.out_degree(op.name)}


def _core_weights(op: ir.Op, bits: float | None = None) -> int:
    """Weight elements of a GEMM-class op that its weight format covers: a matmul's K x N
    (a bias stays in the base dtype), a conv's filter tensor, every weight of a moe op (from
    its bytes: at the base dtype, or at ``bits`` per element once formatted)."""
    b = max(op.bytes_per_element, 1)
    total = op.weight_bytes // b if bits is None else int(round(op.weight_bytes * 8 / bits))
    a = op.attrs
    if op.kind == ir.MATMUL and a.get("n") and a.get("k"):
        core = int(a["n"]) * int(a["k"])
        return core if bits is not None else min(total, core)
    if op.kind == ir.CONV and len(op.input_shapes) > 1 and op.input_shapes[1]:
        core = math.prod(op.input_shapes[1])
        return core if bits is not None else min(total, core)
    return total


def _row(op: ir.Op) -> int | None:
    """Elements along one row of the op's blocked operands (the reduction dimension)."""
    a = op.attrs
    if op.kind in (ir.ATTENTION, ir.SPARSE_ATTENTION):
        return int(a.get("head_dim") or 0) or None
    if op.kind == ir.MATMUL and a.get("k"):
        return int(a["k"])
    if op.kind == ir.MOE and a.get("gemms"):
        return int(a["gemms"][0][1])
    if op.kind == ir.CONV and a.get("gemm_k"):
        return int(a["gemm_k"])
    return None


def _kv_row(op: ir.Op) -> int | None:
    if op.kind in (ir.ATTENTION, ir.SPARSE_ATTENTION):
        return int(op.attrs.get("head_dim") or 0) or None
    shapes = op.output_shapes or op.input_shapes
    return int(shapes[0][-1]) if shapes and shapes[0] else None


def _convert(nbytes: int, b: int, fmt: Format, row: int | None) -> int:
    """``nbytes`` of elements of ``b`` bytes, in ``fmt``."""
    return tensor_bytes(fmt, nbytes // b, row) if nbytes else 0


def format_op(op: ir.Op, fm: Formats, head: bool) -> ir.Op:
    """``op`` (bytes at its dtype) with its bytes in its roles' formats and
    ``attrs["formats"]`` naming them."""
    b = max(op.bytes_per_element, 1)
    base = get_format(fm.base)
    w_fmt = fm.of("head" if head else "weights")
    gemm = op.kind in GEMM_KINDS
    if op.kind in (ir.ATTENTION, ir.SPARSE_ATTENTION):
        a_fmt = fm.of("attention")
    elif gemm and op.weight_bytes and (not head or w_fmt.name != base.name):
        a_fmt = fm.of("activations")
    else:
        a_fmt = base
    kv_fmt = fm.of("kv")
    weight_fmt = w_fmt if gemm and op.weight_bytes else base
    changes: dict[str, Any] = {}
    if op.weight_bytes and weight_fmt.name != base.name:
        core = _core_weights(op)
        row = int(op.attrs["k"]) if op.kind == ir.MATMUL and op.attrs.get("k") else _row(op)
        rest = op.weight_bytes - core * b
        changes["weight_bytes"] = tensor_bytes(weight_fmt, core, row) + rest
    if a_fmt.name != base.name and op.activation_bytes_read:
        changes["activation_bytes_read"] = _convert(op.activation_bytes_read, b, a_fmt, _row(op))
    if kv_fmt.name != base.name:
        row = _kv_row(op)
        if op.kv_bytes_read:
            changes["kv_bytes_read"] = _convert(op.kv_bytes_read, b, kv_fmt, row)
        if op.kv_bytes_written:
            changes["kv_bytes_written"] = _convert(op.kv_bytes_written, b, kv_fmt, row)
    text = f"w={weight_fmt.name},a={a_fmt.name},kv={kv_fmt.name},b={base.name}"
    return replace(op, attrs={**op.attrs, "formats": text}, **changes)


def apply_formats(workload: ir.Workload, spec: "str | Mapping[str, str] | Formats | None"
                  ) -> ir.Workload:
    """``workload`` with every op's bytes in its roles' formats (see the module docstring);
    ``workload`` itself when ``spec`` is None. The graph, FLOPs and edges are unchanged
    (outputs, and so the tensors between ops, stay in the base dtype)."""
    fm = parse_formats(spec, workload.dtype)
    if fm is None:
        return workload
    if has_formats(workload):
        raise BadInput("formats", fm.key(), "a workload whose formats are already applied "
                       "(apply them once, to the captured workload)")
    if fm.base != get_format(workload.dtype).name:
        raise BadInput("formats", fm.base, f"the workload's dtype {workload.dtype}")
    heads = head_ops(workload)
    graph = workload.graph.copy()
    for name, data in graph.nodes(data=True):
        data["op"] = format_op(data["op"], fm, name in heads)
    out = replace(workload, graph=graph)
    out.__dict__.pop("ops", None)
    per_workload(out, "formats", lambda: fm)
    return out


def workload_formats(workload: ir.Workload) -> Formats | None:
    """The :class:`Formats` applied to ``workload`` (None when none were): kept with the
    workload the pass made, else read back from its ops."""
    if not has_formats(workload):
        return None

    def read() -> Formats:
        ops = [(op, op_formats(op)) for op in workload.ops if op.attrs.get("formats")]
        base = ops[0][1].base.name
        roles = {}
        heads = head_ops(workload)
        for op, f in ops:
            if op.kind in (ir.ATTENTION, ir.SPARSE_ATTENTION):
                roles.setdefault("attention", f.a.name)
            elif op.kind in GEMM_KINDS and op.weight_bytes:
                role = "head" if op.name in heads else "weights"
                roles.setdefault(role, f.w.name)
                if role == "weights" or f.w.name != base:
                    roles.setdefault("activations", f.a.name)
            if op.kv_bytes_read or op.kv_bytes_written:
                roles.setdefault("kv", f.kv.name)
        return Formats(base=base, roles=tuple(sorted(roles.items())))
    return per_workload(workload, "formats", read)


def role_format(workload: ir.Workload, role: str) -> Format:
    """The format of ``role`` in ``workload`` (its dtype when it has no formats)."""
    fm = workload_formats(workload)
    return fm.of(role) if fm is not None else get_format(workload.dtype)


# ------------------------------------------------------------------------------- sizes

def weight_elements(op: ir.Op) -> int:
    """Parameter elements ``op`` reads (the inverse of the pass: its weight bytes back in
    elements, whatever format they are in)."""
    f = op_formats(op)
    b = max(op.bytes_per_element, 1)
    if f is None or f.w.name == f.base.name or not op.weight_bytes:
        return op.weight_bytes // b
    if op.kind == ir.MOE:
        return int(round(op.weight_bytes * 8 / f.w.bits_per_element))
    core = _core_weights(op, f.w.bits_per_element)
    rest = max(0, op.weight_bytes - tensor_bytes(f.w, core, _row(op)))
    return core + rest // b


def kv_element_bytes(op: ir.Op) -> float:
    """Bytes per KV-cache element of ``op`` (scales included): its KV format's, else its
    dtype's."""
    f = op_formats(op)
    return f.kv.bits_per_element / 8 if f is not None else float(op.bytes_per_element)


def kv_bytes(op: ir.Op, elements: float, row: int | None = None) -> int:
    """Bytes of ``elements`` KV-cache values of ``op`` (rows of ``row``, a head's
    dimension)."""
    f = op_formats(op)
    if f is None:
        return int(elements * op.bytes_per_element)
    return tensor_bytes(f.kv, elements, row)


def weights_bytes(workload: ir.Workload) -> float:
    """Bytes of every parameter once, each in its role's format: the workload's parameters
    at its dtype, less what its quantised weights save (a matmul's K x N, a conv's filter,
    every expert of a moe op). A table tied between the head and an embedding (GPT-2) is
    kept once when the head stays in the base dtype, and twice (the embedding's copy in the
    base dtype, the head's in its format) when the head is quantised."""
    b = workload.bytes_per_element
    legacy = float(workload.params * b)
    if not has_formats(workload):
        return legacy

    def build() -> float:
        heads = head_ops(workload)
        tied = _tied_heads(workload, heads)
        total = legacy
        for op in workload.ops:
            f = op_formats(op)
            if f is None or f.w.name == f.base.name or not op.weight_bytes:
                continue
            if op.kind == ir.MOE and op.attrs.get("params_per_expert") and op.attrs.get(
                    "experts"):
                core = int(op.attrs["params_per_expert"]) * int(op.attrs["experts"])
                row = None
            else:
                core = _core_weights(op, f.w.bits_per_element)
                row = _row(op)
            quantised = tensor_bytes(f.w, core, row)
            if op.name in tied:
                total += quantised          # tied: the base copy stays for the embedding
            else:
                total += quantised - core * b
        return total
    return per_workload(workload, "weights-bytes", build)


def _tied_heads(workload: ir.Workload, heads: set[str]) -> set[str]:
    """Head ops whose weight is an embedding table counted once in ``workload.params``
    (tied input and output embeddings): the parameters the ops hold exceed ``params`` by
    about the head's weights."""
    tables = {math.prod(op.input_shapes[0]) for op in workload.ops
              if op.kind == ir.EMBEDDING and op.input_shapes and op.input_shapes[0]}
    if not heads or not tables:
        return set()
    held = 0
    for op in workload.ops:
        if op.kind == ir.EMBEDDING and op.input_shapes and op.input_shapes[0]:
            held += math.prod(op.input_shapes[0])
        elif op.kind == ir.MOE and op.attrs.get("params_per_expert"):
            held += int(op.attrs["params_per_expert"]) * int(op.attrs.get("experts", 1))
        else:
            held += weight_elements(op)
    excess = held - workload.params
    out = set()
    for name in sorted(heads):
        op = workload.graph.nodes[name]["op"]
        f = op_formats(op)
        core = _core_weights(op, f.w.bits_per_element if f else None)
        if core in tables and excess >= core // 2:
            out.add(name)
            excess -= core
    return out


def formatted(workload: ir.Workload, spec: "str | Mapping[str, str] | Formats | None"
              ) -> ir.Workload:
    """:func:`apply_formats`, kept beside ``workload`` per distinct formats (the same object
    back for the same formats, so caches keyed by workload keep working)."""
    fm = parse_formats(spec, workload.dtype)
    if fm is None:
        return workload
    return per_workload(workload, ("formatted", fm.key()), lambda: apply_formats(workload, fm))
