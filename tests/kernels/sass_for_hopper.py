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

_OPCODE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)([^;]*)")


def sass_opcodes(kernel, spec: dict) -> dict[str, int]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    attrs = {(i,): [["tt.divisibility", 16]] for i in spec.get("divisible_by_16", [])}
    source = ASTSource(fn=kernel, signature=spec["signature"], constexprs=spec["constexprs"],
                       attrs=attrs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": spec.get("num_warps", 4),
                                       "num_stages": spec.get("num_stages", 3)})
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                             "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        sass = subprocess.run([cuobjdump, "--dump-sass", cubin.name], capture_output=True,
                              text=True, check=True).stdout
    instructions = [(int(m.group(1), 16), m.group(2), m.group(3))
                    for m in map(_OPCODE.match, sass.splitlines()) if m]
    count = lambda some: dict(collections.Counter(op for _, op, _ in some))  # noqa: E731
    if spec.get("with_loop"):   # the whole kernel's and its loop body's
        return {"kernel": count(instructions), "loop": count(_longest_loop(instructions))}
    return count(instructions)


def _longest_loop(instructions: list) -> list:
    """The instructions between the target of a backward branch and the branch (the
    body of a loop, once): the longest such span."""
    best: list = []
    for at, op, operands in instructions:
        target = re.search(r"0x([0-9a-f]+)", operands) if op == "BRA" else None
        if target and int(target.group(1), 16) < at:
            body = [i for i in instructions if int(target.group(1), 16) <= i[0] <= at]
            best = max(best, body, key=len)
    return best


if __name__ == "__main__":
    module, name, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    print(json.dumps(sass_opcodes(getattr(importlib.import_module(module), name), spec)))
