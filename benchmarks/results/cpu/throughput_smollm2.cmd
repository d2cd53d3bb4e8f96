kubellm bench throughput --num-prompts 32 --input-len 32 --input-len-max 256 --output-len 32 --compare-hf --hf-batch-size 8 --max-model-len 512 --json
