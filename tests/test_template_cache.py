"""Re-shape templates on disk (workloads/template_cache.py): a template read back by a later
process gives exactly the workload a fresh capture gives, per op kind whose builder reads the
exported node (KV append's strided inputs, attention's causal flag, a convolution's stride,
padding and groups); a corrupt, edited, foreign-schema or stale entry is ignored (captured
again) and nothing read runs code (JSON only)."""

from __future__ import annotations

import gzip
import json
import warnings

import pytest

from dse import safe_io
from workloads import build, reshape, template_cache

#: (model, phase, architecture of the template, another architecture, batch, seq, context):
#: GPT-2 decode is the co-search's family (benchmarks/population.py); the rest cover the facts.
CASES = [
    ("gpt2", "decode", {"n_layer": 2, "d_model": 64, "n_head": 4, "d_ff": 96},
     {"n_layer": 5, "d_model": 96, "n_head": 4, "d_ff": 200}, 2, None, 9),
    ("gpt2", "prefill", {"n_layer": 2, "d_model": 64, "n_head": 4, "d_ff": 96},
     {"n_layer": 3, "d_model": 128, "n_head": 8, "d_ff": 300}, 1, 12, None),
    ("llama2-7b", "decode", {"n_layer": 2, "d_model": 64, "n_head": 4, "n_kv_head": 2,
                             "d_ff": 96},
     {"n_layer": 4, "d_model": 96, "n_head": 6, "n_kv_head": 3, "d_ff": 130}, 1, None, 7),
    ("sdpa", None, {"kv_heads": 2, "h": 4, "sq": 8, "skv": 8, "d": 16, "causal": True},
     {"kv_heads": 3, "h": 6, "sq": 5, "skv": 11, "d": 8, "causal": True}, 1, None, None),
    ("conv2d", None, {"c": 4, "k": 6, "h": 17, "w": 15, "r": 3, "s": 3, "stride": 2,
                      "padding": 1, "groups": 2, "bias": True},
     {"c": 8, "k": 4, "h": 21, "w": 13, "r": 3, "s": 3, "stride": 2, "padding": 1, "groups": 2,
      "bias": True}, 1, None, None),
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    build.clear_memory_cache()
    safe_io.forget_keys()
    yield tmp_path / "workloads"
    build.clear_memory_cache()


def _args(model, phase, arch, batch, seq, context):
    return build.resolve(model, phase, batch, seq, context, "bf16", arch)


def _no_capture(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("captured although the template is on disk")
    monkeypatch.setattr(reshape, "_reference", refuse)


def _quiet(fn, *a):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_a_stored_template_gives_the_workload_of_a_fresh_capture(case, cache, monkeypatch):
    model, phase, arch, other, batch, seq, context = case
    first = _args(model, phase, arch, batch, seq, context)
    made = _quiet(reshape.template_for, first)
    assert made is not None, reshape.refusal(first)
    assert len(list(cache.glob("template-*.json.gz"))) == 1
    build.clear_memory_cache()
    _no_capture(monkeypatch)
    args = _args(model, phase, other, batch, seq, context)
    loaded = reshape.template_for(args)
    assert loaded is not None and loaded is not made
    assert reshape.template_for(args) is loaded          # read once, then kept in memory
    assert template_cache.to_json(loaded) == template_cache.to_json(made)
    assert all(o.node is None for o in loaded.prefix + loaded.block + loaded.suffix)
    mine = reshape.reshaped(args)
    monkeypatch.undo()
    real = _quiet(build._capture_zoo, args)
    assert reshape.same_workload(mine, real) is None
    assert mine.flops == real.flops and mine.traffic_bytes() == real.traffic_bytes()


def test_the_cases_cover_every_fact_the_op_builder_reads(cache):
    seen: dict[str, set] = {}
    for model, phase, arch, _, batch, seq, context in CASES:
        t = _quiet(reshape.template_for, _args(model, phase, arch, batch, seq, context))
        for o in t.prefix + t.block + t.suffix:
            for k, v in o.facts.items():
                seen.setdefault(k, set()).add(json.dumps(v))
    assert seen["strided_inputs"] == {"false"}         # the zoo GPT-2's KV append (contiguous)
    assert seen["causal"] == {"true", "false"}         # prefill causal, decode not
    assert seen["stride"] == {"[2, 2]"} and seen["groups"] == {"2"}
    assert seen["padding"] == {"[1, 1]"} and seen["transposed"] == {"false"}


def _stored(cache) -> tuple:
    args = _args(*(CASES[0][:3] + CASES[0][4:]))
    _quiet(reshape.template_for, args)
    (path,) = cache.glob("template-*.json.gz")
    build.clear_memory_cache()
    return args, path


def _payload(cache, path) -> dict:
    packed = safe_io.unseal(path.read_bytes(), cache, path.name)
    return json.loads(gzip.decompress(packed))


def _write(cache, path, data: dict, key_ok: bool = True) -> None:
    packed = gzip.compress(json.dumps(data).encode())
    blob = safe_io.seal(packed, cache, path.name if key_ok else "another-name")
    path.write_bytes(blob)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "edited", "resealed-bad-kind",
                                    "resealed-bad-fact", "resealed-code-string", "wrong-format"])
def test_a_damaged_entry_is_ignored_and_the_family_captured_again(damage, cache):
    args, path = _stored(cache)
    good = _payload(cache, path)
    if damage == "garbage":
        path.write_bytes(b"\x00not a template")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:-40])
    elif damage == "edited":   # doubled sizes, sealed with another name: does not verify
        bad = json.loads(json.dumps(good))
        bad["ops"][1][0]["outputs"][0][0][0][0] *= 2
        _write(cache, path, bad, key_ok=False)
    else:   # sealed with the right key but not the schema: refused on reading
        bad = json.loads(json.dumps(good))
        if damage == "resealed-bad-kind":
            bad["ops"][1][0]["kind"] = "einsum"
        elif damage == "resealed-bad-fact":
            bad["ops"][1][0]["facts"] = {"__reduce__": "os.system"}
        elif damage == "resealed-code-string":
            bad["ops"][1][0]["inputs"][0]["shape"][0] = "__import__('os').system('true')"
        else:
            bad["format"] = "reshape-template-0"
        _write(cache, path, bad)
    with pytest.warns(RuntimeWarning, match="template cache entry"):
        assert template_cache.load(reshape._family(args)[2]) is None
    t = _quiet(reshape.template_for, args)             # captured again, entry rewritten
    assert t is not None and _payload(cache, path) == good


def test_a_stale_entry_is_not_read(cache, monkeypatch):
    args, path = _stored(cache)
    fam = reshape._family(args)[2]
    assert template_cache.load(fam) is not None
    template_cache.source_hash.cache_clear()
    monkeypatch.setattr(template_cache, "source_hash", lambda: "edited source")
    assert template_cache.key(fam) != path.name[len("template-"):-len(".json.gz")]
    assert template_cache.load(fam) is None            # another key: not found, captured
    monkeypatch.setattr(template_cache, "_version", lambda dist: "0.0")
    assert template_cache.load(fam) is None


def test_a_template_whose_op_needs_its_node_is_kept_in_memory_only(cache):
    args, _ = _stored(cache)
    t = _quiet(reshape.template_for, args)
    t.block[0].facts = None
    assert template_cache.to_json(t) is None
    assert template_cache.store(("another family",), t) is False
