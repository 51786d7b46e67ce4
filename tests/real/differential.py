"""The differential test's machinery: the same requests to two servers, answers compared by shape.

:data:`PROBES` are the requests: every endpoint the plugin or its users touch (identity,
health, generation on the three endpoints, ``/metrics``, ``/flush_cache``), every stream type
(native, completions and chat; with and without usage; the plugin's own request bodies), and
the error cases (bad JSON, wrong content type, empty or missing fields, over-context, unknown
model or path, wrong method). :func:`observe` sends them in order and keeps, per probe, the
status, the content type and the body: JSON, server-sent events, or Prometheus text.

:func:`compare` reports a :class:`Difference` for each disagreement in

- the **status code**;
- the **content type** (``None`` when the server sends none);
- the **key set** of every JSON object, recursively (``only-real`` / ``only-emulator``);
- the **value type** of every value present on both sides (``int`` and ``float`` differ);
- the **stream chunk structure**: the events' shapes with runs of equal shapes collapsed
  (a native stream is first chunk, middle chunks, final chunk, ``[DONE]``); a different
  sequence is a ``stream`` difference, and each aligned chunk is compared as above;
- the **metric names** of ``/metrics`` and their types;
- a few **values** that must be equal (:data:`SAME_VALUES`: context length, KV capacity,
  architecture, token counts...);

and :func:`compare_startup` the **startup phase order** (``closed``, ``warming``, ``ready``).
Differences matching an entry of :data:`ALLOWED` (at most ten, each with its reason) are
allowed; the rest fail the test.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from pytest_sglang.loadgen.prompts import request_body
from pytest_sglang.loadgen.workload import Endpoint, Workload

MODEL = "tiny"  # the tier's --served-model-name
CONTEXT = 4096  # the tiny model's max_position_embeddings

# ------------------------------------------------------------------ probes


@dataclass(frozen=True)
class Probe:
    """One request: method, path, and a JSON body or raw bytes with a content type."""

    name: str
    method: str
    path: str
    json: Any = None
    content: bytes | None = None
    content_type: str | None = None

    def send(self, client: httpx.Client) -> httpx.Response:
        """Send the probe and read the whole response."""
        headers = {"Content-Type": self.content_type} if self.content_type else {}
        if self.json is not None:
            return client.request(self.method, self.path, json=self.json, headers=headers)
        return client.request(self.method, self.path, content=self.content, headers=headers)


def _gen(max_new: int = 4, **extra: Any) -> dict[str, Any]:
    sampling = {"max_new_tokens": max_new, "ignore_eos": True, "temperature": 0}
    return {"sampling_params": sampling, **extra}


def _plugin_body(endpoint: Endpoint, stream: bool = True) -> dict[str, Any]:
    # Exactly what the plugin's load generator sends (vocabulary-safe ids, usage options).
    workload = Workload(input_len=8, output_len=4, requests=1, endpoint=endpoint, stream=stream)
    return request_body(workload, "differential", 0, model=MODEL)


_CHAT = [{"role": "user", "content": "w5 w6"}]
_TOO_LONG = list(range(5, 5 + CONTEXT + 4))

PROBES: tuple[Probe, ...] = (
    # First: an empty prefix cache on both sides, whatever the server served before.
    Probe("flush_cache first", "POST", "/flush_cache"),
    Probe("health", "GET", "/health"),
    Probe("health_generate", "GET", "/health_generate"),
    Probe("ready", "GET", "/ready"),
    Probe("ping", "GET", "/ping"),
    Probe("models", "GET", "/v1/models"),
    Probe("model card", "GET", f"/v1/models/{MODEL}"),
    Probe("unknown model card", "GET", "/v1/models/nope"),
    Probe("model_info", "GET", "/model_info"),
    Probe("get_model_info", "GET", "/get_model_info"),
    Probe("server_info", "GET", "/server_info"),
    Probe("get_server_info", "GET", "/get_server_info"),
    Probe("unknown path", "GET", "/version"),
    Probe("generate GET", "GET", "/generate"),
    # native /generate
    Probe("generate text", "POST", "/generate", _gen(text="w1 w2 w3")),
    Probe("generate ids", "POST", "/generate", _gen(input_ids=[10, 11, 12])),
    Probe("generate text stream", "POST", "/generate", _gen(6, text="w1 w2 w3", stream=True)),
    Probe("generate ids stream", "POST", "/generate", _gen(6, input_ids=[10, 11], stream=True)),
    Probe("generate batch", "POST", "/generate", _gen(text=["w1 w2", "w3 w4"])),
    Probe("generate plugin stream", "POST", "/generate", _plugin_body("generate")),
    Probe("generate plugin", "POST", "/generate", _plugin_body("generate", stream=False)),
    # /v1/completions
    Probe("completions text", "POST", "/v1/completions",
          {"model": MODEL, "prompt": "w5 w6", "max_tokens": 4, "ignore_eos": True}),
    Probe("completions ids", "POST", "/v1/completions",
          {"model": MODEL, "prompt": [10, 11], "max_tokens": 4, "ignore_eos": True}),
    Probe("completions stream", "POST", "/v1/completions",
          {"model": MODEL, "prompt": [10, 11], "max_tokens": 4, "ignore_eos": True,
           "stream": True}),
    Probe("completions stream usage", "POST", "/v1/completions",
          {"model": MODEL, "prompt": "w5 w6", "max_tokens": 4, "ignore_eos": True,
           "stream": True, "stream_options": {"include_usage": True}}),
    Probe("completions plugin stream", "POST", "/v1/completions", _plugin_body("completions")),
    # /v1/chat/completions
    Probe("chat", "POST", "/v1/chat/completions",
          {"model": MODEL, "messages": _CHAT, "max_tokens": 4, "ignore_eos": True}),
    Probe("chat stream", "POST", "/v1/chat/completions",
          {"model": MODEL, "messages": _CHAT, "max_tokens": 4, "ignore_eos": True,
           "stream": True}),
    Probe("chat stream usage", "POST", "/v1/chat/completions",
          {"model": MODEL, "messages": _CHAT, "max_tokens": 4, "ignore_eos": True,
           "stream": True, "stream_options": {"include_usage": True}}),
    Probe("chat plugin stream", "POST", "/v1/chat/completions", _plugin_body("chat")),
    # errors
    Probe("chat bad json", "POST", "/v1/chat/completions", content=b"{bad json",
          content_type="application/json"),
    Probe("chat text/plain", "POST", "/v1/chat/completions",
          content=json.dumps({"model": MODEL, "messages": _CHAT}).encode(),
          content_type="text/plain"),
    Probe("chat unknown model", "POST", "/v1/chat/completions",
          {"model": "nope", "messages": [{"role": "user", "content": "w1"}], "max_tokens": 2}),
    Probe("chat over context", "POST", "/v1/chat/completions",
          {"model": MODEL, "messages": [{"role": "user", "content": "w1"}],
           "max_tokens": CONTEXT + 100}),
    Probe("chat over context stream", "POST", "/v1/chat/completions",
          {"model": MODEL, "messages": [{"role": "user", "content": "w1"}],
           "max_tokens": CONTEXT + 100, "stream": True}),
    Probe("chat empty messages", "POST", "/v1/chat/completions", {"model": MODEL, "messages": []}),
    Probe("chat no messages", "POST", "/v1/chat/completions", {"model": MODEL}),
    Probe("completions over context", "POST", "/v1/completions",
          {"model": MODEL, "prompt": _TOO_LONG, "max_tokens": 4}),
    Probe("completions over context stream", "POST", "/v1/completions",
          {"model": MODEL, "prompt": _TOO_LONG, "max_tokens": 4, "stream": True}),
    Probe("generate empty", "POST", "/generate", {}),
    Probe("generate over context", "POST", "/generate", _gen(input_ids=_TOO_LONG)),
    Probe("generate over context stream", "POST", "/generate",
          _gen(input_ids=_TOO_LONG, stream=True)),
    Probe("generate bad text", "POST", "/generate", _gen(text=5)),
    Probe("flush_cache", "POST", "/flush_cache"),
    # last: the counters above are in it
    Probe("metrics", "GET", "/metrics"),
)  # fmt: skip

#: Values that must be equal on both servers: (probe, path).
SAME_VALUES: tuple[tuple[str, str], ...] = (
    ("models", "$.data[0].id"),
    ("models", "$.data[0].max_model_len"),
    ("server_info", "$.context_length"),
    ("server_info", "$.max_running_requests"),
    ("server_info", "$.max_total_num_tokens"),
    ("server_info", "$.max_req_input_len"),
    ("server_info", "$.served_model_name"),
    ("server_info", "$.version"),
    ("model_info", "$.architectures"),
    ("model_info", "$.model_type"),
    ("generate ids", "$.meta_info.prompt_tokens"),
    ("generate ids", "$.meta_info.completion_tokens"),
    ("completions ids", "$.usage.completion_tokens"),
)


# ------------------------------------------------------------------ observations


@dataclass
class Observation:
    """What one probe got: status, content type, and the body as JSON, events or metrics."""

    status: int | None
    content_type: str | None
    kind: str  # "json", "sse", "metrics", "text", "empty", "error"
    body: Any = None  # JSON value; list of events (JSON or "[DONE]"); {metric: type}; text

    def as_json(self) -> dict[str, Any]:
        """Plain JSON, for recordings."""
        return {
            "status": self.status,
            "content_type": self.content_type,
            "kind": self.kind,
            "body": self.body,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Observation:
        """Rebuild an observation from :meth:`as_json` output."""
        return cls(data["status"], data["content_type"], data["kind"], data["body"])


def parse_response(response: httpx.Response) -> Observation:
    """Classify and parse a response."""
    content_type = response.headers.get("content-type")
    normalized = None if content_type is None else content_type.lower().replace(" ", "")
    text = response.text
    media = (normalized or "").split(";", 1)[0]
    if media == "text/event-stream":
        return Observation(response.status_code, normalized, "sse", sse_events(text))
    if text.lstrip().startswith("# HELP") or "# TYPE" in text[:2000]:
        return Observation(response.status_code, normalized, "metrics", metric_types(text))
    if not text:
        return Observation(response.status_code, normalized, "empty", None)
    try:
        return Observation(response.status_code, normalized, "json", json.loads(text))
    except ValueError:
        return Observation(response.status_code, normalized, "text", text[:500])


def sse_events(text: str) -> list[Any]:
    """The ``data:`` payloads of an event stream: JSON values, or the string ``[DONE]``."""
    events: list[Any] = []
    for line in text.splitlines():
        if line.startswith("data:"):
            payload = line[5:].strip()
            if payload == "[DONE]":
                events.append("[DONE]")
            else:
                try:
                    events.append(json.loads(payload))
                except ValueError:
                    events.append({"<unparseable>": payload[:200]})
    return events


def metric_types(text: str) -> dict[str, str]:
    """``{metric family: type}`` from the ``# TYPE`` lines of Prometheus text."""
    types = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            types[name] = kind.strip()
    return types


def observe(url: str, probes: Iterable[Probe] = PROBES) -> dict[str, Observation]:
    """Send every probe to ``url`` in order; return each one's observation by name."""
    seen: dict[str, Observation] = {}
    with httpx.Client(base_url=url, timeout=120.0, trust_env=False) as client:
        for probe in probes:
            try:
                seen[probe.name] = parse_response(probe.send(client))
            except httpx.TransportError as exc:
                seen[probe.name] = Observation(None, None, "error", type(exc).__name__)
    return seen


# ------------------------------------------------------------------ comparison


@dataclass(frozen=True)
class Difference:
    """One disagreement between the real server (``real``) and the emulator (``emu``)."""

    probe: str
    path: str
    kind: str  # status, content-type, kind, only-real, only-emulator, type, stream, value,
    #            metric-only-real, metric-only-emulator, metric-type, phase-order
    real: Any = None
    emu: Any = None

    def __str__(self) -> str:
        return (
            f"{self.probe}: {self.kind} at {self.path}: real {_brief(self.real)}, "
            f"emulator {_brief(self.emu)}"
        )


def _brief(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def type_name(value: Any) -> str:
    """JSON type of ``value``: object, array, str, int, float, bool or null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "array"
    return "object"


def shape(value: Any) -> Any:
    """The value with every scalar replaced by its type name (lists: their elements' shapes,
    repeats collapsed)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        shapes: list[Any] = []
        for item in value:
            s = shape(item)
            if s not in shapes:
                shapes.append(s)
        return shapes
    return type_name(value)


def walk(probe: str, real: Any, emu: Any, path: str = "$") -> list[Difference]:
    """Key-set and value-type differences between two JSON values, recursively."""
    if type_name(real) != type_name(emu):
        return [Difference(probe, path, "type", type_name(real), type_name(emu))]
    found: list[Difference] = []
    if isinstance(real, dict):
        found += [
            Difference(probe, f"{path}.{key}", "only-real", shape(real[key]))
            for key in real
            if key not in emu
        ]
        for key in emu:
            if key not in real:
                found.append(
                    Difference(probe, f"{path}.{key}", "only-emulator", emu=shape(emu[key]))
                )
            else:
                found += walk(probe, real[key], emu[key], f"{path}.{key}")
    elif isinstance(real, list) and real and emu:
        seen: set[tuple[str, str]] = set()
        # Elements are compared index by index as far as both go (choices, data, chunks of
        # a batch), each against the other side's last when one list is longer.
        for index in range(max(len(real), len(emu))):
            a, b = real[min(index, len(real) - 1)], emu[min(index, len(emu) - 1)]
            for diff in walk(probe, a, b, f"{path}[*]"):
                if (diff.path, diff.kind) not in seen:
                    seen.add((diff.path, diff.kind))
                    found.append(diff)
    return found


def _signature(event: Any) -> str:
    return json.dumps(shape(event), sort_keys=True)


def collapse(events: Sequence[Any]) -> list[tuple[str, Any, int]]:
    """Runs of equally shaped events: (shape signature, first event of the run, count)."""
    runs: list[tuple[str, Any, int]] = []
    for event in events:
        sig = _signature(event)
        if runs and runs[-1][0] == sig:
            runs[-1] = (sig, runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((sig, event, 1))
    return runs


def compare_stream(probe: str, real: Sequence[Any], emu: Sequence[Any]) -> list[Difference]:
    """Stream structure: the sequence of chunk shapes (runs collapsed), then chunk by chunk."""
    a, b = collapse(real), collapse(emu)
    found: list[Difference] = []
    if len(a) != len(b):
        shown_a = [f"{r[2]}x{_kind_of(r[1])}" for r in a]
        shown_b = [f"{r[2]}x{_kind_of(r[1])}" for r in b]
        found.append(Difference(probe, "$", "stream", shown_a, shown_b))
        # Still say what differs in the first and the final chunks.
        pairs = [(0, a[0], b[0]), (-1, a[-1], b[-1])] if a and b else []
    else:
        pairs = [(i, x, y) for i, (x, y) in enumerate(zip(a, b, strict=True))]
    for index, x, y in pairs:
        label = "last" if index == -1 or index == len(a) - 1 else str(index)
        found += walk(probe, x[1], y[1], f"$[{label}]")
    return found


def _kind_of(event: Any) -> str:
    if event == "[DONE]":
        return "[DONE]"
    if isinstance(event, dict):
        return "{" + ",".join(sorted(event)) + "}"
    return type_name(event)


def compare_metrics(
    probe: str, real: Mapping[str, str], emu: Mapping[str, str]
) -> list[Difference]:
    """Metric families present on one side only, or with a different type."""
    found = [
        Difference(probe, name, "metric-only-real", real[name]) for name in real if name not in emu
    ]
    found += [
        Difference(probe, name, "metric-only-emulator", emu=emu[name])
        for name in emu
        if name not in real
    ]
    found += [
        Difference(probe, name, "metric-type", real[name], emu[name])
        for name in real
        if name in emu and real[name] != emu[name]
    ]
    return found


def value_at(value: Any, path: str) -> Any:
    """The value at a ``$.a[0].b`` path (``KeyError`` when absent)."""
    current = value
    for part in path[1:].replace("[", ".[").split("."):
        if not part:
            continue
        if part.startswith("["):
            current = current[int(part[1:-1])]
        else:
            current = current[part]
    return current


def compare(
    real: Mapping[str, Observation],
    emu: Mapping[str, Observation],
    same_values: Iterable[tuple[str, str]] = SAME_VALUES,
) -> list[Difference]:
    """Every difference between two sets of observations of the same probes."""
    found: list[Difference] = []
    for name, r in real.items():
        e = emu.get(name)
        if e is None:
            found.append(Difference(name, "$", "missing", r.kind, None))
            continue
        if r.status != e.status:
            found.append(Difference(name, "status", "status", r.status, e.status))
        if r.content_type != e.content_type:
            found.append(
                Difference(name, "content-type", "content-type", r.content_type, e.content_type)
            )
        if r.kind != e.kind:
            found.append(Difference(name, "$", "kind", r.kind, e.kind))
        elif r.kind == "json":
            found += walk(name, r.body, e.body)
        elif r.kind == "sse":
            found += compare_stream(name, r.body, e.body)
        elif r.kind == "metrics":
            found += compare_metrics(name, r.body, e.body)
    for name, path in same_values:
        if name in real and name in emu:
            try:
                a, b = value_at(real[name].body, path), value_at(emu[name].body, path)
            except (KeyError, IndexError, TypeError):
                continue  # a key difference, reported above
            if a != b:
                found.append(Difference(name, path, "value", a, b))
    return found


def compare_startup(real: Sequence[str], emu: Sequence[str]) -> list[Difference]:
    """The startup phase orders (``closed``, ``warming``, ``ready``) must be equal."""
    if list(real) == list(emu):
        return []
    return [Difference("startup", "phases", "phase-order", list(real), list(emu))]


# ------------------------------------------------------------------ the allow-list


@dataclass(frozen=True)
class Allowed:
    """A documented difference: probes and paths (glob patterns), kinds, and why."""

    probes: str
    paths: str
    kinds: frozenset[str]
    reason: str
    #: When set, only these keys' differences are allowed, or (``protect``) all but these.
    protect: frozenset[str] = field(default_factory=frozenset)

    def allows(self, diff: Difference) -> bool:
        """Whether this entry covers ``diff``."""
        if diff.kind not in self.kinds:
            return False
        if not fnmatch.fnmatchcase(diff.probe, self.probes):
            return False
        if not fnmatch.fnmatchcase(diff.path, self.paths):
            return False
        key = diff.path.rsplit(".", 1)[-1]
        return key not in self.protect


#: Keys of ``/server_info`` (and its ``internal_states``) that the plugin, its users'
#: expectations or the comparability checks read: no difference on these is ever allowed.
CLIENT_KEYS = frozenset({
    "model_path", "tokenizer_path", "served_model_name", "tp_size", "dp_size", "pp_size",
    "ep_size", "context_length", "max_running_requests", "max_total_tokens",
    "chunked_prefill_size", "mem_fraction_static", "attention_backend", "sampling_backend",
    "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "enable_metrics", "api_key",
    "stream_interval", "skip_server_warmup", "disable_cuda_graph", "device", "host", "port",
    "status", "max_total_num_tokens", "max_req_input_len", "internal_states", "version",
    "launch_command", "startup_time", "frontend", "effective_max_running_requests_per_dp",
    "last_gen_throughput", "memory_usage", "world_size", "avg_spec_accept_length",
    "weight_version", "random_seed", "enable_dp_attention",
})  # fmt: skip

#: The one allow-list: every difference the differential test accepts, and why.
ALLOWED: tuple[Allowed, ...] = (
    Allowed(
        "*server_info", "$.*", frozenset({"only-real"}),
        "SGLang 0.5.23 reports all of its 546 ServerArgs fields, at the top level and again in "
        "each internal_states entry; the emulator reports the ones clients read (CLIENT_KEYS, "
        "never allowed to differ) and the flags it is given. The rest change with every "
        "release and no client of the plugin reads them.",
        protect=CLIENT_KEYS,
    ),
)  # fmt: skip


def unexplained(
    diffs: Iterable[Difference], allowed: Sequence[Allowed] = ALLOWED
) -> list[Difference]:
    """The differences no allow-list entry covers."""
    return [d for d in diffs if not any(entry.allows(d) for entry in allowed)]


def report(diffs: Sequence[Difference], limit: int = 60) -> str:
    """One line per difference, for failure messages."""
    lines = [str(d) for d in diffs[:limit]]
    if len(diffs) > limit:
        lines.append(f"... and {len(diffs) - limit} more")
    return "\n".join(lines)


Mutation = Callable[[dict[str, Observation]], None]
