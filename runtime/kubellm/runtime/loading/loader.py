"""Load a Hugging Face checkpoint (config.json + *.safetensors, sharded or not) into our
model: build it on the ``meta`` device, allocate once on the target device, then copy
each tensor (or this rank's slice of it) straight from the memory-mapped file."""
from __future__ import annotations

import glob
import json
import os
import zlib

import torch
from safetensors import safe_open

from kubellm.runtime.loading.quantized.checkpoint import CheckpointSource
from kubellm.runtime.models.registry import resolve_architecture


def load_model(model_dir: str, hf_config, dtype: torch.dtype, device: torch.device,
               layer_range: tuple[int, int] | None = None,
               load_format: str = "auto", quantization: str | None = None,
               quantization_group_size: int = 128,
               quantize_lm_head: bool = False) -> torch.nn.Module:
    cls, args = resolve_architecture(hf_config)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            model = cls(args, layer_range)
    finally:
        torch.set_default_dtype(previous)
    # quantized linears get their packed parameters while still on meta (loading/quantized)
    source = CheckpointSource.open(model_dir, hf_config, quantization, quantization_group_size,
                                   lm_head=quantize_lm_head)
    source.prepare(model)
    model.to_empty(device=device)
    if load_format == "dummy":
        init_dummy_weights(model, hf_config)
    else:
        load_weights(model, model_dir, source)
    return model.eval()


@torch.no_grad()
def init_dummy_weights(model: torch.nn.Module, hf_config, seed: int = 0) -> None:
    """Random weights of sane scale, the same whatever the parallel layout: each tensor of
    the checkpoint this config describes is drawn whole, from a seed of its name, and goes
    through the loading path, so a TP rank or PP stage holds exactly its slice of the
    weights a single process would hold (TP/PP can be checked against TP=1 on them)."""
    device = next(model.parameters()).device
    wanted = lambda name: model.checkpoint_to_param(name) is not None  # noqa: E731
    _assign(model, _dummy_checkpoint(hf_config, device, seed, wanted), "dummy weights")


def _dummy_checkpoint(hf_config, device: torch.device, seed: int, wanted):
    """(name, tensor) for the tensors of the Hugging Face checkpoint of ``hf_config`` that
    ``wanted`` keeps (a pipeline stage skips the others' layers), in the shapes
    transformers gives them (its model built on the meta device: no memory)."""
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        reference = AutoModelForCausalLM.from_config(hf_config)
    for name, meta in reference.state_dict().items():
        if not wanted(name):
            continue
        if meta.dim() == 1:
            value = torch.full(meta.shape, 1.0 if "norm" in name else 0.0, device=device)
        else:
            gen = torch.Generator(device=device).manual_seed(zlib.crc32(name.encode()) ^ seed)
            value = torch.empty(meta.shape, device=device).normal_(0.0, 0.02, generator=gen)
        yield name, value


def checkpoint_files(model_dir: str) -> list[str]:
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as fh:
            names = sorted(set(json.load(fh)["weight_map"].values()))
        return [os.path.join(model_dir, n) for n in names]
    files = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {model_dir}")
    return files


def load_weights(model: torch.nn.Module, model_dir: str,
                 source: CheckpointSource | None = None) -> None:
    if source is not None and source.has_reader:   # a pre-quantized format
        wanted = lambda name: model.checkpoint_to_param(name) is not None  # noqa: E731
        files = None if source.method == "gguf" else checkpoint_files(model_dir)
        _assign(model, source.tensors(files, wanted), f"{source.method} checkpoint {model_dir}")
        return

    def tensors():
        for path in checkpoint_files(model_dir):
            with safe_open(path, framework="pt", device="cpu") as fh:
                for name in fh.keys():
                    yield name, fh.get_slice(name)
    _assign(model, tensors(), f"checkpoint {model_dir}")


def _assign(model: torch.nn.Module, tensors, source: str) -> None:
    """Copy each (checkpoint name, tensor or lazy slice) into its parameter, or this
    rank's part of it; every parameter (and every expert of a stacked one) must be
    covered."""
    params = dict(model.named_parameters())
    loaded: set[str] = set()
    for name, tensor in tensors:
        mapped = model.checkpoint_to_param(name)
        if mapped is None:
            continue
        param_name, shard = mapped
        module_name, _, _ = param_name.rpartition(".")
        quantized = getattr(model.get_submodule(module_name), "quant_method", None)
        if quantized is not None and param_name.endswith(".weight"):
            # packed codes, scales, biases (g_idx) of this rank's slice, from a quantized
            # weight or a float one quantized here (layers/quantization)
            module = model.get_submodule(module_name)
            with torch.no_grad():
                quantized.load(module, tensor, shard)
            loaded.update(f"{module_name}.{p}" for p, v in module.named_parameters(
                recurse=False) if p != "bias")
            continue
        if param_name not in params:
            raise ValueError(f"{source}: tensor {name!r} has no place in the model")
        module_name, _, _ = param_name.rpartition(".")
        module = model.get_submodule(module_name)
        loader = getattr(module, "load_weight", None)
        with torch.no_grad():
            if loader is not None:
                loader(params[param_name], tensor, shard)
            else:
                params[param_name].copy_(tensor[:])
        loaded.add(param_name)
    missing = set(params) - loaded
    if missing:
        raise ValueError(f"{source} lacks weights for: {sorted(missing)[:8]}")
    for module in model.modules():   # parameters filled piece by piece (stacked experts)
        check = getattr(module, "check_loaded", None)
        if check is not None:
            check(source)
