"""What differs per flavour: vllm (core.runners), ascend (attention state and mask), nanovllm."""
