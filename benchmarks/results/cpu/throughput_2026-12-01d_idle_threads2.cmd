OMP_NUM_THREADS=2 kubellm bench throughput --model /tmp/tmp.regygltYea --num-prompts 64 --input-len 32 --input-len-max 256 --output-len 64 --compare-hf --hf-batch-size 64,16 --json
