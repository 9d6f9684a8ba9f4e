"""Engines behind one async protocol: ``sim`` (calibrated simulated vLLM) and ``vllm``."""
