"""Load a Hugging Face checkpoint (config.json + *.safetensors, sharded or not) into our
model: build it on the ``meta`` device, allocate once on the target device, then copy
each tensor (or this rank's slice of it) straight from the memory-mapped file."""
from __future__ import annotations

import glob
import json
import os

import torch
from safetensors import safe_open

from kubellm.runtime.models.registry import resolve_architecture


def load_model(model_dir: str, hf_config, dtype: torch.dtype, device: torch.device,
               layer_range: tuple[int, int] | None = None,
               load_format: str = "auto") -> torch.nn.Module:
    cls, args = resolve_architecture(hf_config)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            model = cls(args, layer_range)
    finally:
        torch.set_default_dtype(previous)
    model.to_empty(device=device)
    if load_format == "dummy":
        init_dummy_weights(model)
    else:
        load_weights(model, model_dir)
    return model.eval()


@torch.no_grad()
def init_dummy_weights(model: torch.nn.Module, seed: int = 0) -> None:
    """Random weights of sane scale (throughput does not depend on their values)."""
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    for name, param in model.named_parameters():
        if param.dim() == 1:
            param.fill_(1.0 if "norm" in name else 0.0)
        else:
            param.normal_(0.0, 0.02, generator=gen)


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


def load_weights(model: torch.nn.Module, model_dir: str) -> None:
    params = dict(model.named_parameters())
    loaded: set[str] = set()
    for path in checkpoint_files(model_dir):
        with safe_open(path, framework="pt", device="cpu") as fh:
            for name in fh.keys():
                mapped = model.checkpoint_to_param(name)
                if mapped is None:
                    continue
                param_name, shard = mapped
                if param_name not in params:
                    raise ValueError(f"checkpoint tensor {name!r} has no place in the model")
                module_name, _, _ = param_name.rpartition(".")
                module = model.get_submodule(module_name)
                loader = getattr(module, "load_weight", None)
                with torch.no_grad():
                    if loader is not None:
                        loader(params[param_name], fh.get_slice(name), shard)
                    else:
                        params[param_name].copy_(fh.get_tensor(name))
                loaded.add(param_name)
    missing = set(params) - loaded
    if missing:
        raise ValueError(f"checkpoint {model_dir} lacks weights for: {sorted(missing)[:8]}")
