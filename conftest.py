"""Root conftest: enables pytester for the plugin's own test suite, nothing else."""

from __future__ import annotations

pytest_plugins = ["pytester"]
