"""JSON Schemas of the result files `accel report` reads, and their validation on load.

The schemas hold what the report relies on, so a malformed or truncated file is refused with
``FILE: where: what is wrong`` instead of a KeyError deep in rendering. They are published in
docs/schemas/ (tests/conformance/report/test_trust.py checks the published copies are these). Fields are
only required where every accel version that wrote the schema wrote them: old files keep loading.

>>> validate({"schema": "accel.kernels_check/1", "targets": [], "results": []}, "k.json")
'accel.kernels_check/1'
>>> validate({"schema": "accel.gpu_speed_goals/2"}, "goals.json") is None
True
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from accel.conformance.bench.model import SCHEMA as MODEL_BENCH_SCHEMA
from accel.conformance.bench.suite import SCHEMA as BENCH_SCHEMA
from accel.conformance.model_check import SCHEMA as MODEL_CONFORMANCE_SCHEMA
from accel.conformance.results import SCHEMA as CONFORMANCE_SCHEMA
from accel.conformance.results import STATUSES as CONFORMANCE_STATUSES
from accel.errors import ArgumentError
from accel.kernels import KERNELS_CHECK_SCHEMA

_NUMBER = {"type": "number"}
_MAYBE_NUMBER = {"type": ["number", "null"]}
_TEXT = {"type": "string"}

#: the machine record of results.machine(); run_id since issue 25 (older files lack it)
_MACHINE = {
    "type": "object",
    "properties": {"label": _TEXT, "hostname": _TEXT, "platform": _TEXT, "cpu": _TEXT,
                   "cores": {"type": ["integer", "null"]}, "python": _TEXT, "run_id": _TEXT},
}

#: a measured time and its rates, as suite._timing and suite.rates write them
_TIMED = {"required": ["median_s", "iqr_s", "min_s", "gflops", "gbs"],
          "properties": {"median_s": {"type": "number", "exclusiveMinimum": 0}, "iqr_s": _NUMBER,
                         "min_s": _NUMBER, "gflops": _NUMBER, "gbs": _NUMBER,
                         "roofline_efficiency": _MAYBE_NUMBER}}


def _when_ok(schema: dict) -> dict:
    """``schema`` applies to records whose status is "ok" (others carry a reason instead)."""
    return {"if": {"properties": {"status": {"const": "ok"}}}, "then": schema}


BENCH = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "accel.bench-1.schema.json",
    "title": BENCH_SCHEMA,
    "description": "accel bench --json (docs/benchmarks.md)",
    "type": "object",
    "required": ["schema", "machine", "backend", "device", "cases"],
    "properties": {
        "schema": {"const": BENCH_SCHEMA},
        "created": _TEXT,
        "machine": _MACHINE,
        "backend": _TEXT,
        "device": {"type": "object", "required": ["name"], "properties": {"name": _TEXT}},
        "versions": {"type": "object"},
        "profile": _TEXT,
        "ops": {"type": ["array", "null"], "items": _TEXT},  # the --ops filter, since 2026-12
        "load": {"type": "object", "properties": {k: _MAYBE_NUMBER for k in (
            "machine_cores", "own_cores", "others_cores")}},
        "peaks": {"oneOf": [{"type": "null"}, {"type": "object", "required": ["gflops", "gbs"],
                                                "properties": {"gflops": _NUMBER, "gbs": _NUMBER}}]},
        "baselines": {"type": "object"},
        # the decoder-step ops at n x n float32 beside torch's CPU eager, since 2026-12
        "decoder_ops": {"type": "array", "items": {
            "type": "object", "required": ["op", "n"],
            "properties": {"op": _TEXT, "n": {"type": "integer", "minimum": 1},
                           "accel_s": _NUMBER, "accel_gbs": _NUMBER, "torch_s": _NUMBER,
                           "ratio": _NUMBER, "error": _TEXT}}},
        "cases": {"type": "array", "items": {
            "type": "object",
            "required": ["id", "op", "dtype", "params", "status", "flops", "bytes"],
            "properties": {
                "id": _TEXT, "op": _TEXT, "dtype": _TEXT, "params": {"type": "object"},
                "status": {"enum": ["ok", "unsupported", "invalid", "error"]},
                "flops": {"type": "integer", "minimum": 0}, "bytes": {"type": "integer", "minimum": 0},
                "intensity": _MAYBE_NUMBER, "ratio_to_best": _NUMBER, "best_baseline": _TEXT,
                "weight_gbs": _MAYBE_NUMBER,
                "baselines": {"type": "array", "items": {
                    "type": "object", "required": ["name", "status"],
                    "properties": {"name": _TEXT, "status": {"enum": ["ok", "invalid", "error", "unsupported"]}},
                    "allOf": [_when_ok(_TIMED)]}},
            },
            # a ratio names its baseline; a quantized op names its format
            "dependentRequired": {"ratio_to_best": ["best_baseline"]},
            "allOf": [_when_ok(_TIMED), {
                "if": {"properties": {"op": {"enum": ["quantize", "dequantize", "qmatmul"]}}},
                "then": {"properties": {"params": {"required": ["fmt"],
                                                   "properties": {"fmt": _TEXT}}}}}],
        }},
    },
}

CONFORMANCE = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "accel.conformance-1.schema.json",
    "title": CONFORMANCE_SCHEMA,
    "description": "accel conformance --json (docs/conformance.md)",
    "type": "object",
    "required": ["schema", "backend", "cases"],
    "properties": {
        "schema": {"const": CONFORMANCE_SCHEMA},
        "backend": _TEXT,
        # a device record, or its name in files written before it was one
        "device": {"oneOf": [_TEXT, {"type": "object", "properties": {"name": _TEXT}}]},
        "machine": {"oneOf": [{"type": "null"}, _MACHINE]},  # null: attach to a bench file
        "versions": {"type": "object"},
        "profile": _TEXT,
        # accel campaign --bitwise: per "op/dtype", repeated outputs bit-identical or not
        "repeatability": {"type": "object", "required": ["runs", "by_op_dtype"], "properties": {
            "runs": {"type": "integer", "minimum": 2},
            "by_op_dtype": {"type": "object", "additionalProperties": {
                "type": "object", "required": ["cases", "identical", "flaky"],
                "properties": {"cases": {"type": "integer"}, "identical": {"type": "integer"},
                               "flaky": {"type": "integer"}}}}}},
        "cases": {"type": "array", "items": {
            "type": "object", "required": ["op", "dtype", "status"],
            "properties": {"id": _TEXT, "op": _TEXT, "dtype": _TEXT,
                           "status": {"enum": list(CONFORMANCE_STATUSES)}, "evidence": _TEXT}}},
    },
}

KERNELS_CHECK = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "accel.kernels_check-1.schema.json",
    "title": KERNELS_CHECK_SCHEMA,
    "description": "accel kernels check --json (docs/kernels.md)",
    "type": "object",
    "required": ["schema", "targets", "results"],
    "properties": {
        "schema": {"const": KERNELS_CHECK_SCHEMA},
        "targets": {"type": "array", "items": _TEXT},
        "results": {"type": "array", "items": {
            "type": "object", "required": ["job", "target", "status"],
            "properties": {"job": _TEXT, "file": _TEXT, "target": _TEXT,
                           "status": {"enum": ["ok", "failed", "unavailable", "n/a"]},
                           "defines": {"type": "object"},
                           "kernels": {"type": "object", "additionalProperties": {"type": "object"}}}}},
    },
}


MODEL_CONFORMANCE = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "accel.model-conformance-1.schema.json",
    "title": MODEL_CONFORMANCE_SCHEMA,
    "description": "accel conformance --model --json (docs/models.md); a run whose process died "
                   "has 'crashed' (the signal) and no measures",
    "type": "object",
    "required": ["schema", "model", "backend", "passed"],
    "properties": {
        "schema": {"const": MODEL_CONFORMANCE_SCHEMA}, "model": _TEXT, "backend": _TEXT,
        "passed": {"type": "boolean"}, "crashed": _TEXT, "machine": _MACHINE,
        "layer_relative_error": {"type": "object", "additionalProperties": _NUMBER},
        "logits": {"type": "object", "required": ["mean_kl", "max_kl", "top1_agreement", "rms_delta_p"],
                   "properties": {k: _NUMBER for k in ("mean_kl", "max_kl", "top1_agreement",
                                                        "rms_delta_p")}},
        "llama_cpp": {"type": "object", "required": ["status"],
                      "description": "the measures against llama.cpp's logits (status ok: source, "
                                     "logits, bounds, passed) or why there are none (reason)"},
    },
}

MODEL_BENCH = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "accel.bench_model-1.schema.json",
    "title": MODEL_BENCH_SCHEMA,
    "description": "accel bench --model --json (docs/models.md)",
    "type": "object",
    "required": ["schema", "model", "backend", "accel"],
    "properties": {
        "schema": {"const": MODEL_BENCH_SCHEMA}, "model": _TEXT, "backend": _TEXT,
        "machine": _MACHINE,
        "accel": {"type": "object", "required": ["prompt_tokens_per_s", "decode_tokens_per_s"],
                  "properties": {"prompt_tokens_per_s": _NUMBER,
                                 "decode_tokens_per_s": _MAYBE_NUMBER}},
        "llama_cpp": {"type": "object", "required": ["status"]},
        "ratio": {"type": "object", "additionalProperties": _NUMBER},
    },
}

#: schema name -> JSON Schema, for every result file the report renders
SCHEMAS: dict[str, dict[str, Any]] = {BENCH_SCHEMA: BENCH, CONFORMANCE_SCHEMA: CONFORMANCE,
                                      KERNELS_CHECK_SCHEMA: KERNELS_CHECK,
                                      MODEL_CONFORMANCE_SCHEMA: MODEL_CONFORMANCE,
                                      MODEL_BENCH_SCHEMA: MODEL_BENCH}


def published_name(schema: str) -> str:
    """File name of a schema in docs/schemas/: 'accel.bench/1' -> 'accel.bench-1.schema.json'."""
    return SCHEMAS[schema]["$id"]


def _where(error) -> str:
    """'cases[3].median_s' for the path of a validation error ('' at the top level)."""
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out.lstrip(".")


def validate(doc: Any, path: str | Path) -> str | None:
    """The schema name of ``doc`` when it is a valid accel result file; None when it is not an
    accel result file the report renders (another schema, or no schema). A file that names a
    known schema but breaks it raises ArgumentError ``PATH: where: what is wrong``."""
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema not in SCHEMAS:
        return None
    error = best_match(Draft202012Validator(SCHEMAS[schema]).iter_errors(doc))
    if error is not None:
        where = _where(error)
        raise ArgumentError(f"{path}: {where + ': ' if where else ''}{error.message} "
                            f"(not a valid {schema} file; see docs/schemas/{published_name(schema)})")
    return schema


def publish(folder: str | Path) -> list[Path]:
    """Write every schema into ``folder`` (docs/schemas/), as the docs publish them."""
    out = []
    for name in SCHEMAS:
        path = Path(folder) / published_name(name)
        path.write_text(json.dumps(SCHEMAS[name], indent=2) + "\n")
        out.append(path)
    return out
