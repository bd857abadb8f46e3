"""Does the suite have teeth? Backends with one planted bug each (tests/plugins/planted, registered
through the public ``accel.backends`` entry-point group) must fail the quick profile, in the op
the bug lives in; the correct backends must pass it."""
import pytest

import accel
from accel.conformance import suite
from markers import needs_planted

pytestmark = needs_planted

#: planted backend -> (what must fail, a predicate on the failing case)
PLANTED = {
    "planted_k_off_by_one": lambda c: c.op == "matmul",
    "planted_fp16_accumulation": lambda c: c.op == "matmul" and c.dtype == "float16",
    "planted_topleft_causal": lambda c: c.op == "attention" and c.params["causal"],
    "planted_q8_ties_even": lambda c: c.op == "quantize" and c.params["fmt"] == "q8_0",
    "planted_gqa_dropped": lambda c: c.op == "attention",
    "planted_oob_write": lambda c: c.op == "matmul",
    "planted_nan_to_zero": lambda c: c.op == "matmul" and c.params["data"] == "nan",
    "planted_overclaims": lambda c: c.op == "attention" and c.params.get("mask"),
    "planted_bf16_truncation": lambda c: c.params["data"] == "rounding",
    "planted_fnuz_decoding": lambda c: c.op == "scaled_matmul" and c.dtype == "float8_e4m3fn",
    "planted_k4_scale_swap": lambda c: (c.op == "dequantize" and c.dtype in ("q4_k", "q5_k")) or (
        c.op == "qmatmul" and c.params["fmt"] in ("q4_k", "q5_k")),
    "planted_tail_race": lambda c: c.kind in ("grid", "exact") and c.params.get("data") in ("normal", "random"),
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_quick_profile_catches_the_planted_bug(name):
    backend = accel.get_backend(name)
    assert backend.priority < 0 and accel.backends()[0].name != name
    failing = [r for r in suite.run(backend, profile="quick") if not r.ok]
    caught = [r for r in failing if PLANTED[name](r.case)]
    assert caught, f"{name}: no failure where the bug lives ({len(failing)} failures elsewhere)"
    assert all(r.repro.startswith(f"accel conformance --backend {name}:0 --case ") for r in caught)


def test_guard_region_names_the_stray_write():
    results = suite.run(accel.get_backend("planted_oob_write"), ops=["matmul"], dtypes=["float32"])
    assert any("written after the output" in r.reason for r in results)


def test_overclaiming_is_an_error_not_a_skip():
    results = suite.run(accel.get_backend("planted_overclaims"), ops=["attention"],
                        dtypes=["float16"])
    assert {r.status for r in results} >= {"error", "passed"}
    assert all("not implemented" in r.reason for r in results if r.status == "error")


@pytest.mark.parametrize("name", ["cpu", "planted_declines_bf16"])
def test_correct_backends_pass_the_quick_profile(name):
    results = suite.run(accel.get_backend(name), profile="quick")
    failing = [f"{r.case.id}: {r.reason}" for r in results if not r.ok]
    assert not failing, "\n".join(failing[:10])
    declined = [r for r in results if r.status == "unsupported"]
    if name == "planted_declines_bf16":  # declined cases are counted apart, never run
        assert declined and all(r.case.dtype == "bfloat16" for r in declined)
        assert all(r.evidence == "untested" for r in declined)
        assert {r.case.dtype for r in results if r.status == "passed"} >= {"float32", "float16"}
    else:
        assert not declined


#: planted bugs of the decoder-step ops with an OpenCL kernel, at least one per op: an edit of
#: kernels/decoder.cl as a careless port would make it (layer_norm's: the sample variance,
#: torch.var's default; a masked logit as -1e30, which spreads a fully masked row evenly instead
#: of zeros; the mask's row taken by the head, not the query; erf GELU without the 1/sqrt 2 or
#: with it cut to 4 digits; tanh GELU with a square for the cube; a broadcast's middle index
#: taken modulo the wrong dim)
_DECODER_PLANTS = {
    "rms_norm": ("return rms_root(part, t, q, D, eps);", "return rms_root(part, t, q, D - 1, eps);"),
    "layer_norm": ("float sd = rms_root(part, t, q, D, eps);", "float sd = rms_root(part, t, q, D - 1, eps);"),
    "rope": ("xp * s + xj * c", "xj * c - xp * s"),
    "softmax": ("- base) / s);", "- base) / (s * 1.001f));"),
    "softmax-mask": ("return mask[mr + i] ? z : -INF_F;", "return mask[mr + i] ? z : -1e30f;"),
    "softmax-rows": ("row / outer * inner + row % inner", "row / outer * inner + row / inner % inner"),
    "glu": ("return g / (1.0f + exp(-g));", "return g / (1.0f + exp(-0.999f * g));"),
    "silu": ("return g / (1.0f + exp(-g));", "return g / (1.0f + exp(-0.999f * g));"),
    "glu-gelu": ("(1.0f + ERF(g * 0.70710678f))", "(1.0f + ERF(g))"),
    "gelu": ("ERF(g * 0.70710678f)", "ERF(g * 0.7071f)"),
    "gelu-tanh": ("(g + 0.044715f * g * g * g)", "(g + 0.044715f * g * g)"),
    "get_rows": ("table[(i64)ids[r] * D + j]", "table[(i64)ids[r] * D + (j + 1) % D]"),
    "add": ("op == 0 ? ai + bi", "op == 0 ? (ai + bi) * 1.000001f"),
    "mul": (": ai * bi);", ": ai * bi * 1.000001f);"),
    "add-broadcast": ("int i2 = r % n2;", "int i2 = r % n3;"),
}


@pytest.mark.parametrize("plant", sorted(_DECODER_PLANTS))
def test_quick_profile_catches_a_planted_decoder_kernel_bug(plant, opencl_backend):
    op = plant.split("-")[0]
    old, new = _DECODER_PLANTS[plant]
    results = suite.run(_planted_class("decoder.cl", old, new)(0), profile="quick", ops=[op])
    assert any(r.status == "failed" and r.case.dtype == "float32" for r in results), op


#: one planted bug per attention option, an edit of kernels/attention.cl: the window keeps one
#: key too many, the soft-cap forgets to divide, the sink's term skips the rescaling
_ATTENTION_OPTION_PLANTS = {
    "window": ("(vi_t)key <= last_key[iv] - (vi_t)window", "(vi_t)key < last_key[iv] - (vi_t)window"),
    "softcap": ("(vf_t)softcap * TANH(x / (vf_t)softcap)", "(vf_t)softcap * TANH(x)"),
    "sinks": ("l_row = l_row * w + EXP(sink - top);", "l_row = l_row + EXP(sink - top);"),
}


def _planted_class(source: str, old: str, new: str) -> type:
    """OpenCLBackend with ``old`` replaced by ``new`` in shipped kernel ``source``: a real device
    build of the edited text for every plan launch of it (the other sources as shipped)."""
    import pyopencl as cl

    import accel.kernels as K
    from accel.backends.opencl import OpenCLBackend

    assert K.source(source).count(old) == 1

    class Planted(OpenCLBackend):
        def kernel(self, variant, name):
            if variant.source != source:
                return super().kernel(variant, name)
            text = K.program_text(variant.source).replace(old, new)
            return cl.Kernel(self._program(text, tuple(variant.options()), name), name)

    return Planted


def _planted_opencl(source: str, old: str, new: str):
    """OpenCL device 0 of :func:`_planted_class`."""
    return _planted_class(source, old, new)(0)


@pytest.mark.parametrize("option", sorted(_ATTENTION_OPTION_PLANTS))
def test_quick_profile_catches_a_planted_attention_option_bug(option, opencl_backend):
    planted = _planted_opencl("attention.cl", *_ATTENTION_OPTION_PLANTS[option])
    results = suite.run(planted, profile="quick", ops=["attention"], dtypes=["float32"])
    failed = [r for r in results if r.status == "failed"]
    assert failed and all(option in r.case.params for r in failed), option


def test_quick_profile_catches_a_planted_codebook_kernel_bug(opencl_backend):
    """kernels/codebook.cl with ksigns' parity bit dropped (the eighth weight's sign of every
    group of iq2_xxs, iq2_xs and iq3_xxs): the quick profile's codebook cases fail on OpenCL."""
    planted = _planted_opencl("codebook.cl", "return s7 | ((p & 1u) << 7);", "return s7;")
    results = suite.run(planted, profile="quick", ops=["dequantize"], dtypes=["iq2_xxs", "iq2_s"])
    failed = {r.case.dtype for r in results if r.status == "failed"}
    assert failed == {"iq2_xxs"}, failed  # iq2_s stores all 8 signs: untouched


#: a careless edit of kernels/kquant.cl per format family it reads, as (old, new, the formats
#: whose dequantize must then fail in the quick profile, the formats that must still pass)
_KQUANT_FAMILY_PLANTS = {
    "legacy-fifth-bit": ("q |= (int)((load_u32(blk + QH_AT) >> e) & 1u) << 4;",
                         "q |= (int)((load_u32(blk + QH_AT) >> e) & 1u) << 3;",
                         {"q5_0", "q5_1"}, {"q4_1"}),
    "iq4-table": ("#define IQ4_VALUES -127, -104, -83, -65,", "#define IQ4_VALUES -127, -104, -83, -66,",
                  {"iq4_nl", "iq4_xs"}, {"q4_k"}),
    "ternary-base3": ("return ((((b * pow3[n]) & 255) * 3) >> 8) - 1;",  # the byte's wrap lost
                      "return ((((b * pow3[n]) & 511) * 3) >> 8) - 1;", {"tq1_0"}, {"tq2_0"}),
    "nvfp4-scale": ("AS_FLOAT((u32)(e + 119) << 23", "AS_FLOAT((u32)(e + 120) << 23", {"nvfp4"}, {"mxfp4"}),
}


@pytest.mark.parametrize("plant", sorted(_KQUANT_FAMILY_PLANTS))
def test_quick_profile_catches_a_planted_format_family_bug(plant, opencl_backend):
    old, new, broken, intact = _KQUANT_FAMILY_PLANTS[plant]
    planted = _planted_opencl("kquant.cl", old, new)
    results = suite.run(planted, profile="quick", ops=["dequantize"], dtypes=sorted(broken | intact))
    failed = {r.case.dtype for r in results if r.status == "failed"}
    assert failed == broken, failed
