"""The emulator's launch configuration: SGLang's flags, the ``--emulator-*`` options, the model."""

from __future__ import annotations
