"""Which kernels a decode step launches on the GPU: the fused ones, not their pieces.

A decoder layer's small kernels on the CUDA path are one fused residual-add + RMSNorm
(twice), the rotary embedding and the KV-cache write (one kernel with the
``rope_kv_write`` switch), the paged attention and one SiLU-and-mul; no torch elementwise
kernel should appear per layer (those would be an unfused path taken by mistake)."""
from __future__ import annotations

import pytest
import torch

from benchmarks.common.shapes import LLAMA3_8B, write_config

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip(reason="needs a CUDA GPU", allow_module_level=True)

LAYERS = 4   # a per-layer unfused path shows up 4 times; the step itself has ~3 torch kernels


def decode_step_kernels(make_llm, tmp_path, switches: str) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    from kubellm.runtime import SamplingParams
    from kubellm.runtime.cli.bench.steady import fill_until_decoding
    path = write_config(LLAMA3_8B, tmp_path / (switches.replace(",", "_") or "defaults"),
                        num_hidden_layers=LAYERS)
    llm = make_llm(path, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
                   max_model_len=1024, num_kv_blocks=256, kernel_switches=switches)
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True, detokenize=False)
    fill_until_decoding(engine, {str(i): list(range(100, 150 + i)) for i in range(4)}, params)
    engine.step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        engine.step()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
    return names


def count(names, needle):
    return sum(needle in n for n in names)


# named both ways: on Hopper the GPU's defaults already hold rope_kv_write
@pytest.mark.parametrize("switches", ["rope_kv_write=off", "rope_kv_write=on"])
def test_decode_step_uses_the_fused_kernels(tmp_path, switches, make_llm):
    names = decode_step_kernels(make_llm, tmp_path, switches)
    assert count(names, "_rms_norm_kernel") == 2 * LAYERS + 1      # + the final norm
    assert count(names, "_silu_and_mul_kernel") == LAYERS
    assert count(names, "_paged_attention_kernel") == LAYERS
    if switches.endswith("=on"):
        assert count(names, "_rotary_kv_write_kernel") == LAYERS
        assert count(names, "_rotary_kernel") == count(names, "_write_kv_cache_kernel") == 0
    else:
        assert count(names, "_rotary_kernel") == 2 * LAYERS          # q and k
        assert count(names, "_write_kv_cache_kernel") == LAYERS
    # no torch pointwise kernels per layer: the unfused CPU paths were not taken
    per_layer = [n for n in names if "elementwise" in n.lower() or "pow" in n.lower()]
    assert len(per_layer) < LAYERS, per_layer
