"""Server status shared by the HTTP layer and the lifecycle (SGLang's ``server_status``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ServerStatus(enum.Enum):
    """SGLang's ``ServerStatus``: Starting until the warm-up succeeds, then Up."""

    STARTING = "Starting"
    UP = "Up"
    UNHEALTHY = "UnHealthy"


@dataclass
class ServerState:
    """Mutable server status; one instance per process."""

    status: ServerStatus = ServerStatus.STARTING
    shutting_down: bool = False
    paused: bool = False
    # Seconds from launch until the scheduler reported ready (the port is about to open).
    startup_time: float = 0.0
