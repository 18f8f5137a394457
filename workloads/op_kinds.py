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
reshape_as tensor_split hsplit vsplit dsplit unsafe_split unsafe_split_with_sizes unsafe_chunk
narrow diagonal unfold view_as_real view_as_complex real imag resolve_conj resolve_neg conj
native_dropout alpha_dropout feature_alpha_dropout _reshape_alias _unsafe_view_copy
empty_strided rand rand_like randn randn_like randint randint_like randperm bernoulli
eye linspace logspace tensor align_to rename refine_names sym_ite sym_max sym_min sym_not
meshgrid
""".split())

COPY = frozenset("""
clone cat concat concatenate stack repeat repeat_interleave copy copy_ index_put index_put_ index_copy
pad_sequence
constant_pad_nd pad roll flip narrow_copy pixel_shuffle pixel_unshuffle
reflection_pad1d reflection_pad2d reflection_pad3d replication_pad1d replication_pad2d
replication_pad3d circular_pad1d circular_pad2d im2col col2im channel_shuffle
native_channel_shuffle scatter scatter_add scatter_reduce index_add index_fill masked_scatter
slice_scatter select_scatter diagonal_scatter as_strided_scatter tile broadcast_to
upsample_nearest1d upsample_nearest2d upsample_nearest3d _upsample_nearest_exact1d
_upsample_nearest_exact2d _upsample_nearest_exact3d max_unpool2d max_unpool3d rot90 one_hot
""".split())

MATMUL = frozenset("linear mm bmm addmm baddbmm matmul einsum mv addmv dot vdot".split())
CONV = frozenset("conv1d conv2d conv3d convolution _convolution conv_transpose1d "
                 "conv_transpose2d conv_transpose3d".split())
#: The routed experts of a mixture of experts (``workloads/moe_op.py``) and bare grouped
#: matmuls (``torch._grouped_mm``, transformers' fallback) whose routing the graph hides.
MOE = frozenset("moe_experts _grouped_mm grouped_mm transformers::grouped_mm_fallback".split())
SCAN = frozenset({"selective_scan"})
RECURRENT = frozenset("lstm gru rnn_tanh rnn_relu".split())
ATTENTION = frozenset("scaled_dot_product_attention _scaled_dot_product_flash_attention "
                      "_scaled_dot_product_efficient_attention "
                      "_scaled_dot_product_flash_attention_for_cpu "
                      "_scaled_dot_product_cudnn_attention mla_attention".split())
NORM = frozenset("""
layer_norm rms_norm batch_norm _native_batch_norm_legit_no_training native_batch_norm
native_layer_norm group_norm native_group_norm instance_norm _batch_norm_with_update
""".split())
SOFTMAX = frozenset("softmax _softmax log_softmax _log_softmax _safe_softmax".split())
REDUCTION = frozenset("""
mean sum amax amin max min prod var std var_mean max_pool1d max_pool2d max_pool3d
max_pool2d_with_indices avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d
adaptive_avg_pool2d _adaptive_avg_pool2d adaptive_max_pool2d norm linalg_vector_norm argmax
argmin cumsum logsumexp topk all any _is_all_true _is_any_true sort argsort msort histc bincount kthvalue median
nanmedian mode searchsorted bucketize cumprod cummax cummin logcumsumexp std_mean aminmax
nansum nanmean count_nonzero adaptive_avg_pool3d _adaptive_avg_pool3d adaptive_max_pool1d
adaptive_max_pool3d max_pool3d_with_indices max_pool1d_with_indices fractional_max_pool2d
lp_pool1d lp_pool2d linalg_norm frobenius_norm nuclear_norm renorm
""".split())
EMBEDDING = frozenset("embedding index_select gather index take embedding_bag".split())
ELEMENTWISE = frozenset("""
add sub rsub mul div neg pow rsqrt sqrt exp exp2 log log2 log1p tanh sigmoid relu relu6 gelu
silu hardtanh hardswish hardsigmoid clamp clamp_min clamp_max where masked_fill abs sin cos
minimum maximum erf reciprocal bitwise_xor bitwise_and bitwise_or bitwise_not floor frac
remainder eq ne lt gt le ge logical_and logical_or logical_not __or__ __ior__ __and__ __iand__
__xor__ __ixor__ leaky_relu elu mish square
addcmul addcdiv lerp floor_divide fmod trunc round sign ceil softplus glu sub_ add_ mul_ div_
relu_ silu_ gelu_ hardtanh_ sigmoid_ tanh_ fill fill_ __and__ __or__ __xor__ bitwise_left_shift
bitwise_right_shift isnan isinf nan_to_num diff
upsample_linear1d upsample_bilinear2d upsample_bicubic2d upsample_trilinear3d
_upsample_bilinear2d_aa _upsample_bicubic2d_aa grid_sampler grid_sampler_2d grid_sampler_3d
affine_grid_generator prelu _prelu_kernel rrelu celu selu threshold hardshrink softshrink
tanhshrink log_sigmoid log_sigmoid_forward logit atan atan2 tan asin acos sinh cosh asinh acosh
atanh expm1 sgn heaviside isfinite isneginf isposinf logical_xor xlogy lgamma digamma erfc
erfinv log10 sinc hypot copysign nextafter polar outer float_power true_divide multiply
subtract divide negative absolute clip exponential fmax fmin
""".split())
#: The backward ATen ops of a training step's joint graph (``workloads/training.py``): each the
#: kind of the forward op it differentiates. Attention and convolution backward keep their
#: kernels' GEMM structure in their attrs (``workloads/backward_attrs.py``).
BACKWARD = {
    ir.ELEMENTWISE: frozenset("""
gelu_backward silu_backward threshold_backward sigmoid_backward tanh_backward hardtanh_backward
hardswish_backward hardsigmoid_backward leaky_relu_backward elu_backward softplus_backward
mish_backward log_sigmoid_backward native_dropout_backward mse_loss mse_loss_backward
smooth_l1_loss smooth_l1_loss_backward l1_loss binary_cross_entropy_with_logits
binary_cross_entropy binary_cross_entropy_backward avg_pool2d_backward avg_pool3d_backward
_adaptive_avg_pool2d_backward _adaptive_avg_pool3d_backward upsample_nearest2d_backward
upsample_bilinear2d_backward gelu_ silu_
""".split()),
    ir.NORM: frozenset("""
native_layer_norm_backward native_batch_norm_backward native_group_norm_backward
_native_batch_norm_legit _native_batch_norm_legit_functional cudnn_batch_norm
cudnn_batch_norm_backward _fused_rms_norm _fused_rms_norm_backward batch_norm_backward
""".split()),
    ir.SOFTMAX: frozenset("_softmax_backward_data _log_softmax_backward_data".split()),
    ir.REDUCTION: frozenset("nll_loss_forward nll_loss nll_loss2d_forward".split()),
    ir.DATA_MOVEMENT: frozenset("""
nll_loss_backward nll_loss2d_backward embedding_dense_backward embedding_backward
slice_backward select_backward index_select_backward unfold_backward _unsafe_index_put
max_pool2d_with_indices_backward max_pool3d_with_indices_backward gather_backward
""".split()),
    ir.ATTENTION: frozenset("""
_scaled_dot_product_flash_attention_for_cpu_backward _scaled_dot_product_flash_attention_backward
_scaled_dot_product_efficient_attention_backward _scaled_dot_product_cudnn_attention_backward
_flash_attention_backward _efficient_attention_backward
_scaled_dot_product_fused_attention_overrideable_backward
""".split()),
    ir.CONV: frozenset("convolution_backward convolution_backward_overrideable".split()),
}

#: Custom ops of this project, by their qualified name without ``::`` prefix handling.
HASHGRID = frozenset({"hash_grid_encode"})
#: Sparse attention: this project's GNA op and torch's flex_attention higher-order op.
SPARSE_ATTENTION = frozenset({"gna_attention", "flex_attention"})

_TABLE = [(MATMUL, ir.MATMUL), (CONV, ir.CONV), (ATTENTION, ir.ATTENTION), (NORM, ir.NORM),
          (SOFTMAX, ir.SOFTMAX), (REDUCTION, ir.REDUCTION), (EMBEDDING, ir.EMBEDDING),
          (ELEMENTWISE, ir.ELEMENTWISE), (COPY, ir.DATA_MOVEMENT), (HASHGRID, ir.HASHGRID),
          (SPARSE_ATTENTION, ir.SPARSE_ATTENTION),
          (MOE, ir.MOE), (SCAN, ir.SCAN), (RECURRENT, ir.RECURRENT)] + [
    (names, kind) for kind, names in BACKWARD.items()]

#: Elementwise operations per output element for the non-GEMM kinds (FLOP convention of this
#: project for ops that FlopCounterMode does not count): normalisation ~5 (mean, var, sub,
#: mul, add), softmax ~5 (max, sub, exp, sum, div), everything else 1.
FLOPS_PER_ELEMENT = {ir.NORM: 5, ir.SOFTMAX: 5, ir.ELEMENTWISE: 1, ir.REDUCTION: 1}


def classify(aten_name: str) -> str | None:
    """Op kind of an ATen operator name, ``"free"`` for views, or None when unknown. An
    in-place variant (``relu_``, ``zero_``, ``dropout_``) is the kind of its out-of-place op."""
    if aten_name in FREE:
        return "free"
    for names, kind in _TABLE:
        if aten_name in names:
            return kind
    if aten_name.endswith("_") and not aten_name.endswith("__"):
        base = aten_name[:-1]
        return {"zero": ir.ELEMENTWISE, "normal": "free", "uniform": "free"}.get(
            base, classify(base) if base else None)
    return None
