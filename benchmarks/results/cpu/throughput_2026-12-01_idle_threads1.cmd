OMP_NUM_THREADS=1 kubellm bench throughput --model /tmp/tmp.W5JV5U8BYK --num-prompts 64 --input-len 32 --input-len-max 256 --output-len 64 --compare-hf --hf-batch-size 64,16 --json
