"""FLOP/byte models of the op specs against hand counts, and the roofline arithmetic."""
import pytest

from accel import spec as S
from accel.conformance.bench.suite import rates
from accel.formats import get_format
from accel.conformance.bench.peaks import Peaks


def test_matmul_counts_by_hand():
    sp = S.matmul_spec((2, 3, 4), "float32", (4, 5), "float32")
    # 2 batches x 3 x 5 outputs, each 4 multiply-adds = 2 FLOPs
    assert sp.flops == 2 * 3 * 5 * 4 * 2
    # a: 24 floats, b: 20 floats, c: 30 floats, 4 bytes each
    assert sp.bytes == (24 + 20 + 30) * 4


def test_int8_matmul_bytes_count_int32_output():
    sp = S.matmul_spec((8, 16), "int8", (16, 4), "int8")
    assert sp.bytes == 8 * 16 + 16 * 4 + 8 * 4 * 4
    assert sp.flops == 2 * 8 * 4 * 16


def test_causal_attention_counts_visible_pairs_bottom_right():
    sp = S.attention_spec((1, 2, 3, 8), (1, 1, 5, 8), (1, 1, 5, 4), ("float16",) * 3, causal=True)
    # Sk - Sq = 2: query 0 sees keys 0..2 (3), query 1 sees 4, query 2 sees 5 -> 12 pairs per head
    assert sp.flops == 2 * 12 * (2 * 8 + 2 * 4)
    # q and out per query head, k and v per kv head; 2 bytes each
    assert sp.bytes == 2 * (2 * 3 * (8 + 4) + 1 * 5 * (8 + 4))


def test_quantized_op_counts_by_hand():
    q4 = get_format("q4_0")
    qm = S.qmatmul_spec((3, 64), "float32", (10, 64), q4)
    assert qm.flops == 2 * 3 * 10 * 64
    assert qm.bytes == 10 * 2 * 18 + (3 * 64 + 3 * 10) * 4  # 2 blocks of 18 bytes per weight row
    qz = S.quantize_spec((4, 64), "float32", "q8_0")
    assert (qz.flops, qz.bytes) == (0, 4 * 64 * 4 + 4 * 2 * 34)
    dq = S.dequantize_spec((4, 64), get_format("q8_0"))
    assert (dq.flops, dq.bytes) == (0, 4 * 2 * 34 + 4 * 64 * 4)


def test_roofline_compute_bound_case():
    sp = S.matmul_spec((1000, 1000), "float32", (1000, 1000), "float32")  # 2e9 FLOP, 12e6 bytes
    r = rates(sp, 0.04, Peaks(gflops=100.0, gbs=10.0))
    assert r["gflops"] == pytest.approx(50.0)
    assert r["gbs"] == pytest.approx(0.3)
    # bound: max(2e9 / 1e11, 12e6 / 1e10) = 0.02 s -> half the roofline
    assert r["roofline_efficiency"] == pytest.approx(0.5)


def test_roofline_memory_bound_and_flop_free_cases():
    sp = S.quantize_spec((1024, 1024), "float32", "q8_0")  # 0 FLOP
    nbytes = 1024 * 1024 * 4 + 1024 * 32 * 34
    r = rates(sp, nbytes / 5e9, Peaks(gflops=100.0, gbs=20.0))
    assert r["gflops"] == 0 and r["gbs"] == pytest.approx(5.0)
    assert r["roofline_efficiency"] == pytest.approx(0.25)  # 5 of 20 GB/s


def test_no_peaks_means_no_efficiency():
    sp = S.matmul_spec((4, 4), "float32", (4, 4), "float32")
    assert rates(sp, 1e-6, None)["roofline_efficiency"] is None
