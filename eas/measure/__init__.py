"""Measuring a built network on a device: energy meters (NVML, RAPL, or estimated, each saying
which), latency and inference energy, the device a run uses and its label."""
