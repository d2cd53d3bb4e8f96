"""dense_gemm against its reference (fp32 matmul): CPU interpreter with small shapes and
tiles; GPU (marked gpu) at the Llama-3-8B decode projections with every config."""
import pytest
import torch

from kubellm.kernels.dense_gemm import (CONFIGS, MAX_SPLIT_M, TOLERANCES, dense_gemm,
                                        dense_gemm_ref)

# (BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, warps, stages) small enough for the interpreter.
# K = 128 is four steps of 32: SPLIT_K 3 gives splits of 2, 2 and 0 steps, so the last
# program of each tile finds no K and must still count itself in.
SMALL = [(16, 16, 32, 1, 4, 2), (16, 32, 32, 2, 4, 2), (32, 16, 32, 3, 4, 2),
         (16, 16, 32, 4, 4, 2)]


@pytest.fixture
def workspaces(monkeypatch):
    """A fresh split-K workspace registry, checked clean after each test."""
    import kubellm.kernels.split_k as split_k
    registry = {}
    monkeypatch.setattr(split_k, "_WORKSPACES", registry)
    yield registry
    for (_, n, rows), (ws, counts) in registry.items():
        assert rows == MAX_SPLIT_M and ws.shape == (MAX_SPLIT_M, n)
        assert not ws.any() and not counts.any(), f"N={n}: workspace left non-zero"


def operands(m, n, k, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) * 0.02).to(dtype)
    return x, w


@pytest.mark.parametrize("config", SMALL, ids=lambda c: f"bm{c[0]}bn{c[1]}sk{c[3]}")
@pytest.mark.parametrize("m", [1, 17, 40])   # one partial tile, two, three
def test_matches_reference_in_fp32(workspaces, config, m):
    x, w = operands(m, 48, 128, torch.float32, seed=m)
    out = dense_gemm(x, w, config)
    assert out.shape == (m, 48) and out.dtype == torch.float32
    atol, rtol = TOLERANCES[torch.float32]
    torch.testing.assert_close(out, dense_gemm_ref(x, w), atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_inputs_accumulate_in_fp32(workspaces, dtype):
    x, w = operands(20, 40, 256, dtype)
    out = dense_gemm(x, w, (16, 16, 32, 2, 4, 2))
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(out.float(), dense_gemm_ref(x, w).float(), atol=atol, rtol=rtol)


def test_calls_with_other_rows_reuse_the_same_workspace(workspaces):
    x, w = operands(5, 48, 128, torch.float32)
    dense_gemm(x, w, SMALL[1])
    (key, (ws, counts)), = workspaces.items()
    for m in (1, 33):
        xm, _ = operands(m, 48, 128, torch.float32, seed=m)
        torch.testing.assert_close(dense_gemm(xm, w, SMALL[2]), dense_gemm_ref(xm, w),
                                   atol=1e-4, rtol=1e-4)
    assert list(workspaces) == [key] and workspaces[key][0] is ws


def test_bad_arguments_are_named():
    x, w = operands(4, 16, 96, torch.float32)
    with pytest.raises(ValueError, match="not a multiple of BLOCK_K=64"):
        dense_gemm(x, w, (16, 16, 64, 1, 4, 2))
    with pytest.raises(ValueError, match=r"config must be \(BLOCK_M, BLOCK_N, BLOCK_K"):
        dense_gemm(x, w, (16, 16, 32, 1))
    with pytest.raises(TypeError, match="weight must have dtype float32"):
        dense_gemm(x, w.half(), (16, 16, 32, 1, 4, 2))
    with pytest.raises(ValueError, match=r"weight must have shape \(16, 96\)"):
        dense_gemm(x, w[:, :64].contiguous(), (16, 16, 32, 1, 4, 2))
    big = torch.zeros(MAX_SPLIT_M + 1, 96)
    with pytest.raises(ValueError, match=f"at most {MAX_SPLIT_M} rows"):
        dense_gemm(big, w, (16, 16, 32, 2, 4, 2))
    assert dense_gemm(big, w, (16, 16, 32, 1, 4, 2)).shape == (MAX_SPLIT_M + 1, 16)


def test_every_config_tiles_the_decode_projections():
    """The benchmark's configs: K steps that divide Llama-3-8B's K (4,096 and 14,336)."""
    assert len(set(CONFIGS)) == len(CONFIGS)
    for _, _, block_k, split, _, _ in CONFIGS:
        assert 4096 % block_k == 0 and 14336 % block_k == 0 and split in (1, 2, 4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n,k", [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)])
def test_gpu_every_config_matches_the_reference(n, k):
    gen = torch.Generator(device="cuda").manual_seed(0)
    w = (torch.randn(n, k, device="cuda", generator=gen) * 0.02).bfloat16()
    for m in (208, 256):   # a partial row tile; both multiples of 16 (one compiled variant)
        x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
        ref = dense_gemm_ref(x, w).float()
        for config in CONFIGS:
            out = dense_gemm(x, w, config).float()
            # bf16 output: one rounding, plus fp32 sums in another order
            torch.testing.assert_close(out, ref, atol=2e-2, rtol=1e-2,
                                       msg=lambda s, c=config: f"{c}: {s}")
