"""Serving as the engines run it: chunked prefill reserving the whole prompt's KV, preemption
by recompute or swap, pipelines (pp) and replicas behind a router (dp), throughput and goodput
over the arrival window and the whole run, KV capacity from the one memory reserve, and the
fitted cost model kept on disk."""

import json
import os

import numpy as np
import pytest

from dse import api
from dse.errors import BadInput
from simulators import cost_cache
from simulators.iteration_cost import IterationCostModel
from simulators.schedulers import ChunkedPrefill, KVCache, State
from tests.cli_runner import run_cli

ARCH = {"n_layer": 2, "d_model": 512, "n_head": 8, "n_kv_head": 8, "d_ff": 1024,
        "vocab_size": 1024, "max_seq": 4096}
SMALL = dict(accelerator="gpu:h200", arch=ARCH)
#: A cache of about 8,000 tokens for the small model: a dozen 600-token prompts
TIGHT = {"memory_capacity_bytes": 1e8}


def _csv(path, rows):
    path.write_text("arrival_s,input_len,output_len\n"
                    + "".join(f"{t},{i},{o}\n" for t, i, o in rows))
    return str(path)


def _every_token_once(r, out_len):
    assert r.completed == len(out_len) and r.per_request["generated"] == list(out_len)


def test_chunked_prefill_admits_only_when_the_whole_prompt_fits():
    """Sarathi / vLLM: a prompt whose first chunk fits but whole prompt does not waits; the
    one admitted holds its whole prompt's blocks before its first chunk runs."""
    kv = KVCache(100, 16)                                  # 1,600 tokens, watermark 1 block
    s = State(np.array([1200, 1200]), np.array([10, 10]), kv)
    s.waiting.extend([0, 1])
    b = ChunkedPrefill(max_batch=8, token_budget=512).step(s)
    assert [(r, c) for r, _, c in b.chunks] == [(0, 512)]
    assert s.blocks[0] == 75 and kv.free == 25 and list(s.waiting) == [1]
    b = ChunkedPrefill(max_batch=8, token_budget=512).step(s)
    assert [(r, c0, c) for r, c0, c in b.chunks] == [(0, 0, 512)] and list(s.waiting) == [1]


def test_chunked_prefill_on_long_prompts_has_no_preemption_storm(tmp_path):
    """Long prompts arriving faster than a small cache (about four requests) drains, the
    Vidur comparison's shape: preemptions stay under 1 % of the requests (admitting on a
    prompt's first chunk, as before, gave 453 for these 200) and every token is produced
    once."""
    rows = [(0.0005 * i, 600, 60) for i in range(200)]
    arch = {"n_layer": 4, "d_model": 768, "n_head": 12, "n_kv_head": 12, "d_ff": 1536,
            "vocab_size": 1024, "max_seq": 4096}
    r = api.serve("llama2-7b", trace=_csv(tmp_path / "long.csv", rows), scheduler="chunked",
                  token_budget=256, hw=TIGHT, accelerator="gpu:h200", arch=arch)
    _every_token_once(r, [60] * 200)
    assert r.kv_cache["peak_occupancy"] > 0.8 and r.max_running >= 4   # the cache binds
    assert r.preemptions <= 0.01 * 200


@pytest.mark.parametrize("scheduler", ["continuous", "chunked"])
def test_swap_preemption_moves_kv_over_the_host_link(scheduler):
    """Swapping keeps the generated tokens (no recompute) and charges the copy: as many
    tokens produced, the KV copied out and back in, and the swapped run is no faster than
    the KV bytes over the host link allow."""
    kw = dict(trace="sharegpt", rate=1000.0, requests=800, scheduler=scheduler, hw=TIGHT,
              **SMALL)
    rec = api.serve("llama2-7b", **kw)
    swp = api.serve("llama2-7b", preemption="swap", **kw)
    out = [int(x) for x in rec.per_request["output_len"]]
    _every_token_once(rec, out)
    _every_token_once(swp, out)
    assert rec.preemptions > 0 and rec.swaps == 0
    assert swp.swaps > 0 and swp.swapped_bytes > 0
    assert swp.scheduler["preemption"] == "swap"
    # out and in: an even number of copies of whole requests' KV, in bytes of the model's
    assert swp.swapped_bytes % swp.kv_cache["bytes_per_token"] == 0
    none = api.serve("llama2-7b", preemption="swap", swap_space_bytes=0, **kw)
    assert none.swaps == 0 and none.preemptions > 0      # no host space: recompute


def test_pipeline_stages_overlap_batches_and_produce_every_token_once(tmp_path):
    """pp = 2 on two devices: every token once, Little's law, and on decodes bound by their
    KV reads more throughput than one device (two batches of disjoint requests in flight,
    each stage reading its own layers' KV)."""
    rows = [(1e-5 * i, 2000, 100) for i in range(600)]
    kw = dict(trace=_csv(tmp_path / "kv.csv", rows), **SMALL)
    one = api.serve("llama2-7b", **kw)
    pp = api.serve("llama2-7b", devices=2, parallel={"pp": 2}, **kw)
    _every_token_once(pp, [100] * 600)
    assert pp.scheduler["pipeline_stages"] == 2
    assert pp.mean_in_system == pytest.approx(pp.completed / pp.span_s * pp.e2e_s["mean"],
                                              rel=0.02)
    assert pp.throughput_run_tok_s > 1.2 * one.throughput_run_tok_s
    with pytest.raises(BadInput, match="scheduler"):
        api.serve("llama2-7b", devices=2, parallel={"pp": 2}, scheduler="static", **kw)


def test_replicas_behind_a_router(tmp_path):
    """dp = 2: round robin sends requests in turn and, on a saturating trace, serves about
    twice one replica's throughput; least loaded keeps the replicas' request counts close
    on a bursty trace; both produce every token once."""
    rows = [(1e-5 * i, 2000, 100) for i in range(600)]
    kw = dict(trace=_csv(tmp_path / "kv.csv", rows), **SMALL)
    one = api.serve("llama2-7b", **kw)
    rr = api.serve("llama2-7b", devices=2, parallel={"dp": 2}, **kw)
    _every_token_once(rr, [100] * 600)
    assert rr.per_request["replica"] == [i % 2 for i in range(600)]
    assert rr.throughput_run_tok_s == pytest.approx(2 * one.throughput_run_tok_s, rel=0.15)
    assert rr.kv_cache["replicas"] == 2 and rr.cost_usd > one.cost_usd
    ll = api.serve("llama2-7b", devices=2, parallel={"dp": 2}, router="least_loaded",
                   trace="sharegpt", rate=2000.0, requests=400, arrival="gamma",
                   burstiness=3.0, **SMALL)
    _every_token_once(ll, [int(x) for x in ll.per_request["output_len"]])
    counts = np.bincount(ll.per_request["replica"], minlength=2)
    assert abs(int(counts[0]) - int(counts[1])) <= 40


def test_throughput_over_the_arrival_window_and_the_whole_run(tmp_path):
    """Every request inside its SLOs at a steady 200 req/s, the last with a long output: over
    the arrival window the server keeps up with the offered load (and goodput equals it),
    while the whole run's rate, diluted by the drain tail, reads lower."""
    rows = [(0.005 * i, 50, 20) for i in range(400)] + [(2.0, 50, 3000)]
    r = api.serve("llama2-7b", trace=_csv(tmp_path / "tail.csv", rows), slo_ttft_s=1.0,
                  slo_tpot_s=1.0, **SMALL)
    assert r.window_s == pytest.approx(2.0)
    assert r.throughput_req_s == pytest.approx(200.0, rel=0.03)
    assert r.goodput_req_s == pytest.approx(r.throughput_req_s)
    assert r.throughput_run_req_s < 0.9 * r.throughput_req_s
    assert r.goodput_run_req_s == pytest.approx(401 / r.span_s)
    assert r.throughput_run_tok_s == pytest.approx(r.output_tokens / r.span_s)


def test_kv_capacity_is_memory_times_utilization_less_weights_and_activations():
    base = api.workload("llama2-7b", phase="decode", batch=1, context=1, arch=ARCH)
    m = IterationCostModel(base, api._target("gpu:h200", None, None, None, None, None,
                                             "fast"), 1024)
    cap = m.device.memory_capacity_bytes()
    act = m.stage_activation_bytes(512, 64)[0]
    expect = int((cap * 0.8 - m.weights_bytes - act) // m.kv_bytes_per_token)
    assert m.kv_capacity_tokens(0.8, 512, 64) == expect
    assert m.stage_activation_bytes(2048)[0] > act        # derived from the iteration's graph


def test_70b_tp2_decode_at_b32_ctx_2048_fits_two_a100_80gb():
    r = api.simulate("llama2-70b", system="dgx-a100", devices=2, parallel={"tp": 2},
                     phase="decode", batch=32, context=2048)
    assert r.latency_s > 0


def test_cost_model_is_kept_on_disk_and_trusted_like_the_capture_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path / "c"))
    api._COST_MODELS.clear()
    kw = dict(trace="alpaca", rate=50.0, requests=100, **SMALL)
    first = api.serve("llama2-7b", **kw)
    files = list((tmp_path / "c" / "cost_models").glob("*.json"))
    sealed = files[0].read_bytes()      # a seal line (dse.safe_io), then the JSON
    assert len(files) == 1 and b"activation_bytes" in sealed.partition(b"\n")[2]
    api._COST_MODELS.clear()

    def refit(*a, **k):
        raise AssertionError("refitted although the fit is on disk")
    monkeypatch.setattr(IterationCostModel, "_fit", refit)
    again = api.serve("llama2-7b", **kw)
    a, b = first.to_dict(per_request=True), again.to_dict(per_request=True)
    a.pop("sim_wall_s"), b.pop("sim_wall_s")
    assert a == b
    files[0].write_text('{"schema": 1, "key": "x", "g_latency_s": "rm -rf /"}')   # corrupt
    # ... and a well-formed fit with doubled latencies, planted without the cache's key
    planted = json.loads(sealed.partition(b"\n")[2])
    planted["g_latency_s"] = [x if x is None else 2 * x for x in planted["g_latency_s"]]
    monkeypatch.undo()
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path / "c"))
    api._COST_MODELS.clear()
    assert api.serve("llama2-7b", **kw).ttft_s == first.ttft_s    # refitted, same result
    files[0].write_text(json.dumps(planted))
    api._COST_MODELS.clear()
    assert api.serve("llama2-7b", **kw).ttft_s == first.ttft_s    # refused, refitted
    os.chmod(tmp_path / "c" / "cost_models", 0o777)
    api._COST_MODELS.clear()
    with pytest.raises(BadInput, match="DSE_CACHE_DIR"):
        api.serve("llama2-7b", **kw)
    os.chmod(tmp_path / "c" / "cost_models", 0o700)
    api._COST_MODELS.clear()
    assert cost_cache.fingerprint(api.workload("llama2-7b", phase="decode", batch=1, context=1,
                                               arch={**ARCH, "n_layer": 3}))["ops"] > \
        cost_cache.fingerprint(api.workload("llama2-7b", phase="decode", batch=1, context=1,
                                            arch=ARCH))["ops"]
    # fp8 formats on an int8 step move int8's bytes: only the formats tell the two apart
    # (they shared one fit, grid bodies and disk file, and a pim serving run fell 0.17 % under
    # its energy floor on the other's numbers)
    plain = api.workload("llama2-7b", phase="decode", batch=1, context=1, arch=ARCH,
                         dtype="int8")
    fp8 = api.workload("llama2-7b", phase="decode", batch=1, context=1, arch=ARCH,
                       dtype="int8", formats="weights=fp8_e4m3,activations=fp8_e4m3")
    a, b = cost_cache.fingerprint(plain), cost_cache.fingerprint(fp8)
    assert a["weights"] == b["weights"] and a != b


@pytest.mark.parametrize("args, field", [
    (["--router", "random"], "router"),
    (["--preemption", "kill"], "preemption"),
    (["--memory-utilization", "1.5"], "memory_utilization"),
    (["--swap-space", "-1GiB"], "--swap-space"),
    (["--dp", "0"], "parallel.dp"),
])
def test_bad_serving_options_are_one_line_exit_2(capsys, args, field):
    code, out, err = run_cli(capsys, "serve", "llama2-7b", "-a", "gpu:h200", "--rate", "2",
                             *args)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and field in err and "Traceback" not in err, err
