"""Quantized checkpoints: which format a checkpoint is in (``checkpoint``), and readers
that turn each format into the common layout of ``layers/quantization``: GGUF blocks
(``gguf_blocks``, ``gguf_checkpoint``), GPTQ / AWQ / compressed-tensors integer packings
(``int_formats``, ``safetensors_formats``). Online 4-bit quantization of a float
checkpoint needs no reader: its layers quantize what the plain loader hands them.
"""
