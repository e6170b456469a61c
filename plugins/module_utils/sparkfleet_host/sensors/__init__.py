# Copyright: sparkfleet contributors
# Apache-2.0
"""Host code: what a host reads: the GPU (nvidia-smi / NVML), telemetry, memory, processes, host facts, fingerprints."""
