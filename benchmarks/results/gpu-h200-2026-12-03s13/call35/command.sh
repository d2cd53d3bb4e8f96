# run from the repository root through the device tool (no carry), working tree 514aee1
# (the config benchmark compiling on small inputs; call 34, the same script on 94e0931,
# built the real weights on the host in every compile process, ran out of its 330 s before
# a timing and brought nothing back). wall 165.1 s.
OUT=$OUT bash benchmarks/gpu/calls/2026-12-03s13_call35.sh
