"""The rotary cos/sin table is built once per parameters and device and shared by every
layer (one per layer cost Llama 3 2 GiB of GPU memory)."""
import gc

import torch

from kubellm.runtime.layers import rotary
from kubellm.runtime.layers.rotary import RotaryEmbedding
from kubellm.runtime.models.llama import LlamaArgs, LlamaForCausalLM

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


def test_layers_share_one_table_per_parameters():
    args = LlamaArgs(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=3,
                     num_heads=2, num_kv_heads=1, head_dim=16, rms_norm_eps=1e-5,
                     rope_theta=500000.0, rope_scaling=LLAMA3_SCALING, max_position=512,
                     tie_word_embeddings=False)
    model = LlamaForCausalLM(args)
    cpu = torch.device("cpu")
    tables = {id(layer.self_attn.rotary.table(cpu)) for layer in model.layers.values()}
    assert len(tables) == 1
    other = RotaryEmbedding(16, 512, 500000.0, None).table(cpu)     # no scaling: its own
    assert id(other) not in tables
    torch.testing.assert_close(model.layers["0"].self_attn.rotary.table(cpu),
                               RotaryEmbedding(16, 512, 500000.0, LLAMA3_SCALING).build_cache(cpu))
    del model, other
    gc.collect()
    assert not any(key[:3] == (16, 512, 500000.0) for key in rotary._TABLES.keys())
