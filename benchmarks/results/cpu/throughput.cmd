kubellm bench throughput --model /tmp/tmp.50KasjfO45 --num-prompts 64 --input-len 32 --input-len-max 256 --output-len 64 --compare-hf --hf-batch-size 16 --json
