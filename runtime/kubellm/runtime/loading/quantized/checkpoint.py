"""What the loader reads from a checkpoint, quantization included: the format (detected
from ``quantization_config`` or a GGUF file, or asked for with ``quantization``), the spec
of each quantized linear, and the tensors to copy in."""
from __future__ import annotations

import dataclasses
import glob
import json
import os

import torch

from kubellm.runtime.config_sources import ConfigError
from kubellm.runtime.layers.quantization.linear_method import QuantizationLayoutError
from kubellm.runtime.layers.quantization.apply import (apply_quantization, online_fp8_specs,
                                                      online_specs)
from kubellm.runtime.layers.quantization.spec import LinearQuantSpec
from kubellm.runtime.loading.quantized import safetensors_formats as st_formats
from kubellm.runtime.loading.quantized.gguf_checkpoint import GGUFCheckpoint, find_gguf

ONLINE = "4bit"
ONLINE_FP8 = "fp8"
ONLINE_METHODS = (ONLINE, ONLINE_FP8)   # a float checkpoint quantized at load
FORMATS = ("gptq", "awq", "compressed-tensors", "gguf")


def detect_format(model_dir: str, hf_config) -> str | None:
    """The checkpoint's own quantization: a GGUF file, or quant_method of its
    ``quantization_config``; None for a float checkpoint."""
    if find_gguf(model_dir) is not None and not glob.glob(os.path.join(model_dir, "*.safetensors")):
        return "gguf"
    qc = _quantization_config(hf_config)
    if qc is None:
        return None
    method = qc.get("quant_method")
    if method not in FORMATS:
        raise ConfigError("quantization", f"the checkpoint is quantized with {method!r}, "
                                          f"which kubellm cannot run; supported: "
                                          f"{', '.join(FORMATS)}")
    return method


def _quantization_config(hf_config) -> dict | None:
    qc = getattr(hf_config, "quantization_config", None)
    if qc is not None and not isinstance(qc, dict):
        qc = qc.to_dict()
    return qc


def resolve_method(requested: str | None, detected: str | None) -> str | None:
    if requested is None or requested == detected:
        return detected
    if requested in ONLINE_METHODS and detected is None:
        return requested
    if requested in ONLINE_METHODS:
        raise ConfigError("quantization", f"{requested} quantizes a float checkpoint at "
                                          f"load, but this one is already quantized "
                                          f"({detected}); leave quantization unset to run "
                                          f"it as it is")
    found = f"a {detected} checkpoint" if detected else "a float checkpoint (no " \
        "quantization_config, no GGUF file)"
    allowed = f"unset or {detected}" if detected else f"unset, {' or '.join(ONLINE_METHODS)}"
    raise ConfigError("quantization", f"{requested!r} was asked for, but the model is "
                                      f"{found}; allowed here: {allowed}")


@dataclasses.dataclass
class CheckpointSource:
    model_dir: str
    hf_config: object
    method: str | None                # None | 4bit | fp8 | gptq | awq | compressed-tensors | gguf
    group_size: int = 128
    lm_head: bool = False             # 4bit: the untied LM head too

    @classmethod
    def open(cls, model_dir: str, hf_config, quantization: str | None,
             group_size: int = 128, lm_head: bool = False) -> "CheckpointSource":
        method = resolve_method(quantization, detect_format(model_dir, hf_config))
        if lm_head and getattr(hf_config, "tie_word_embeddings", False):
            raise ConfigError("quantize_lm_head", "this model's LM head is its input "
                                                  "embedding (tie_word_embeddings), which "
                                                  "stays in the model dtype; leave "
                                                  "quantize_lm_head off")
        return cls(model_dir, hf_config, method, group_size, lm_head)

    # ---- specs -------------------------------------------------------------------------
    def prepare(self, model: torch.nn.Module) -> int:
        """Turn the model's quantized linears (still on ``meta``) into packed ones."""
        if self.method is None:
            return 0
        if self.method == ONLINE:
            specs, field = online_specs(model, 4, self.group_size,
                                         lm_head=self.lm_head), "quantization_group_size"
        elif self.method == ONLINE_FP8:
            specs, field = online_fp8_specs(model), "quantization"
        else:
            specs, field = self._module_specs(model), "quantization"
        try:
            return apply_quantization(model, specs)
        except QuantizationLayoutError as exc:
            if "tensor_parallel_size" in str(exc):
                field = "tensor_parallel_size"
            raise ConfigError(field, str(exc)) from None

    def _checkpoint_specs(self) -> dict[str, LinearQuantSpec]:
        """Hugging Face weight name of each quantized linear -> its spec."""
        if self.method == "gguf":
            return self._gguf().specs()
        spec, _ = self._format_options()
        names = _tensor_names(self.model_dir)
        return {p + ".weight": spec for p in st_formats.quantized_prefixes(self.method, names)}

    def _module_specs(self, model) -> dict[str, LinearQuantSpec]:
        specs: dict[str, LinearQuantSpec] = {}
        modules = dict(model.named_modules())
        for name, spec in self._checkpoint_specs().items():
            mapped = model.checkpoint_to_param(name)
            if mapped is None:            # another pipeline stage's layer
                continue
            module = mapped[0].rpartition(".")[0]
            if spec.group_size == 0:      # one group per output channel: all of K
                layer = modules[module]
                spec = dataclasses.replace(spec, group_size=layer.weight.shape[1] * (
                    layer.tp_size if hasattr(layer, "in_per_rank") else 1))
            specs[module] = specs[module].merged_with(spec) if module in specs else spec
        return specs

    def _format_options(self):
        try:
            return st_formats.read_spec(self.method, _quantization_config(self.hf_config))
        except st_formats.FormatConfigError as exc:
            raise ConfigError("quantization", f"{self.model_dir}: {exc}") from None

    def _gguf(self) -> GGUFCheckpoint:
        if not hasattr(self, "_gguf_file"):
            self._gguf_file = GGUFCheckpoint(find_gguf(self.model_dir))
        return self._gguf_file

    # ---- tensors -----------------------------------------------------------------------
    @property
    def has_reader(self) -> bool:
        """A pre-quantized format, read through ``tensors``; float and online-quantized
        checkpoints go through the plain safetensors reader."""
        return self.method in FORMATS

    def tensors(self, files: list[str] | None, wanted):
        """(Hugging Face name, tensor / lazy slice / QuantizedWeight) for ``wanted`` names;
        ``files`` are the safetensors files (None for GGUF)."""
        if self.method == "gguf":
            return self._gguf().tensors(wanted)
        if self.method in st_formats.PARTS:
            spec, options = self._format_options()
            qc = _quantization_config(self.hf_config)
            linears = st_formats.quantized_prefixes(self.method, _tensor_names(self.model_dir))
            return st_formats.tensors(self.method, options,
                                      st_formats.required_parts(self.method, spec, qc),
                                      files, linears, wanted)
        raise ValueError(f"{self.method or 'a float'} checkpoint has no quantized reader")


def _tensor_names(model_dir: str) -> list[str]:
    from safetensors import safe_open
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as fh:
            return list(json.load(fh)["weight_map"])
    names = []
    for path in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        with safe_open(path, framework="pt") as fh:
            names += list(fh.keys())
    return names
