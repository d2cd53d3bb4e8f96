"""GGUF block decoding against gguf's own dequantizer, on random blocks of every type we
read (random bytes are valid blocks once their fp16 scales are finite): Q6_K too, which
llama.cpp's Q4_K_M files use for some tensors and gguf cannot write."""
import numpy as np
import pytest
import torch

from kubellm.runtime.loading.quantized.gguf_blocks import (_BLOCK_BYTES, QUANTIZED_TYPES,
                                                            quantized_weight)

# byte offsets of each type's fp16 fields
FP16_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q8_0": (0,), "Q4_K": (0, 2), "Q6_K": (208,)}


def random_blocks(kind: str, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    per_block = 256 if kind.endswith("_K") else 32
    blocks = rng.integers(0, 256, (rows * cols // per_block, _BLOCK_BYTES[kind]), np.uint8)
    for at in FP16_FIELDS[kind]:
        blocks[:, at:at + 2] = (rng.standard_normal(len(blocks)) * 0.01).astype(
            np.float16).view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


@pytest.mark.parametrize("kind", sorted(QUANTIZED_TYPES))
def test_blocks_decode_like_gguf(kind):
    import gguf
    rows, cols = 6, 512
    data = random_blocks(kind, rows, cols)
    expected = gguf.quants.dequantize(data, gguf.GGMLQuantizationType[kind])
    weight = quantized_weight(data, kind, rows, cols)
    assert weight.codes.shape == (cols, rows) and weight.bits == QUANTIZED_TYPES[kind][0]
    torch.testing.assert_close(weight.dequantize(), torch.from_numpy(expected.copy()),
                               atol=1e-7, rtol=2e-6)
