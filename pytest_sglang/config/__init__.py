"""Configuration: the option catalogue, parsing, profiles, and the resolved settings."""

from __future__ import annotations
