"""Compile a kernel for a Hopper GPU (sm_90) all the way to machine code on a machine
without one (Triton's bundled ptxas) and count its SASS instructions by opcode: what the
interpreter never shows -- inline PTX that ptxas rejects, and how many instructions a
kernel's hot loop costs. Run as ``python -m tests.kernels.sass_for_hopper MODULE KERNEL
SPEC_JSON`` with ``TRITON_INTERPRET=0``; SPEC_JSON holds ``signature``, ``constexprs``,
``num_warps`` and ``divisible_by_16`` (argument indices Triton would specialize so at a
launch: pointers and strides of real tensors). Prints a JSON object opcode -> count."""
from __future__ import annotations

import collections
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile

_OPCODE = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def sass_opcodes(kernel, spec: dict) -> dict[str, int]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    attrs = {(i,): [["tt.divisibility", 16]] for i in spec.get("divisible_by_16", [])}
    source = ASTSource(fn=kernel, signature=spec["signature"], constexprs=spec["constexprs"],
                       attrs=attrs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": spec.get("num_warps", 4)})
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                             "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        sass = subprocess.run([cuobjdump, "--dump-sass", cubin.name], capture_output=True,
                              text=True, check=True).stdout
    return dict(collections.Counter(m.group(1) for m in map(_OPCODE.match, sass.splitlines())
                                    if m))


if __name__ == "__main__":
    module, name, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    print(json.dumps(sass_opcodes(getattr(importlib.import_module(module), name), spec)))
