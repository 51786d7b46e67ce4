"""Reports: the running test's evidence, the session collector, and its renderers."""

from __future__ import annotations
