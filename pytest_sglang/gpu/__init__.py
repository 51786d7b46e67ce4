"""GPU state: snapshots through NVML, nvidia-smi over ssh, or a fake, and hygiene checks."""

from __future__ import annotations
