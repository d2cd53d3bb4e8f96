"""Quantized linear layers: the weights of a parallel linear held as packed 4-bit (or
8-bit) codes with per-group scales and biases (kubellm.kernels.quant_layout), multiplied by
the W4A16 Triton kernel on CUDA and dequantized per call on CPU.

- ``packed``: ``QuantizedWeight``, one checkpoint weight in the common layout (every format
  reader in ``loading/quantized`` produces it), and how a TP rank slices it.
- ``rtn``: online group-wise round-to-nearest quantization of a float weight.
- ``linear_method``: the parameters, loader and forward of a quantized parallel linear.
- ``spec``: how a layer is quantized; ``apply``: swapping a model's linears over to it.

The model files know nothing of this: the loader applies a spec to the model built on
``meta`` before its parameters are allocated.
"""
