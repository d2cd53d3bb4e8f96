#!/usr/bin/env bash
# Session s23, ~200 s: why do runs of Qwen2.5-0.5B's chat workload in one engine spread by up
# to 38% (call 93: 43.4k then 59.8k output tok/s, and its decode-only steps as much)? The
# same run three times in one engine, then twice in a second process, with the card's
# clocks and power logged each second (nvidia-smi dmon, read only).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call95; mkdir -p "$work"
pack() { tar czf "$OUT/call95.tgz" -C /tmp call95; }
cp "$0" "$work/command.sh"
nproc > "$work/host.txt"; lscpu | grep -E "Model name|MHz|Thread|Socket|NUMA" >> "$work/host.txt"
(nvidia-smi dmon -s pc -d 1 -o T > "$work/dmon.log" 2>&1 &)
summarize() {
  grep -E '^\{"engine"' "$1" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['engine'], r['seed'], r['output_tok_s'], r['fraction_of_limit'], 'mixed', r['mixed_s'],
          'few', r['decode_few_s'], 'many', r['decode_many_s'], 'elapsed', r['elapsed_s'])"
}
for p in 1 2; do
  seeds=$([ $p = 1 ] && echo 0,0,0 || echo 0,0)
  date +%T > "$work/start_$p.txt"
  timeout 120 python3 -m benchmarks.gpu.varlen --shape qwen2.5-0.5b --seeds $seeds \
    --skip-old-defaults --out "$work/p$p" > "$work/varlen_small_$p.log" 2>&1
  echo "process $p exit $? (started $(cat $work/start_$p.txt), ended $(date +%T))"
  summarize "$work/varlen_small_$p.log"; pack
done
pkill -f "nvidia-smi dmon" || true
python3 - "$work/dmon.log" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")]
# columns (-s pc -o T): time gpu pwr gtemp mtemp mclk pclk
print("time  power_W  sm_clock_MHz  (seconds with power >= 150 W)")
for r in rows:
    if len(r) >= 7 and r[2].isdigit() and int(r[2]) >= 150:
        print(r[0], r[2], r[6])
PY
pack
