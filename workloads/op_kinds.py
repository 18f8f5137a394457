"""Which op kind each ATen operator of an exported graph belongs to.

Names are ATen overload packets without the ``aten::`` prefix (``linear``, ``conv2d``, ...).
``FREE`` ops only change how a tensor is viewed (no bytes move); ``COPY`` ops move bytes.
An operator in no table becomes an ``unknown`` op: counted, listed and warned about.
"""

from workloads import ir

FREE = frozenset("""
view _unsafe_view reshape unsqueeze squeeze expand expand_as slice select permute transpose t
alias detach flatten unflatten split split_with_sizes chunk unbind as_strided dropout
feature_dropout _to_copy to type_as lift_fresh_copy sym_size sym_numel sym_stride
zeros zeros_like ones ones_like full full_like empty empty_like arange scalar_tensor
_assert_tensor_metadata _assert_scalar sym_constrain_range_for_size item view_as
triu tril new_ones new_zeros new_full new_empty numpy_T mT mH adjoint matrix_H movedim moveaxis swapaxes swapdims
""".split())

COPY = frozenset("""
clone cat concat stack repeat repeat_interleave copy copy_ index_put index_put_ index_copy
constant_pad_nd pad roll flip narrow_copy pixel_shuffle pixel_unshuffle
""".split())

MATMUL = frozenset("linear mm bmm addmm baddbmm matmul".split())
CONV = frozenset("conv1d conv2d conv3d convolution _convolution".split())
ATTENTION = frozenset("scaled_dot_product_attention _scaled_dot_product_flash_attention "
                      "_scaled_dot_product_efficient_attention "
                      "_scaled_dot_product_flash_attention_for_cpu".split())
NORM = frozenset("""
layer_norm rms_norm batch_norm _native_batch_norm_legit_no_training native_batch_norm
native_layer_norm group_norm native_group_norm instance_norm _batch_norm_with_update
""".split())
SOFTMAX = frozenset("softmax _softmax log_softmax _log_softmax".split())
REDUCTION = frozenset("""
mean sum amax amin max min prod var std var_mean max_pool1d max_pool2d max_pool3d
max_pool2d_with_indices avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d
adaptive_avg_pool2d _adaptive_avg_pool2d adaptive_max_pool2d norm linalg_vector_norm argmax
argmin cumsum logsumexp topk all any
""".split())
EMBEDDING = frozenset("embedding index_select gather index take embedding_bag".split())
ELEMENTWISE = frozenset("""
add sub rsub mul div neg pow rsqrt sqrt exp exp2 log log2 log1p tanh sigmoid relu relu6 gelu
silu hardtanh hardswish hardsigmoid clamp clamp_min clamp_max where masked_fill abs sin cos
minimum maximum erf reciprocal bitwise_xor bitwise_and bitwise_or bitwise_not floor frac
remainder eq ne lt gt le ge logical_and logical_or logical_not leaky_relu elu mish square
addcmul addcdiv lerp floor_divide fmod trunc round sign ceil softplus glu sub_ add_ mul_ div_
relu_ silu_ gelu_ hardtanh_ sigmoid_ tanh_ fill fill_ __and__ __or__ __xor__ bitwise_left_shift
bitwise_right_shift isnan isinf nan_to_num diff
""".split())
#: Custom ops of this project, by their qualified name without ``::`` prefix handling.
HASHGRID = frozenset({"hash_grid_encode"})
#: Sparse attention: this project's GNA op and torch's flex_attention higher-order op.
SPARSE_ATTENTION = frozenset({"gna_attention", "flex_attention"})

_TABLE = [(MATMUL, ir.MATMUL), (CONV, ir.CONV), (ATTENTION, ir.ATTENTION), (NORM, ir.NORM),
          (SOFTMAX, ir.SOFTMAX), (REDUCTION, ir.REDUCTION), (EMBEDDING, ir.EMBEDDING),
          (ELEMENTWISE, ir.ELEMENTWISE), (COPY, ir.DATA_MOVEMENT), (HASHGRID, ir.HASHGRID),
          (SPARSE_ATTENTION, ir.SPARSE_ATTENTION)]

#: Elementwise operations per output element for the non-GEMM kinds (FLOP convention of this
#: project for ops that FlopCounterMode does not count): normalisation ~5 (mean, var, sub,
#: mul, add), softmax ~5 (max, sub, exp, sum, div), everything else 1.
FLOPS_PER_ELEMENT = {ir.NORM: 5, ir.SOFTMAX: 5, ir.ELEMENTWISE: 1, ir.REDUCTION: 1}


def classify(aten_name: str) -> str | None:
    """Op kind of an ATen operator name, ``"free"`` for views, or None when unknown."""
    if aten_name in FREE:
        return "free"
    for names, kind in _TABLE:
        if aten_name in names:
            return kind
    return None
