"""Measurement: metrics, measurements and their validity checks, results, the bench."""

from __future__ import annotations
