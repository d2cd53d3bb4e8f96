"""kubellm.kernels: Triton kernels, one op per module, each with a plain-torch reference.

- ``paged_attention``: varlen causal attention over the paged KV cache (+ split-KV)
- ``prefill_attention``: the same for steps with prefills, the step's own K/V read as rows
- ``rotary_kv_write``: rotary embedding fused into the KV-cache write
- ``reshape_and_cache``: ``write_kv_cache`` through the slot mapping
- ``kv_cache_fp8`` / ``kv_fp8_format``: an FP8 (E4M3) KV cache, the kernels' and torch's
  side of it
- ``rms_norm``: ``rms_norm`` and ``fused_add_rms_norm``
- ``rotary``: ``apply_rotary`` and ``build_cos_sin_cache`` (default and llama3 scaling)
- ``activation``: ``silu_and_mul``
- ``fused_moe``: the mixture-of-experts MLP as two grouped GEMMs over expert-sorted
  blocks (``moe_align``), block sizes from ``fused_moe_configs``
- ``topk_softmax``: a softmax router's top-k experts and weights in one kernel
- ``w4a16_gemm``: x @ W with W in 4-bit (or 8-bit) codes of ``quant_layout``'s layout

Nothing is imported here, so ``import kubellm.kernels`` stays cheap; import the module
of the op you need. CPU tensors run the kernels in triton's interpreter, which needs
``TRITON_INTERPRET=1`` before triton is first imported (see ``_launch``).
"""
