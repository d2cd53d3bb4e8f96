kubellm bench throughput --model /tmp/tmp.Ow7o9VRSnB --num-prompts 64 --input-len 32 --input-len-max 256 --output-len 64 --compare-hf --hf-batch-size 16 --json
