# run from the repository root at 2c4ba92 through the device tool (2026-12-02, session s9)
OUT=/tmp/o17 bash benchmarks/gpu/calls/2026-12-02s8_call17.sh   # then tarred into $OUT
