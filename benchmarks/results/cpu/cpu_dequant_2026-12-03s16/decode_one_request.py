"""The embedded default model (4-bit, on the CPU) decoding one request: a warm-up call,
then two timed generate() calls of 64 tokens each (greedy, EOS ignored); wall and process
CPU seconds of each. With the argument ``fp32`` the quantized linears are first replaced
by their float32 dequantization (the same weights, no 4-bit path). Run with
OMP_NUM_THREADS=1 from a checkout's root."""
import sys
import time

from kubellm.runtime import LLM, SamplingParams

llm = LLM()
if sys.argv[1:] == ["fp32"]:
    from benchmarks.common.model_logits import dequantize_layers
    dequantize_layers(llm.engine.executor.model)
params = SamplingParams(max_tokens=64, temperature=0, ignore_eos=True)
llm.generate(["The capital of France is"], params)
for _ in range(2):
    t0, c0 = time.perf_counter(), time.process_time()
    llm.generate(["The capital of France is"], params)
    print("64 tokens s", round(time.perf_counter() - t0, 3),
          "cpu s", round(time.process_time() - c0, 3), flush=True)
