"""What a template costs a composite op as: its simpler parts, each with an expected count.

A ``moe`` op runs per-expert matmuls (``workloads/moe.py``); a ``recurrent`` op runs, per layer
and direction, one input matmul over all steps and then, at every step, a matmul on the
previous state plus its gate arithmetic; a ``scan`` op is vector work (its FLOPs, one lane
operation each) over its compulsory bytes. Templates cost each part with their own ``cost``
and add them up (``accelerators/composite.py``): the parts run one after another on one device.
"""

from __future__ import annotations

from workloads import formats, ir, moe


def parts(op: ir.Op) -> list[tuple[float, ir.Op]]:
    """``(count, op)`` pairs whose costs, times their counts, add up to ``op``'s (in the op's
    number formats when it has them, :mod:`workloads.formats`)."""
    f = formats.op_formats(op)
    out = _parts(op)
    if f is None:
        return out
    fm = f.as_formats()
    return [(c, formats.format_op(p, fm, False)) for c, p in out]


def _parts(op: ir.Op) -> list[tuple[float, ir.Op]]:
    if op.kind == ir.MOE:
        return moe.parts(op)
    if op.kind == ir.RECURRENT:
        return _recurrent_parts(op)
    if op.kind == ir.SCAN:
        return [(1.0, make_part(op, "scan", ir.ELEMENTWISE, flops=op.flops, weight=op.weight_bytes,
                            read=op.activation_bytes_read + op.kv_bytes_read,
                            written=op.activation_bytes_written + op.kv_bytes_written,
                            attrs={"elements": op.flops}))]
    raise ValueError(f"{op.kind} is not a composite kind")


def _recurrent_parts(op: ir.Op) -> list[tuple[float, ir.Op]]:
    a, b = op.attrs, op.bytes_per_element
    batch, steps, gates = a["batch"], a["steps"], a["gates"]
    per = max(a["weights_per_cell"], 1)
    shapes = a["weight_shapes"]
    out: list[tuple[float, ir.Op]] = []
    for cell in range(0, len(shapes), per):
        group = shapes[cell:cell + per]
        for j, (n, k) in enumerate(group):
            m, count = (batch * steps, 1.0) if j == 0 else (batch, float(steps))
            out.append((count, make_part(op, f"cell{cell // per}.w{j}", ir.MATMUL, flops=2 * m * n * k,
                                     weight=n * k * b, read=m * k * b, written=m * n * b,
                                     attrs={"m": m, "n": n, "k": k, "batch": 1,
                                            "weight_operand": True})))
        e = batch * group[0][0]
        out.append((float(steps), make_part(op, f"cell{cell // per}.gates", ir.ELEMENTWISE,
                                        flops=e * gates, read=2 * e * b, written=e * b // gates,
                                        attrs={"elements": e})))
    return out


def make_part(op: ir.Op, suffix: str, kind: str, flops: int = 0, weight: int = 0, read: int = 0,
          written: int = 0, attrs: dict | None = None) -> ir.Op:
    return ir.Op(name=f"{op.name}.{suffix}", kind=kind, target=op.target, input_shapes=(),
                 output_shapes=(), dtype=op.dtype, bytes_per_element=op.bytes_per_element,
                 flops=int(flops), weight_bytes=int(weight), activation_bytes_read=int(read),
                 activation_bytes_written=int(written), attrs=dict(attrs or {}))
