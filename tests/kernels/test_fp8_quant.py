"""Per-token FP8 quantization in one kernel (fp8_quant.py): the codes and scales equal the
torch reference's bit for bit, and that reference is what the FP8 linear runs without the
kernel (fp8.quantize_activations)."""
import pytest
import torch

from kubellm.kernels.fp8_quant import per_token_fp8, per_token_fp8_ref
from kubellm.runtime.layers.quantization import fp8
from tests.kernels.test_kv_cache_fp8 import values_over_every_exponent

MIN_SCALE = 1e-12


def rows(m, k, dtype, device="cpu"):
    """Rows of values over E4M3's whole range once scaled, a zero row, a row of one
    value, and a row whose largest |value| is negative."""
    gen = torch.Generator().manual_seed(m * 1000 + k)
    x = torch.randn(m, k, generator=gen) * torch.exp2(torch.randint(-8, 8, (m, 1), generator=gen))
    x[0] = values_over_every_exponent(max(k, 6), torch.float32)[:k]
    if m > 3:
        x[1] = 0.0
        x[2] = 3.0
        x[3, 0] = -1e3
    return x.to(dtype).to(device)


def assert_same(got, want):
    assert got[0].dtype == torch.float8_e4m3fn and got[1].dtype == torch.float32
    assert got[1].shape == want[1].shape
    bad = (got[1] != want[1]).flatten().nonzero().flatten().tolist()[:4]
    assert not bad, f"scales differ at rows {bad}: " \
        f"{got[1].flatten()[bad].tolist()} vs {want[1].flatten()[bad].tolist()}"
    differ = (got[0].view(torch.uint8) != want[0].view(torch.uint8)).nonzero().tolist()
    assert not differ, f"{len(differ)} codes differ, first at (row, col) {differ[:4]}: " \
        f"{[got[0][r, c].item() for r, c in differ[:4]]} vs " \
        f"{[want[0][r, c].item() for r, c in differ[:4]]}"


def test_the_scale_is_the_row_max_times_the_fp32_reciprocal_of_448():
    """Not the max divided by 448: torch on CUDA computes ``/ 448`` as that product, the
    CPU divides, and the kernel must match the reference on both. Among these maxima
    are some where the two differ, so that a division here fails the test on the CPU."""
    amax = torch.linspace(1.0, 2.0, 4097, dtype=torch.float32)
    divided = amax / 448.0
    product = amax * torch.tensor(1.0 / 448.0, dtype=torch.float32)
    assert (divided != product).any()          # the rows that tell the two apart
    x = torch.stack([amax, -amax / 2], dim=1)  # each row's largest |value| is amax
    for got in (fp8.quantize_activations(x)[1], per_token_fp8_ref(x, MIN_SCALE)[1],
                per_token_fp8(x, MIN_SCALE)[1]):
        assert torch.equal(got.flatten(), product)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,k", [(1, 1), (5, 7), (6, 64), (3, 4096 + 37)])
def test_codes_and_scales_equal_the_reference(dtype, m, k):
    x = rows(m, k, dtype)
    assert_same(per_token_fp8(x, MIN_SCALE), per_token_fp8_ref(x, MIN_SCALE))


def test_the_reference_is_what_the_fp8_linear_runs():
    x = rows(6, 300, torch.bfloat16)
    assert fp8._MIN_SCALE == MIN_SCALE
    assert_same(per_token_fp8_ref(x, MIN_SCALE), fp8.quantize_activations(x))


def test_a_strided_input_and_empty_ones():
    x = rows(8, 96, torch.float32)
    view = x[:, 16:80]                 # rows 96 apart, 64 wide
    assert_same(per_token_fp8(view, MIN_SCALE), per_token_fp8_ref(view, MIN_SCALE))
    codes, scales = per_token_fp8(torch.empty(0, 16), MIN_SCALE)
    assert codes.shape == (0, 16) and scales.shape == (0, 1)
    with pytest.raises(ValueError, match="x must have 2 dimensions"):
        per_token_fp8(torch.zeros(2, 3, 4), MIN_SCALE)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("m", [1, 64, 300])
@pytest.mark.parametrize("k", [4096, 14336])
def test_gpu_codes_equal_the_reference_at_llama3_8b_widths(m, k):
    x = rows(m, k, torch.bfloat16, "cuda")
    assert_same(per_token_fp8(x, MIN_SCALE), per_token_fp8_ref(x, MIN_SCALE))


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_kernel_code_generates_for_hopper(dtype):
    """The interpreter runs the kernel as Python; this builds it for sm_90 as the H200
    would (a non-constexpr global, which the interpreter accepts, failed here)."""
    import json
    import os
    import subprocess
    import sys

    from tests.paths import ROOT
    spec = {"signature": {"x_ptr": f"*{dtype}", "codes_ptr": "*fp8e4nv",
                          "scale_ptr": "*fp32", "K": "i32", "stride_xm": "i32",
                          "min_scale": "fp32", "BLOCK": "constexpr",
                          "EMULATE_ROUNDING": "constexpr"},
            "constexprs": {"BLOCK": 1024, "EMULATE_ROUNDING": False}}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.kernels.ttir_for_hopper", "kubellm.kernels.fp8_quant",
         "_per_token_fp8_kernel", json.dumps(spec)], capture_output=True, text=True,
        timeout=300, cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "_per_token_fp8_kernel" in proc.stdout and "tt.func" in proc.stdout, proc.stdout
