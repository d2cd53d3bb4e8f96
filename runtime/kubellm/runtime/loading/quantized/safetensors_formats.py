"""Quantized safetensors checkpoints (GPTQ, AWQ, compressed-tensors): which linears are
quantized (from the tensor names), their spec (from ``quantization_config``), and their
tensors converted one linear at a time."""
from __future__ import annotations

from collections import defaultdict

from safetensors import safe_open

from kubellm.runtime.layers.quantization.spec import LinearQuantSpec
from kubellm.runtime.loading.quantized import int_formats

# method -> (the tensor whose presence marks a quantized linear, all of its tensors)
PARTS = {
    "gptq": ("qweight", ("qweight", "qzeros", "scales", "g_idx")),
    "awq": ("qweight", ("qweight", "qzeros", "scales")),
    "compressed-tensors": ("weight_packed", ("weight_packed", "weight_scale",
                                             "weight_zero_point", "weight_shape",
                                             "weight_g_idx")),
}


class FormatConfigError(ValueError):
    """The checkpoint's quantization_config asks for something kubellm cannot run."""


def required_parts(method: str, spec: LinearQuantSpec, qc: dict) -> set[str]:
    """The tensors a linear needs before it can be converted."""
    if method == "compressed-tensors":
        weights = next(iter(qc["config_groups"].values()))["weights"]
        return {"weight_packed", "weight_scale"} | \
            (set() if weights.get("symmetric", True) else {"weight_zero_point"})
    return {"qweight", "qzeros", "scales"} | ({"g_idx"} if spec.has_g_idx else set())


def read_spec(method: str, qc: dict) -> tuple[LinearQuantSpec, dict]:
    """(spec of every quantized linear, converter options) from ``quantization_config``."""
    if method == "gptq":
        bits, group = int(qc.get("bits", 4)), int(qc.get("group_size", 128))
        fmt = qc.get("checkpoint_format") or qc.get("format") or "gptq"
        if fmt not in ("gptq", "gptq_v2"):
            raise FormatConfigError(f"GPTQ checkpoint_format {fmt!r} is not supported; "
                                    f"supported: gptq, gptq_v2")
        desc_act = bool(qc.get("desc_act", False))
        options = dict(bits=bits, group_size=group, zero_offset=1 if fmt == "gptq" else 0,
                       use_g_idx=desc_act)
        spec = LinearQuantSpec(bits, group, desc_act)
    elif method == "awq":
        bits, group = int(qc.get("bits", qc.get("w_bit", 4))), int(qc.get("group_size", 128))
        version = str(qc.get("version", "gemm")).lower()
        if version != "gemm":
            raise FormatConfigError(f"AWQ version {version!r} is not supported; supported: "
                                    f"gemm")
        options, spec = dict(bits=bits, group_size=group), LinearQuantSpec(bits, group)
    else:
        spec, options = _compressed_tensors_spec(qc)
    if spec.bits not in (4, 8):
        raise FormatConfigError(f"{spec.bits}-bit weights are not supported; supported: 4, 8")
    return spec, options


def _compressed_tensors_spec(qc: dict) -> tuple[LinearQuantSpec, dict]:
    if qc.get("format") != "pack-quantized":
        raise FormatConfigError(f"compressed-tensors format {qc.get('format')!r} is not "
                                f"supported; supported: pack-quantized (W4A16, W8A16)")
    groups = list((qc.get("config_groups") or {}).values())
    if len(groups) != 1 or groups[0].get("input_activations"):
        raise FormatConfigError("only one weight-only compressed-tensors scheme (W4A16 or "
                                "W8A16, no activation quantization) is supported")
    w = groups[0]["weights"]
    if w.get("type", "int") != "int" or w.get("strategy") not in ("group", "channel"):
        raise FormatConfigError(f"compressed-tensors weights {w.get('type')}/"
                                f"{w.get('strategy')} are not supported; supported: int "
                                f"with group or channel strategy")
    bits = int(w["num_bits"])
    group = int(w["group_size"]) if w.get("strategy") == "group" else None
    # per channel: one group spanning K; its size is only known per layer (0 = whole K)
    return LinearQuantSpec(bits, group or 0), dict(bits=bits, group_size=group)


def quantized_prefixes(method: str, names) -> set[str]:
    marker = PARTS[method][0]
    return {n[:-len(marker) - 1] for n in names if n.endswith("." + marker)}


def split_name(method: str, name: str) -> tuple[str, str | None]:
    """(linear prefix, part) for a quantized linear's tensor; (name, None) otherwise."""
    prefix, _, suffix = name.rpartition(".")
    return (prefix, suffix) if suffix in PARTS[method][1] else (name, None)


def tensors(method: str, options: dict, required: set[str], files: list[str],
            linears: set[str], wanted):
    """(name, tensor or QuantizedWeight) per checkpoint tensor ``wanted`` keeps; a
    quantized linear (a prefix in ``linears``) comes once, as ``<prefix>.weight``, when
    all its parts are read (they may span files)."""
    convert = {"gptq": int_formats.gptq, "awq": int_formats.awq,
               "compressed-tensors": int_formats.compressed_tensors}[method]
    pending: dict[str, dict] = defaultdict(dict)
    for path in files:
        with safe_open(path, framework="pt", device="cpu") as fh:
            for name in fh.keys():
                prefix, part = split_name(method, name)
                if part is None or prefix not in linears:
                    if wanted(name):
                        yield name, fh.get_slice(name)
                    continue
                if wanted(prefix + ".weight"):
                    pending[prefix][part] = fh.get_tensor(name)
            for prefix in [p for p in pending if required <= pending[p].keys()]:
                yield prefix + ".weight", convert(pending.pop(prefix), **options)
    if pending:   # a linear whose parts never all came
        prefix, parts = next(iter(pending.items()))
        raise ValueError(f"quantized linear {prefix} lacks {sorted(required - parts.keys())}")
