"""The model runners of the vllm flavour, side by side: V1 (`gpu_model_runner.py`, what the
documents teach) and Model Runner V2 (`vllm/v1/worker/gpu/`, vLLM 0.33's default), with the stage
machinery they share (stages.py)."""
