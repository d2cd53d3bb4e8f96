"""Switches between two correct implementations of one piece of a step, kept until the
GPU has measured which is faster.

Each switch is off by default (the measured path) until a GPU run shows it wins: the
``decode-ablation`` and ``prefill-attn`` stages of ``benchmarks/gpu/run_all.sh`` time
every switch alone against the defaults in one run and write the winners to
``$OUT/kernel_switches.txt``, which the later stages of that run use. A switch that won
on a kind of GPU is on by default there (``hardware_defaults``); the user's text still
turns it off. Set them with
``--kernel-switches rope_kv_write,prefill_attention`` (a bare name is ``=on``;
``name=off`` too), or ``KUBELLM_KERNEL_SWITCHES``. The model runner hands one
``KernelSwitches`` to every attention layer; a benchmark may flip its fields between
steps (CUDA graphs keep what was on when they were captured).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from kubellm.runtime.config_sources import ConfigError

FIELD = "kernel_switches"

HELP = {
    "rope_kv_write": "rotary embedding fused into the KV-cache write (one kernel for "
                     "rotate q, rotate k and the cache write)",
    "prefill_attention": "steps with prefills attend with the prefill kernel: the step's "
                         "own keys read from the projection output, cached context through "
                         "the pages, decodes of the step apart",
    "prefill_attention_tma": "the prefill kernel loads Q and the step's K/V through tensor "
                             "descriptors (TMA on Hopper)",
    "w4a16_tinygemm": "4-bit linears with at most 4 rows (small decode batches) run "
                      "PyTorch's int4 GEMM (tinygemm) on a copy of their weights repacked "
                      "at load, where the layer fits it (bf16, 4-bit, no act-order); the "
                      "Triton kernel keeps the larger calls",
    "fp8_quant_kernel": "FP8 linears quantize their activations per token in one Triton "
                        "kernel (kernels/fp8_quant.py) instead of five torch kernels",
    "decode_long_split": "decode batches too large for split-KV still cut their long "
                         "sequences into chunks of at least 1,024 keys attended in "
                         "parallel (a long-tailed batch's longest sequences no longer run "
                         "alone after the rest)",
    "mixed_graphs": "steps that mix prefill chunks the paged kernel serves with decodes "
                    "replay a CUDA graph captured per token count (multiples of 128, up "
                    "to 2048) instead of launching every kernel from the host",
    "paged_decodes_apart": "steps whose prefill chunks the paged kernel serves attend to "
                           "their decodes in a launch of decode tiles (16 rows) instead "
                           "of in the chunks' prefill tiles (64-128 rows, GROUP used)",
    "paged_decodes_split": "with paged_decodes_apart, that decode launch cuts long "
                           "sequences' keys into chunks attended in parallel, as a "
                           "decode-only step of as many sequences does (a long-context "
                           "decode beside a new prompt otherwise streams its keys in one "
                           "program per KV head)",
}


@dataclass(slots=True)
class KernelSwitches:
    rope_kv_write: bool = False
    prefill_attention: bool = False
    prefill_attention_tma: bool = False
    w4a16_tinygemm: bool = False
    fp8_quant_kernel: bool = False
    mixed_graphs: bool = False
    decode_long_split: bool = False
    paged_decodes_apart: bool = False
    paged_decodes_split: bool = False

    @classmethod
    def parse(cls, text: str | None, capability: tuple[int, int] | None = None,
              device_known: bool = True) -> "KernelSwitches":
        """``"a,b=off,c=on"`` -> switches, over the defaults of a CUDA device of that
        compute ``capability`` (None: no CUDA device, every switch off); an unknown name
        or value raises a ConfigError naming the field. ``device_known=False`` (the
        config, before a device is chosen) checks names and values only: whether one
        switch's companion is on depends on the device's defaults."""
        switches = hardware_defaults(capability)
        named = set()
        for item in (text or "").split(","):
            item = item.strip()
            if not item:
                continue
            name, _, value = item.partition("=")
            name, value = name.strip(), value.strip().lower() or "on"
            if name not in HELP:
                raise ConfigError(FIELD, f"unknown switch {name!r}; known: "
                                         f"{', '.join(HELP)}")
            if value not in ("on", "off", "true", "false", "1", "0"):
                raise ConfigError(FIELD, f"{name}={value!r}: expected on or off")
            setattr(switches, name, value in ("on", "true", "1"))
            named.add(name)
        if switches.paged_decodes_split and not switches.paged_decodes_apart:
            # it cuts the decode launch that paged_decodes_apart makes: alone it does nothing
            if "paged_decodes_split" not in named:
                switches.paged_decodes_split = False   # a default follows its companion off
            elif device_known:
                raise ConfigError(FIELD, "paged_decodes_split needs paged_decodes_apart "
                                         "(on by default on Hopper; name both elsewhere)")
        return switches

    def describe(self) -> str:
        """The canonical text form (every switch, ``name=on|off``), which ``parse`` reads."""
        return ",".join(f"{f.name}={'on' if getattr(self, f.name) else 'off'}"
                        for f in fields(self))

    def enabled(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name)]


def hardware_defaults(capability: tuple[int, int] | None) -> KernelSwitches:
    """The switches that won on this kind of GPU. Hopper and later (compute capability
    9.0+), measured on the H200 (benchmarks/results/gpu-h200-2026-12-02):
    - the prefill kernel with tensor-descriptor (TMA) loads, 1.06-1.28x the paged kernel
      and 1.16-1.40x SDPA's flash backend at 512-32k tokens; without TMA it is 0.6x, so
      older GPUs keep the paged kernel;
    - the rotary embedding fused into the KV-cache write: two launches fewer per layer,
      which an eager step (one with prefills) waits for: a 512-token prompt joining 20
      decodes, 45.6 -> 32.3 ms per step; decode steps (CUDA graphs) 0.5-1.2% faster;
    - steps mixing prefill chunks with decodes replayed from CUDA graphs: the same
      512-token prompt joining 20 decodes, 28.4 -> 15.5 ms of device time per step
      (call 20); with it the serving loads' HTTP/in-process TPOT gaps closed
      (64@16: +0.54 -> -0.002 ms);
    - FP8 linears rounding their input in one Triton kernel: FP8-weight decode from
      0.69-0.79x to 0.89-1.02x of bf16 at batch 1-256, workload W from 0.91x to 1.25x
      (2026-12-02s10 call 23; Llama-3-8B shape);
    - decode batches cutting their long sequences (``decode_long_split``): decode
      attention over long-tailed batches 1.04-1.78x, the chat workload 7,750 -> 8,428
      and 8,364 -> 9,024 output tok/s (seeds 0 and 1, s17 call 55), workload W 0.995x
      (within its run-to-run spread; call 56);
    - a mixed step's decode rows in decode tiles (``paged_decodes_apart``): two 700-token
      prompts joining 160 decodes of 800 keys (a mixed-graph step), 46.96 -> 43.28 ms of
      device time, the paged kernel's time over that step and the next 15.9 -> 12.4 ms;
      one 512-token prompt beside 20 decodes, 15.62 -> 15.69 ms (s22 call 85);
    - that decode launch cut as a decode-only step's (``paged_decodes_split``): four
      decodes of 16,000 keys beside a 512-token prompt 29.77 -> 19.37 ms of device time
      (s23 call 92), 160 decodes of 800 keys beside two 700-token prompts 42.27 -> 41.44,
      20 of 512 beside one 512-token prompt 15.51 -> 15.57; the chat workload 8,885.5 ->
      8,925.0 and 9,363.1 -> 9,375.1 output tok/s on seeds 0 and 1 (call 93)."""
    switches = KernelSwitches()
    if capability is not None and tuple(capability) >= (9, 0):
        switches.prefill_attention = switches.prefill_attention_tma = True
        switches.rope_kv_write = True
        switches.mixed_graphs = True
        switches.fp8_quant_kernel = True
        switches.decode_long_split = True
        switches.paged_decodes_apart = True
        switches.paged_decodes_split = True
    return switches


def device_capability(device) -> tuple[int, int] | None:
    """The compute capability of a CUDA ``device``; None for any other device."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch
    return tuple(torch.cuda.get_device_capability(device))
