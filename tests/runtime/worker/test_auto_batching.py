"""Hardware-aware batching on made-up devices: what is chosen, and that the engine logs
it and keeps what the user set."""
import logging
from types import SimpleNamespace

import pytest
import torch

from kubellm.runtime import assembly
from kubellm.runtime.config import EngineConfig
from kubellm.runtime.config_sources import ConfigError
from kubellm.runtime.worker import auto_batching as ab

H200 = ab.DeviceFacts("cuda", "NVIDIA H200", 143 * 10**9, 132)
L4 = ab.DeviceFacts("cuda", "NVIDIA L4", 24 * 10**9, 58)
CPU = ab.DeviceFacts("cpu", "cpu")
LLAMA3_8B = ab.ModelFacts(hidden_size=4096, intermediate_size=14336, qkv_size=6144,
                          itemsize=2, max_model_len=131072)
QWEN_05B = ab.ModelFacts(hidden_size=896, intermediate_size=4864, qkv_size=1152, itemsize=2,
                         max_model_len=32768)
LLAMA3_70B = ab.ModelFacts(hidden_size=8192, intermediate_size=28672, qkv_size=10240,
                           itemsize=2, max_model_len=131072)


def test_token_budget_follows_sms_and_hidden_size():
    # 4 waves x 132 SMs x 128x256 tiles / 4096 = 4224 tokens -> 8192
    assert ab.choose_max_num_batched_tokens(H200, LLAMA3_8B, 1024)[0] == 8192
    assert ab.choose_max_num_batched_tokens(H200, QWEN_05B, 1024)[0] == 16384   # capped
    assert ab.choose_max_num_batched_tokens(H200, LLAMA3_70B, 1024)[0] == 4096
    assert ab.choose_max_num_batched_tokens(L4, LLAMA3_8B, 64)[0] == 2048       # floor
    value, why = ab.choose_max_num_batched_tokens(H200, LLAMA3_8B, 1024)
    assert "132 SMs" in why and "hidden 4096" in why


def test_token_budget_bounded_by_memory_and_raised_to_max_num_seqs():
    small = ab.DeviceFacts("cuda", "small", 8 * 2**30, 132)    # 2% of 8 GiB: 1677 tokens
    value, why = ab.choose_max_num_batched_tokens(small, LLAMA3_8B, 64)
    assert value == 2048 and "2% of 8 GiB" in why
    value, why = ab.choose_max_num_batched_tokens(H200, LLAMA3_8B, 20000)
    assert value == 20000 and "max_num_seqs" in why
    assert ab.choose_max_num_batched_tokens(CPU, LLAMA3_8B, 256)[0] == 2048


def test_max_num_seqs_from_the_kv_pool():
    assert ab.choose_max_num_seqs(H200, LLAMA3_8B, None)[0] == 1024     # before sizing
    value, why = ab.choose_max_num_seqs(H200, LLAMA3_8B, 866_000)        # W's pool
    assert value == 1024 and "866000 tokens hold 1691 sequences" in why
    assert ab.choose_max_num_seqs(L4, LLAMA3_8B, 30_000)[0] == 48      # 58 fit -> x16
    short = ab.ModelFacts(4096, 14336, 6144, 2, max_model_len=128)
    assert ab.choose_max_num_seqs(L4, short, 30_000)[0] == 234 - 234 % 16
    assert ab.choose_max_num_seqs(L4, LLAMA3_8B, 5_000)[0] == 9          # under 16: as is
    assert ab.choose_max_num_seqs(CPU, LLAMA3_8B, 10**6)[0] == 256


def test_graph_sizes_dense_where_padding_costs():
    sizes, _ = ab.choose_cuda_graph_sizes(1024)
    assert sizes[:8] == [1, 2, 4, 8, 16, 32, 64, 128]
    assert sizes[8:16] == list(range(144, 257, 16)) and sizes[-1] == 1024
    above = sizes[16:]
    assert all(b - a == 32 for a, b in zip(above, above[1:]))
    assert ab.choose_cuda_graph_sizes(256)[0][-2:] == [240, 256]
    assert ab.choose_cuda_graph_sizes(100)[0] == [1, 2, 4, 8, 16, 32, 64, 100]
    assert ab.choose_cuda_graph_sizes(1)[0] == [1]


def fake_runner(device_type="cuda"):
    args = SimpleNamespace(hidden_size=4096, intermediate_size=14336, num_heads=32,
                           num_kv_heads=8, head_dim=128)
    return SimpleNamespace(device=torch.device(device_type), dtype=torch.bfloat16,
                           model=SimpleNamespace(args=args))


def test_engine_fills_unset_fields_and_logs_why(monkeypatch, caplog):
    monkeypatch.setattr(ab.DeviceFacts, "of", classmethod(lambda cls, device: H200))
    config = EngineConfig(max_model_len=8192)
    caplog.set_level(logging.INFO, logger="kubellm.runtime.assembly")
    assembly.choose_step_budget(config, fake_runner())
    assert config.max_num_batched_tokens == 8192 and config.max_num_seqs is None
    sizes = assembly.choose_batch_limits(config, fake_runner(), kv_capacity_tokens=866_000)
    assert config.max_num_seqs == 1024 and sizes[-1] == 1024
    text = caplog.text
    assert "max_num_batched_tokens=8192 (4 waves" in text
    assert "max_num_seqs=1024 (the KV pool" in text and "CUDA graph sizes" in text


def test_what_the_user_set_is_kept(monkeypatch, caplog):
    monkeypatch.setattr(ab.DeviceFacts, "of", classmethod(lambda cls, device: H200))
    config = EngineConfig(max_num_seqs=100, max_num_batched_tokens=3000,
                          cuda_graph_sizes="1,8,64,100")
    caplog.set_level(logging.INFO, logger="kubellm.runtime.assembly")
    assembly.choose_step_budget(config, fake_runner())
    assert assembly.choose_batch_limits(config, fake_runner(), 866_000) == [1, 8, 64, 100]
    assert (config.max_num_seqs, config.max_num_batched_tokens) == (100, 3000)
    assert "hardware-aware" not in caplog.text


def test_cpu_engine_gets_the_fixed_defaults(tiny_model_dir, caplog):
    from kubellm.runtime import LLM
    caplog.set_level(logging.INFO, logger="kubellm.runtime.assembly")
    llm = LLM(tiny_model_dir, dtype="float32")
    assert (llm.engine.config.max_num_seqs, llm.engine.config.max_num_batched_tokens) == \
        (256, 2048)
    assert llm.engine.scheduler.max_num_seqs == 256
    assert "max_num_seqs=256 (CPU" in caplog.text


@pytest.mark.parametrize("text", ["", "1,x", "0,4", "-2"])
def test_bad_graph_sizes_name_the_field(text):
    with pytest.raises(ConfigError, match="cuda_graph_sizes"):
        EngineConfig(cuda_graph_sizes=text)
