"""spec.model.quantization: validated by the CRD schema, passed to `kubellm serve`, and the
pods' memory sized from 4-bit weights (also for models whose name says they are 4-bit,
and the embedded GGUF)."""
from __future__ import annotations

import pytest

from kubellm.operator.builders.pod import serve_args
from kubellm.operator.builders.sizing import bytes_per_parameter, default_requests
from kubellm.operator.validation import defaulted_spec
from tests.operator.test_operator_hardening import build, pod_templates

HF8B = {"source": {"huggingFace": "meta-llama/Meta-Llama-3-8B-Instruct"}}


def memory_request(spec: dict) -> str:
    return pod_templates(build(spec))[0]["spec"]["containers"][0]["resources"]["requests"][
        "memory"]


def test_the_field_reaches_the_runtime_flag():
    spec = defaulted_spec({"model": {**HF8B, "quantization": "4bit"}})
    args = serve_args(spec, "m")
    assert args[args.index("--quantization") + 1] == "4bit"
    assert "--quantization" not in serve_args(defaulted_spec({"model": HF8B}), "m")


def test_the_schema_refuses_an_unknown_method():
    from kubellm.operator.validation import SpecError
    with pytest.raises(SpecError, match="spec.model.quantization"):
        defaulted_spec({"model": {**HF8B, "quantization": "int3"}})


def test_cpu_memory_follows_the_4bit_weights():
    cpu = {"resources": {"accelerator": "none"}}
    # 8B in fp32 on CPU: 29.8 GiB of weights + 3; in 4-bit 1.1 B per parameter: 8.2 + 3;
    # each + the 2 GiB /dev/shm of one rank, which counts against the pod's memory
    assert memory_request({"model": HF8B, **cpu}) == "35Gi"
    assert memory_request({"model": {**HF8B, "quantization": "4bit"}, **cpu}) == "14Gi"
    named = {"source": {"huggingFace": "TheBloke/Llama-2-7B-GPTQ"}}
    assert bytes_per_parameter(defaulted_spec({"model": named, **cpu})) == 1.1


def test_gpu_pods_map_a_smaller_shard():
    spec = defaulted_spec({"model": {"source": {"huggingFace": "org/Qwen2.5-3B-AWQ"}}})
    # 3B x 0.8 B = 2.2 GiB mapped while loading (bf16 would be 5.6 GiB, capped at 5)
    assert default_requests(spec, 1, 1)["memory"] == "7Gi"
    assert default_requests(defaulted_spec({"model": {"source": {
        "huggingFace": "org/Qwen2.5-3B"}}}), 1, 1)["memory"] == "9Gi"


def test_the_embedded_model_counts_as_quantized():
    spec = defaulted_spec({"model": {"source": {"embedded": "SmolLM2-135M-Instruct"}},
                           "resources": {"accelerator": "none"}})
    assert bytes_per_parameter(spec) == 1.1


def test_fp8_weights_reach_the_flag_and_size_the_pods():
    """quantization: fp8 is a schema value, reaches `kubellm serve --quantization fp8`, and
    sizes memory at ~1 byte per linear parameter (more than 4-bit, less than bf16)."""
    spec = defaulted_spec({"model": {**HF8B, "quantization": "fp8"}})
    args = serve_args(spec, "m")
    assert args[args.index("--quantization") + 1] == "fp8"
    cpu = {"resources": {"accelerator": "none"}}
    assert bytes_per_parameter(defaulted_spec({"model": {**HF8B, "quantization": "fp8"},
                                               **cpu})) == 1.5
    assert bytes_per_parameter(spec) == 1.2
    # 8B on CPU: 1.5 B per parameter is 11.2 GiB of weights, + 3 + 2 of /dev/shm
    assert memory_request({"model": {**HF8B, "quantization": "fp8"}, **cpu}) == "17Gi"
    # between 4-bit (14Gi) and float32 (35Gi): see test_cpu_memory_follows_the_4bit_weights
