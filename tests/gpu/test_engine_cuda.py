"""The engine on a CUDA GPU in bf16 (run on the H200 by benchmarks/gpu/run_all.sh).

Correctness rule (bf16 makes exact equality too strict): up to the first divergence,
each generated token lies within the other side's top-5 logprobs. A prompt that breaks it
still passes when transformers, reading our tokens teacher-forced, puts every one of them
within NEAR_TIE_STD of its best logit: two nearly tied logits that bf16 summation order
flipped, after which the texts part. A wrong result's token sits where a random token
does, ~4-5 std below the best (agreement.teacher_forced_gaps). Why: the long-split test's
40 prompts over a 128,256-token vocabulary broke the top-5 rule on one token in one of two
H200 runs of the same code (s18 calls 61-62)."""
from __future__ import annotations

import random

import pytest
import torch

from benchmarks.common.agreement import first_disagreement, teacher_forced_gaps
from benchmarks.common.shapes import LLAMA3_8B, QWEN3_8B, write_config

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip(reason="needs a CUDA GPU", allow_module_level=True)

MAX_TOKENS = 16
NEAR_TIE_STD = 1.0


def _random_checkpoint(shape, tmp_path, layers=4):
    """A real safetensors checkpoint (HF's own init, std 0.02 -> spread logits) of the
    shape with fewer layers, so both engines load identical bf16 weights."""
    from transformers import AutoConfig, AutoModelForCausalLM
    path = write_config(shape, tmp_path / "cfg", num_hidden_layers=layers,
                        initializer_range=0.05)
    config = AutoConfig.from_pretrained(path)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "ckpt")
    return str(tmp_path / "ckpt"), model.eval()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """One checkpoint (and its transformers model) per shape, shared by the tests."""
    made = {}

    def get(name):
        if name not in made:
            shape = {"llama3": LLAMA3_8B, "qwen3": QWEN3_8B}[name]
            made[name] = _random_checkpoint(shape, tmp_path_factory.mktemp(name))
        return made[name]
    return get


@pytest.mark.parametrize("shape", ["llama3", "qwen3"])
@pytest.mark.parametrize("enforce_eager", [False, True], ids=["graphs", "eager"])
def test_bf16_top5_agreement_with_transformers(shape, enforce_eager, checkpoints, make_llm):
    _assert_top5_agreement(make_llm, *checkpoints(shape), enforce_eager=enforce_eager)


# every kernel switch on (kernel_switches.py): the fused rotary + KV write in graphs and
# eager steps, the prefill kernel (plain and descriptor loads) on chunked prefills whose
# later chunks read their context from the pages, beside decodes
@pytest.mark.parametrize("shape,switches", [
    ("llama3", "rope_kv_write,prefill_attention"),
    ("llama3", "rope_kv_write,prefill_attention,prefill_attention_tma"),
    ("qwen3", "rope_kv_write,prefill_attention,prefill_attention_tma")])
def test_bf16_top5_agreement_with_kernel_switches(shape, switches, checkpoints, make_llm,
                                                  monkeypatch):
    # prompts of 5-300 tokens: the prefill kernel serves them only below its usual bound
    from kubellm.runtime.attention import triton_backend
    monkeypatch.setattr(triton_backend, "PREFILL_KERNEL_MIN_QUERY", 1)
    _assert_top5_agreement(make_llm, *checkpoints(shape), kernel_switches=switches,
                           max_num_batched_tokens=512)


@pytest.mark.parametrize("shape", ["llama3", "qwen3"])
@pytest.mark.parametrize("switches", ["mixed_graphs,paged_decodes_apart=off",
                                      "mixed_graphs,paged_decodes_split=off",
                                      "mixed_graphs,paged_decodes_apart,paged_decodes_split"])
def test_bf16_top5_agreement_with_mixed_step_graphs(shape, switches, checkpoints, make_llm,
                                                     monkeypatch):
    """Steps mixing 512-token-budget chunks with decodes replay captured graphs (the
    decode rows in the chunks' prefill tiles; in decode tiles; and those cut: 16
    sequences take two splits each -- on Hopper the last is the default) and keep
    transformers' top-5."""
    from kubellm.runtime.worker.mixed_graphs import MixedGraphs
    replays = []
    real = MixedGraphs.replay

    def counted(self, token_ids, *args):
        replays.append(token_ids.shape[0])
        return real(self, token_ids, *args)
    monkeypatch.setattr(MixedGraphs, "replay", counted)
    _assert_top5_agreement(make_llm, *checkpoints(shape), kernel_switches=switches,
                           max_num_batched_tokens=512)
    assert replays, "no mixed step replayed a graph"


def test_bf16_top5_agreement_with_long_split_decode_batches(checkpoints, make_llm,
                                                             monkeypatch):
    """40 sequences decoding at once (past split-KV's few-sequence range), a third of them
    over 1,024 keys: the long split (decode_long_split, on by default on Hopper) cuts
    them, in graphs, and the tokens keep transformers' top-5."""
    from kubellm.kernels import paged_attention
    chosen = []
    real = paged_attention.choose_kv_split

    def recorded(*args, **kwargs):
        chosen.append(real(*args, **kwargs))
        return chosen[-1]
    monkeypatch.setattr(paged_attention, "choose_kv_split", recorded)
    _assert_top5_agreement(make_llm, *checkpoints("llama3"), num_prompts=40,
                           prompt_lens=(64, 2500), max_model_len=4096, max_num_seqs=64)
    long = (paged_attention.LONG_SPLITS, paged_attention.LONG_SPLIT_MIN_CHUNK)
    assert long in chosen, set(chosen)


def _assert_top5_agreement(make_llm, path, hf, num_prompts=12, prompt_lens=(5, 300),
                           max_model_len=2048, max_num_seqs=16, **engine_fields):
    from kubellm.runtime import SamplingParams
    rng = random.Random(0)
    prompts = [[rng.randrange(1000, 100000) for _ in range(rng.randint(*prompt_lens))]
               for _ in range(num_prompts)]
    llm = make_llm(path, skip_tokenizer_init=True, max_model_len=max_model_len,
                   max_num_seqs=max_num_seqs, gpu_memory_utilization=0.5, **engine_fields)
    assert llm.engine.executor.backend_name == "triton"
    if "kernel_switches" not in engine_fields:   # this GPU's defaults (on Hopper: TMA prefill)
        from kubellm.runtime.kernel_switches import hardware_defaults
        capability = torch.cuda.get_device_capability()
        assert llm.engine.executor.switches == hardware_defaults(capability)
    assert llm.engine.executor.dtype == torch.bfloat16
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS,
                                                ignore_eos=True, logprobs=5))
    failures, near_ties = [], []
    for p, o in zip(prompts, outs):
        gen = hf.generate(torch.tensor([p], device="cuda"), do_sample=False,
                          max_new_tokens=MAX_TOKENS, min_new_tokens=MAX_TOKENS,
                          output_scores=True, return_dict_in_generate=True, pad_token_id=0)
        ref = gen.sequences[0, len(p):].tolist()
        ref_top5 = [set(torch.topk(s[0].float(), 5).indices.tolist()) for s in gen.scores]
        msg = first_disagreement(o.outputs[0].token_ids, o.outputs[0].logprobs, ref, ref_top5,
                                 names=("ours", "transformers"))
        if msg:   # how far our tokens sit below transformers' best, read teacher-forced
            gaps = teacher_forced_gaps(hf, p, o.outputs[0].token_ids, "cuda").tolist()
            report = (f"{msg} (teacher-forced gaps of ours' tokens, std: "
                      f"{[round(g, 3) for g in gaps]})")
            (near_ties if max(gaps) <= NEAR_TIE_STD else failures).append(report)
    if near_ties:
        print("top-5 rule broken at near ties only:", near_ties)
    assert not failures, failures


def test_32k_prompt_runs_through_chunked_prefill_beside_short_requests(tmp_path, make_llm):
    from kubellm.runtime import SamplingParams
    path = write_config(LLAMA3_8B, tmp_path / "w")
    llm = make_llm(path, load_format="dummy", skip_tokenizer_init=True, max_model_len=32768,
                   max_num_batched_tokens=8192, max_num_seqs=16)
    rng = random.Random(1)
    long_prompt = [rng.randrange(1000, 100000) for _ in range(32000)]
    short = [[rng.randrange(1000, 100000) for _ in range(64)] for _ in range(8)]
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    outs = llm.generate([long_prompt] + short, params)
    assert all(len(o.outputs[0].token_ids) == 32 for o in outs)
    kv = llm.engine.kv
    assert kv.num_free_blocks == kv.num_blocks


def test_hardware_aware_defaults_on_this_gpu(tmp_path, make_llm):
    """Nothing set: the engine sizes its batches from this GPU and runs with them."""
    from kubellm.runtime import SamplingParams
    from kubellm.runtime.worker import auto_batching as ab
    path = write_config(LLAMA3_8B, tmp_path / "auto", num_hidden_layers=2)
    llm = make_llm(path, load_format="dummy", skip_tokenizer_init=True, max_model_len=4096,
                   gpu_memory_utilization=0.5)
    config, runner = llm.engine.config, llm.engine.executor
    device = ab.DeviceFacts.of(runner.device)
    assert device.sm_count > 0 and device.total_memory > 0
    model = ab.ModelFacts.of(runner.model.args, 2, config.max_model_len)
    assert config.max_num_batched_tokens == ab.choose_max_num_batched_tokens(
        device, model, config.max_num_seqs)[0]
    capacity = llm.engine.kv.num_blocks * config.block_size
    assert config.max_num_seqs == ab.choose_max_num_seqs(device, model, capacity)[0]
    assert runner.graphs.sizes == ab.choose_cuda_graph_sizes(config.max_num_seqs)[0]
    outs = llm.generate([[1000 + i] * (10 + i) for i in range(40)],
                        SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    assert all(len(o.outputs[0].token_ids) == 8 for o in outs)
