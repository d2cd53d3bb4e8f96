"""dense_gemv against its reference (fp32 matmul): CPU interpreter with small shapes and
tiles; GPU (marked gpu) at the Llama-3-8B decode projections with every config."""
import pytest
import torch

from kubellm.kernels.dense_gemv import (CONFIGS, MAX_M, TOLERANCES, dense_gemv,
                                        dense_gemv_ref)

# (BLOCK_N, BLOCK_K, warps, stages) small enough for the interpreter
SMALL = [(4, 32, 4, 1), (8, 64, 2, 3), (16, 16, 4, 1)]


def operands(m, n, k, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) * 0.02).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype)
    return x, w, b


@pytest.mark.parametrize("config", SMALL, ids=lambda c: f"bn{c[0]}bk{c[1]}")
@pytest.mark.parametrize("m", [1, 2, 3, 4])    # ROWS 1, 2, 4 (3: one row masked)
def test_matches_reference_in_fp32(config, m):
    # N = 44: a partial tile of features for every BLOCK_N; K = 128 whole steps of 16-64
    x, w, _ = operands(m, 44, 128, torch.float32, seed=m)
    out = dense_gemv(x, w, config)
    assert out.shape == (m, 44) and out.dtype == torch.float32
    atol, rtol = TOLERANCES[torch.float32]
    torch.testing.assert_close(out, dense_gemv_ref(x, w), atol=atol, rtol=rtol)


def test_k_not_a_multiple_of_the_step_and_a_bias():
    x, w, b = operands(3, 20, 100, torch.float32)   # 100 = 3 steps of 32 and 4 more
    atol, rtol = TOLERANCES[torch.float32]
    torch.testing.assert_close(dense_gemv(x, w, (8, 32, 4, 1), bias=b),
                               dense_gemv_ref(x, w, b), atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_inputs_accumulate_in_fp32(dtype):
    x, w, b = operands(2, 40, 256, dtype)
    out = dense_gemv(x, w, (8, 64, 4, 1), bias=b)
    assert out.dtype == dtype
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(out.float(), dense_gemv_ref(x, w, b).float(), atol=atol,
                               rtol=rtol)


def test_a_row_of_a_wider_input_and_no_rows():
    """x may be a column slice (row stride above K): the engine hands on views."""
    x, w, _ = operands(2, 24, 64, torch.float32)
    wide = torch.cat([x, torch.ones(2, 8)], dim=1)[:, :64]
    torch.testing.assert_close(dense_gemv(wide, w, SMALL[1]), dense_gemv_ref(x, w),
                               atol=1e-4, rtol=1e-4)
    assert dense_gemv(x[:0], w, SMALL[0]).shape == (0, 24)


def test_bad_arguments_are_named():
    x, w, b = operands(2, 16, 96, torch.float32)
    with pytest.raises(ValueError, match=r"config must be \(BLOCK_N, BLOCK_K, num_warps"):
        dense_gemv(x, w, (16, 32, 4))
    with pytest.raises(TypeError, match="weight must have dtype float32"):
        dense_gemv(x, w.half(), SMALL[0])
    with pytest.raises(ValueError, match=r"weight must have shape \(16, 96\)"):
        dense_gemv(x, w[:, :64].contiguous(), SMALL[0])
    with pytest.raises(ValueError, match=r"bias must have shape \(16,\)"):
        dense_gemv(x, w, SMALL[0], bias=b[:8])
    with pytest.raises(ValueError, match=f"at most {MAX_M} rows"):
        dense_gemv(torch.zeros(MAX_M + 1, 96), w, SMALL[0])


def test_every_config_is_distinct_and_steps_whole_k_of_the_projections():
    assert len(set(CONFIGS)) == len(CONFIGS)
    for _, block_k, _, _ in CONFIGS:
        assert 4096 % block_k == 0 and 14336 % block_k == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n,k", [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
                                 (1000, 896)])
def test_gpu_every_config_matches_the_reference(n, k):
    gen = torch.Generator(device="cuda").manual_seed(0)
    w = (torch.randn(n, k, device="cuda", generator=gen) * 0.02).bfloat16()
    b = torch.randn(n, device="cuda", generator=gen).bfloat16()
    for m in range(1, MAX_M + 1):
        x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
        ref = dense_gemv_ref(x, w, b).float()
        for config in CONFIGS:
            out = dense_gemv(x, w, config, bias=b).float()
            torch.testing.assert_close(out, ref, atol=2e-2, rtol=1e-2,
                                       msg=lambda s, c=config: f"{c}: {s}")
