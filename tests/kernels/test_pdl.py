"""GEMVs launched as programmatic dependents (kernels/pdl.py): where PDL is not supported
(the CPU interpreter) ``pdl=True`` is ignored; on a Hopper GPU a chain of them, each
reading the one before's output, gives the results of the plain kernels, eager and
replayed from a CUDA graph, within the split-K sums' run-to-run spread (a kernel that
read its input before the one ahead wrote it would not)."""
import pytest
import torch

from kubellm.kernels import w4a16_gemv
from kubellm.kernels.dense_gemv import dense_gemv, dense_gemv_ref
from kubellm.kernels.w4a16_gemm import w4a16_gemm_ref

from tests.kernels.test_w4a16_gemm import make_weight


def test_pdl_is_ignored_where_it_is_not_supported():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 64, generator=gen)
    w = torch.randn(24, 64, generator=gen)
    torch.testing.assert_close(dense_gemv(x, w, (8, 32, 4, 1), pdl=True),
                               dense_gemv_ref(x, w), atol=1e-4, rtol=1e-4)
    weight, _ = make_weight(64, 32)
    got = w4a16_gemv.launch(x, weight["qweight"], weight["scales"], weight["biases"], 32,
                            pdl=True)
    torch.testing.assert_close(got, w4a16_gemm_ref(x, **weight), atol=1e-4, rtol=1e-4)


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


def _chain(x, layers, gemv):
    """Each GEMV's input the first K columns of the one before's output."""
    h = x
    for w in layers:
        h = gemv(h[:, :w[1]], w[0])
    return h


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="PDL needs a CUDA GPU of compute capability 9.0+")
def test_gpu_chains_of_pdl_gemvs_match_the_plain_ones():
    gen = torch.Generator(device="cuda").manual_seed(0)
    k = 4096
    dense = [((torch.randn(n, k, device="cuda", generator=gen) / k ** 0.5).bfloat16(), k)
             for n in (6144, 4096, 28672, 4096) * 2]
    quant = []
    for n in (6144, 4096, 28672, 4096) * 2:
        weight, _ = make_weight(k, n, group_size=128, device="cuda", seed=n)
        quant.append(((weight["qweight"], weight["scales"].bfloat16(),
                       weight["biases"].bfloat16() * 0 - weight["scales"].bfloat16() * 7.5), k))
    x = torch.randn(1, k, device="cuda", generator=gen).bfloat16()
    cases = {
        "dense": (dense, lambda h, w, pdl: dense_gemv(h, w, (4, 512, 4, 3), pdl=pdl)),
        "4-bit": (quant, lambda h, w, pdl: w4a16_gemv.launch(h, *w, 128, pdl=pdl)),
    }
    for name, (layers, gemv) in cases.items():
        want = _chain(x, layers, lambda h, w: gemv(h, w, False)).float()
        eager = _chain(x, layers, lambda h, w: gemv(h, w, True)).float()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = _chain(x, layers, lambda h, w: gemv(h, w, True))
        for _ in range(3):
            graph.replay()
            torch.cuda.synchronize()
            for got in (eager, out.float()):
                diff = ((got - want).abs().max() / want.abs().max()).item()
                assert diff < 5e-2, f"{name}: the PDL chain differs by {diff:.3g}"
