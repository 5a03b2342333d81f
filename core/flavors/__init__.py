"""What differs per flavour: vllm (core.runner), ascend (attention state and mask), nanovllm."""
