"""Data-parallel training overheads (issue 31): NCCL's slow-down of overlapped compute,
FSDP2's copies and hook host time (simulators/train_overheads.py), their calibration from
the microbenchmark (benchmarks/train_comm_fit.py), and that they never make a step faster."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dse.errors import BadInput
from simulators import train_overheads as to
from simulators.training import _overlapped

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


def test_bad_calibration_names_the_field():
    with pytest.raises(BadInput, match=r"compute_slowdown.*factors in \[1, 4\]"):
        to.from_dict({"compute_slowdown": {"all_gather": 0.5}})
    with pytest.raises(BadInput, match="compute_slowdown"):
        to.from_dict({"compute_slowdown": {"broadcast": 1.1}})
    with pytest.raises(BadInput, match=r"fsdp_unit_host_s.*seconds"):
        to.from_dict({"fsdp_unit_host_s": 1.0})
    with pytest.raises(BadInput, match=r"fsdp_forward_share.*a share"):
        to.from_dict({"fsdp_forward_share": 1.5})
    with pytest.raises(BadInput, match="calibration"):
        to.from_dict([1, 2])


def test_unknown_link_has_the_terms_off():
    assert to.overheads_for("no-such-link") is to.OFF
    assert to.overheads_for(None) is to.OFF
    assert to.OFF.compute("all_reduce") == 1.0 and to.OFF.unit_host_s(12) == 0.0


def test_terms_apply_inside_one_node_only():
    """Measured on four GPUs of one NVLink domain: a group across nodes gets none."""
    from accelerators.registry import make_accelerator
    from accelerators.system import System
    sysm = System(make_accelerator("gpu:h100"), "dgx-h100", devices=16, topology="two_level",
                  group_size=8, nic="cx7")
    assert sysm.topology.node_of(0) != sysm.topology.node_of(15)
    assert to.overheads_in(sysm, [0, 1, 2, 3]) is to.overheads_for("nvlink4")
    assert to.overheads_in(sysm, [0, 15]) is to.OFF
    assert to.overheads_in(None, [0, 1]) is to.OFF


def test_slowed_counts_overlap_once_up_to_the_compute():
    t = to.from_dict({"compute_slowdown": {"all_gather": 1.5, "reduce_scatter": 1.2}})
    assert to.slowed(2.0, {}, t) == 2.0
    assert to.slowed(2.0, {"all_gather": 1.0}, t) == pytest.approx(2.5)
    # more overlap than compute: only the compute's length is slowed
    assert to.slowed(1.0, {"all_gather": 3.0, "reduce_scatter": 3.0}, t) == pytest.approx(1.5)
    assert to.overlap_s([(0.0, 1.0, "all_gather"), (2.0, 4.0, "all_reduce")], 0.5, 3.0) == \
        {"all_gather": 0.5, "all_reduce": 1.0}


def test_overlapped_without_terms_is_the_prefetch_schedule():
    # gather one block ahead: 1 (gather 0) + 2 + 2 + 2, the last scatter after the last block
    assert _overlapped([2.0, 2.0, 2.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.5]) == pytest.approx(7.5)
    # communication-bound: each block waits for its gather
    assert _overlapped([1.0, 1.0], [3.0, 3.0], [0.0, 0.0]) == pytest.approx(7.0)


def test_terms_never_make_the_blocks_faster():
    t = to.from_dict({"compute_slowdown": {"all_gather": 1.3, "reduce_scatter": 1.2},
                      "comm_slowdown": {"all_gather": 1.1}})
    c, g, s = [2.0, 2.0, 2.0], [1.0, 1.0, 1.0], [0.5, 0.5, 0.5]
    base = _overlapped(c, g, s)
    slow = _overlapped(c, g, s, t)
    assert slow > base
    # the prefetched gather overlaps blocks 0 and 1 for 1 s each: +0.3 s each
    assert _overlapped(c, g, [0.0] * 3, t) == pytest.approx(_overlapped(c, g, [0.0] * 3) + 0.6)
    # host-bound: the blocks cannot start before the host has issued them
    assert _overlapped([1e-4] * 3, [0.0] * 3, [0.0] * 3, t, [0.01] * 3) >= 0.03


def _synthetic(f_s=5e-3, a_s=40e-6, b_s=15e-6, ag=1.25, rs=1.10):
    over = []
    for k, f in (("all_gather", ag), ("reduce_scatter", rs)):
        for i, shape in enumerate([(1, 1, 1), (2, 2, 2), (3, 3, 3)]):
            over.append({"kernel": "gemm", "shape": shape, "coll": k,
                         "compute_slowdown": f + (i - 1) * 0.01, "comm_slowdown": 1.05})
        over.append({"kernel": "copy", "shape": 1, "coll": k, "compute_slowdown": 3.0,
                     "comm_slowdown": 2.0})
    fsdp = []
    for lin, units in ((2, 8), (2, 16), (8, 8), (4, 12)):
        base = {"d": 1024, "linears": lin, "units": units, "tokens": 256}
        extra = f_s + units * (a_s + b_s * lin)
        fsdp.append({**base, "way": "local", "host_issue_s": 1e-3, "step_s": 1e-3,
                     "fwd_s": 4e-4, "bwd_s": 6e-4})
        fsdp.append({**base, "way": "fsdp2", "host_issue_s": 1e-3 + extra, "step_s": 1e-3 + extra,
                     "fwd_s": 4e-4 + 0.4 * extra, "bwd_s": 6e-4 + 0.6 * extra})
    # a device-bound row (the host issues it in half its time) is not fitted
    fsdp.append({**fsdp[1], "host_issue_s": 1.0, "step_s": 2.0})
    return {"comm": {"world": 4, "device": "x", "overlap": over, "fsdp": fsdp}}


def test_fit_reads_the_microbenchmark_only():
    from train_comm_fit import fit
    cal = fit(_synthetic())
    assert cal["compute_slowdown"] == {"all_gather": 1.25, "reduce_scatter": 1.1}
    assert cal["comm_slowdown"]["all_gather"] == 1.05
    assert cal["fsdp_step_host_s"] == pytest.approx(5e-3, rel=1e-3)
    assert cal["fsdp_unit_host_s"] == pytest.approx(40e-6, rel=1e-3)
    assert cal["fsdp_param_host_s"] == pytest.approx(15e-6, rel=1e-3)
    assert cal["fsdp_forward_share"] == pytest.approx(0.4)
    terms = to.from_dict(cal)          # a fit is a valid calibration
    assert terms.unit_host_s(2) == pytest.approx(70e-6, rel=1e-3)
    assert terms.unit_host_s(2, unit=False) == pytest.approx(30e-6, rel=1e-3)


def test_shipped_calibration_comes_from_the_shipped_microbenchmark():
    """accelerators/calibration/train_overheads_nvlink4.json is train_comm_fit.py's output on
    tests/data/train_comm_h100x4.json (4 x H100), value for value."""
    import json
    from train_comm_fit import fit
    root = Path(__file__).resolve().parent.parent
    measured = json.loads((root / "tests/data/train_comm_h100x4.json").read_text())
    shipped = json.loads((root / "accelerators/calibration/"
                          "train_overheads_nvlink4.json").read_text())
    assert fit(measured) == shipped
    t = to.overheads_for("nvlink4")
    assert 1.0 < t.compute("all_gather") < 2.0 and t.fsdp_unit_host_s > 0


def test_calibrated_terms_slow_ddp_and_fsdp_steps(monkeypatch):
    """With terms, a DDP and an FSDP step on a system take at least as long as without;
    ZeRO-3's copies alone already lengthen it."""
    from accelerators.registry import make_accelerator
    from accelerators.system import System
    from simulators import training
    from workloads.train_build import zoo_train_workload
    w = zoo_train_workload("gpt2", batch=2, seq=128, dtype="bf16", arch={"n_layer": 2})
    sysm = System(make_accelerator("gpu:h100"), "dgx-h100", devices=2)
    cal = to.from_dict({"compute_slowdown": {k: 1.3 for k in to.KINDS},
                        "comm_slowdown": {k: 1.2 for k in to.KINDS},
                        "fsdp_unit_host_s": 2e-3, "fsdp_param_host_s": 1e-5,
                        "fsdp_forward_share": 0.5})
    off, on = {}, {}
    for zero in (0, 3):
        lay = {"dp": 2, "zero": zero, "micro_batch": 2}
        monkeypatch.setattr(training, "overheads_in", lambda sysm, group: to.OFF)
        off[zero] = training.simulate_training(w, sysm, lay, precision="bf16").step_time_s
        monkeypatch.setattr(training, "overheads_in", lambda sysm, group: cal)
        on[zero] = training.simulate_training(w, sysm, lay, precision="bf16").step_time_s
    assert on[0] > off[0] and on[3] > off[3]
    # 2 ms of host per unit (3 units: the root's two blocks are one): host-bound
    assert on[3] >= 3 * 2e-3


def test_a_blocks_dropped_views_do_not_grow_with_the_models_depth():
    """Each block segment carries its share of the view ops capture dropped (the eager
    runtime charges them to its host): before, every block carried the whole model's."""
    from workloads.train_build import zoo_train_workload
    from workloads.train_parallel import plan_training, train_layout_from
    views = []
    for layers in (2, 4):
        w = zoo_train_workload("gpt2", batch=1, seq=32, dtype="bf16", arch={"n_layer": layers})
        plan = plan_training(w, train_layout_from({"micro_batch": 1}))
        seg = plan.segment(0, "fwd").compute
        views.append(sum(c for _, c in seg.free_ops))
        total = sum(c for _, c in w.free_ops)
        assert 0 < views[-1] < total
    assert views[1] == pytest.approx(views[0], rel=0.2)


def test_attention_dropout_is_captured_and_its_factor_applied():
    """A config's attention dropout lands on its attention ops (forward and backward); the
    measured factors scale only fused attention, by pass and dropout, on Hopper GPUs."""
    from accelerators.registry import make_accelerator
    from workloads import ir
    from workloads.train_build import hf_train_workload
    cfg = {"model_type": "gpt2", "n_embd": 64, "n_layer": 1, "n_head": 4, "n_positions": 64,
           "vocab_size": 128}
    for p in (0.1, 0.0):
        w = hf_train_workload({**cfg, "attn_pdrop": p}, batch=2, seq=16, dtype="bf16")
        att = [op for op in w.ops if op.kind == ir.ATTENTION]
        assert len(att) == 2 and all(op.attrs.get("dropout", 0.0) == p for op in att)
    factors = {"forward": 1.1, "backward": 1.4, "forward_dropout": 2.0, "backward_dropout": 2.2}
    fwd, bwd = att if not att[0].attrs.get("backward") else att[::-1]
    assert to.attention_factor(fwd, factors) == 1.1
    assert to.attention_factor(bwd.with_attrs(dropout=0.1), factors) == 2.2
    assert all(to.attention_factor(op, factors) == 1.0 for op in w.ops
               if op.kind != ir.ATTENTION)
    assert to.attention_factors(make_accelerator("gpu:a100")) is None
    assert to.attention_factors(make_accelerator("npu")) is None
    assert to.attention_factor(fwd, None) == 1.0


def test_a_bad_attention_calibration_names_the_field(monkeypatch, tmp_path):
    from accelerators import collective_calibration as cc
    monkeypatch.setattr(cc, "CALIBRATION_DIR", tmp_path)   # where shipped files are read
    to._attention_file.cache_clear()
    try:
        assert to._attention_file("train_attention_sm90.json") is None
        (tmp_path / "train_attention_sm90.json").write_text('{"factors": {"forward": 0.3}}')
        to._attention_file.cache_clear()
        with pytest.raises(BadInput, match=r"factors.*factors in \[1, 4\]"):
            to._attention_file("train_attention_sm90.json")
    finally:
        to._attention_file.cache_clear()


def test_shipped_attention_factors_come_from_the_shipped_sdpa_microbenchmark():
    """accelerators/calibration/train_attention_sm90.json is sdpa_fit.py's output on
    tests/data/sdpa_h100.json (SDPA alone on an H100), value for value."""
    import json
    from accelerators.registry import make_accelerator
    from sdpa_fit import fit
    root = Path(__file__).resolve().parent.parent
    cal, rows = fit(json.loads((root / "tests/data/sdpa_h100.json").read_text()))
    shipped = json.loads((root / "accelerators/calibration/train_attention_sm90.json").read_text())
    assert cal == shipped and len(rows) == 20
    assert to.attention_factors(make_accelerator("gpu:h200")) == shipped["factors"]
    assert shipped["factors"]["forward_dropout"] > shipped["factors"]["forward"] >= 1.0
