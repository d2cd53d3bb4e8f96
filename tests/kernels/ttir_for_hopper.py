"""Code-generate a kernel for a Hopper GPU (sm_90) on a machine without one, to Triton's
first IR (TTIR): what the interpreter never checks (globals a kernel may not read,
functions that exist only in the GPU's language, types), the first thing the H200 would
reject. Run as ``python -m tests.kernels.ttir_for_hopper MODULE KERNEL SIGNATURE_JSON``
with ``TRITON_INTERPRET=0`` (the test process has the interpreter on); prints the TTIR's
line that opens the kernel's function."""
from __future__ import annotations

import importlib
import json
import sys


def ttir(kernel, signature: dict, constexprs: dict) -> str:
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler import ASTSource
    target = GPUTarget("cuda", 90, 32)
    backend = CUDABackend(target)
    options = backend.parse_options({})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs)
    return str(source.make_ir(target, options, backend.get_codegen_implementation(options),
                              backend.get_module_map(), context))


if __name__ == "__main__":
    module, name, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    text = ttir(getattr(importlib.import_module(module), name), spec["signature"],
                spec["constexprs"])
    print(next(line for line in text.splitlines() if "tt.func" in line).strip())
