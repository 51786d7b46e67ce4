"""The layered readiness gate: the server is really ready, and it is the right one.

The identity checks (the model and configuration a server serves against expectations) are
here too: the gate's ``identity`` and ``server_info`` phases, and ``sglang_expect`` markers.

Phases, waiting and failure messages: ``docs/architecture.md``, "The readiness gate". Clock,
sleep and the HTTP transport are injectable, so tests script a server without sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from pytest_sglang.config.redaction import Redactor
from pytest_sglang.config.settings import ServerTarget, Settings
from pytest_sglang.config.values import Expectation
from pytest_sglang.errors import IdentityMismatch, SchemaMismatch, ServerNotReady
from pytest_sglang.loadgen.jsoncodec import UnsafeBody, loads_body
from pytest_sglang.server.engines import advice, recognise
from pytest_sglang.server.handle import (
    ModelCard,
    ReadinessTimings,
    SGLangServer,
    effective_max_running_requests,
)
from pytest_sglang.server.hints import auth_problem, gate_hint
from pytest_sglang.server.probing import Prober, Seen, held_interrupts, tls_failure
from pytest_sglang.server.schemas import describe_violations, validator, violations

if TYPE_CHECKING:
    import httpx

__all__ = [
    "CHEAP_POLL_INTERVAL",
    "MAX_CHEAP_POLL_INTERVAL",
    "ReadinessGate",
    "check_model_expectations",
    "check_server_info_expectations",
]

#: Seconds before the second probe. Each wait grows by ``POLL_BACKOFF``, up to
#: ``MAX_CHEAP_POLL_INTERVAL`` for probes that cost the server nothing (``/ready``, any probe
#: before the port answers, when no log tells readiness) and ``MAX_POLL_INTERVAL`` for the
#: others: a server warming up for minutes runs a few health generations a second, not twenty.
CHEAP_POLL_INTERVAL = 0.02
POLL_BACKOFF = 1.5
MAX_CHEAP_POLL_INTERVAL = 0.05
MAX_POLL_INTERVAL = 0.25
#: Upper bound of one probe: a stuck ``/health_generate`` gives up after 20 s by itself.
PROBE_TIMEOUT = 30.0
#: Upper bound of a probe that should answer at once (``/ready``; any probe before the first
#: answer of a watched launch: a foreign listener on our port must not hide our dead process).
QUICK_PROBE_TIMEOUT = 2.0
_PHASES = ("connect", "health", "models", "identity", "server_info")
_SCHEMAS = ("v1_models", "server_info", "model_info")


@dataclass(repr=False, eq=False)
class ReadinessGate:
    """Wait until a server passes every phase; return its :class:`SGLangServer` handle.

    ``kind`` ``"openai"`` skips the SGLang-only ``server_info`` phase. ``watch`` is called with
    (phase, elapsed seconds) before every wait and may raise to abort (launch mode);
    ``ready_line`` waits up to the given seconds, returning early on the server's ready line.
    """

    name: str
    url: str
    _: KW_ONLY
    timeout: float
    timeout_source: str = "default"
    api_key: str | None = None
    expectations: Sequence[Expectation] = ()
    transport: httpx.AsyncBaseTransport | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    watch: Callable[[str, float], None] | None = None
    secrets: Sequence[str] = ()
    kind: str = "sglang"
    headers: Mapping[str, str] = field(default_factory=dict)
    ready_line: Callable[[float], object] | None = None
    _phases: dict[str, float] = field(init=False, default_factory=dict)
    #: Every endpoint each phase tried, with its last answer: ``{phase: {path: "GET ..."}}``.
    _tried: dict[str, dict[str, str]] = field(init=False, default_factory=dict)
    _probes: int = field(init=False, default=0)
    _last: Seen | None = field(init=False, default=None)
    _start: float = field(init=False, default=0.0)
    _interval: float = field(init=False, default=CHEAP_POLL_INTERVAL)
    _tls_checked: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self._redact = Redactor(
            (*self.secrets, *filter(None, [self.api_key]), *self.headers.values())
        )

    @classmethod
    def for_target(cls, target: ServerTarget, url: str, settings: Settings) -> ReadinessGate:
        """Return the gate for ``target`` at ``url`` under ``settings``.

        Launch mode adds its ``watch`` and ``ready_line`` (``dataclasses.replace``).
        """
        return cls(
            target.name,
            url,
            timeout=settings.ready_timeout.value,
            timeout_source=settings.ready_timeout.source,
            api_key=settings.api_key.value,
            expectations=target.expectations,
            kind=target.kind,
            headers=target.header_map,
            secrets=settings.secrets,
        )

    def wait(self) -> SGLangServer:
        """Run every phase in order; raise :class:`ServerNotReady` (or a subclass) on failure.

        Called where an event loop runs (an ``async def`` test), it runs on a worker thread.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._wait()
        with ThreadPoolExecutor(1, thread_name_prefix="pytest-sglang-gate") as worker:
            return worker.submit(self._wait).result()

    def _wait(self) -> SGLangServer:
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._start = self.clock()
        # Ctrl-C and SIGTERM, held during the gate and raised between its steps.
        with held_interrupts() as self._interrupts, asyncio.Runner() as runner:
            self._interrupts.loop = runner.get_loop()
            self._prober = Prober(runner)
            client = httpx.AsyncClient(
                base_url=self.url,
                headers={**headers, **self.headers},
                transport=self.transport,
                trust_env=False,  # a proxy from the environment must not sit in between
                # Plain HTTP never needs the CA store, and loading it is most of the cost.
                verify=self.url.startswith("https:"),
            )
            try:
                cards, server_info, model_info = self._pass_phases(client)
                self._interrupts.check()
            finally:
                runner.run(client.aclose())
        unchecked = ", ".join(e.describe() for e in self.expectations if e.key not in _MODEL_KEYS)
        skipped = "SGLang only: an OpenAI-compatible server has no /server_info" + (
            f" (expectations not checked here: {unchecked})" if unchecked else ""
        )
        skips = {"server_info": skipped} if self.kind == "openai" else {}
        return SGLangServer(
            name=self.name,
            url=self.url,
            model=_select_card(cards, self.expectations),
            models=tuple(cards),
            model_info=model_info,
            server_info=server_info,
            readiness=ReadinessTimings(dict(self._phases), self._probes, skips),
            api_key=self.api_key,
            kind=self.kind,
            extra_headers=dict(self.headers),
        )

    # -- phases -------------------------------------------------------------------------

    def _pass_phases(
        self, client: httpx.AsyncClient
    ) -> tuple[list[ModelCard], dict[str, Any], dict[str, Any]]:
        """Pass every phase; return the model cards, ``/server_info`` and ``/model_info``.

        SGLang's health is ``/ready`` (from 0.5.23; 404, or 401 where it is not exempt from
        the API key, before) confirmed by one ``/health_generate``, else ``/health_generate``
        alone; an OpenAI-compatible server's ``/health``, else ``/v1/models`` (Ollama).
        """
        openai = self.kind == "openai"
        self._until_200(
            client,
            ["/health", "/v1/models"] if openai else ["/ready", "/health_generate"],
            lambda path: (
                "neither /health nor /v1/models exists (404): not an OpenAI-compatible server, "
                "or the URL carries a path prefix (give the URL without /v1)"
                if openai
                else "GET /health_generate answered 404: this is not an SGLang server, or the "
                "URL carries a path prefix; give the server's base URL" + self._not_sglang(client)
            ),
        )
        self._pass("health")
        _, body = self._json(
            client, "/v1/models", schema="openai_models" if openai else "v1_models"
        )
        self._pass("models")
        cards = [ModelCard.from_json(card) for card in body["data"]]
        problems = check_model_expectations(cards, self.expectations)
        self._pass_unless(problems, "the server does not serve the expected model", "identity")
        if openai:
            return cards, {}, {}
        # 0.5.23 renamed the endpoints; the old names log a warning on every call there.
        info_path, server_info = self._json(client, "/server_info", "/get_server_info")
        _, model_info = self._json(client, "/model_info", "/get_model_info")
        problems = check_server_info_expectations(
            server_info, self.expectations, info_path, models=cards
        )
        what = "the server runs another configuration than expected"
        self._pass_unless(problems, what, "server_info")
        return cards, server_info, model_info

    def _pass_unless(self, problems: list[str], what: str, phase: str) -> None:
        """Fail with :class:`IdentityMismatch` listing ``problems`` if any, else pass ``phase``."""
        if problems:
            self._fail(f"{what}:\n  " + "\n  ".join(problems), IdentityMismatch)
        self._pass(phase)

    def _json(
        self, client: httpx.AsyncClient, *paths: str, schema: str | None = None
    ) -> tuple[str, Any]:
        """GET ``paths[0]`` (on 404 the next) until 200; return (path, schema-valid JSON body)."""
        path, response = self._until_200(
            client,
            list(paths),
            lambda path: (
                f"GET {' and '.join(dict.fromkeys((paths[0], path)))} answered 404: "
                "not an SGLang server?" + self._not_sglang(client)
            ),
        )
        try:
            body = loads_body(response.content)
        except ValueError as exc:  # UnsafeBody included
            what = exc if isinstance(exc, UnsafeBody) else "200 with a body that is not JSON"
            self._fail(f"GET {path} returned {what}", SchemaMismatch, json_path="$")
        schema = schema or path.removeprefix("/get_").strip("/")  # /server_info: server_info
        if schema == "server_info":  # its api_key, admin_api_key never reach a repr or message
            body = self._redact.json(body)  # (the model list is left whole: it names the model)
        if found := violations(body, schema):
            self._fail(
                f"GET {path} returned a body that breaks "
                + ("the model-list schema: " if path == "/v1/models" else "its schema: ")
                + str(describe_violations(body, schema))
                + (self._not_sglang(client, body) if schema == "v1_models" else ""),
                SchemaMismatch,
                json_path=found[0].json_path,
            )
        return path, body

    def _until_200(
        self,
        client: httpx.AsyncClient,
        paths: list[str],
        not_found: Callable[[str], str],
    ) -> tuple[str, httpx.Response]:
        """GET ``paths[0]`` until 200; a path that does not exist (404, 405) moves to the next.

        So does ``/ready``'s 401 (before 0.5.23 it is not exempt from the API key). Its 200 only
        reflects a flag: one ``/health_generate`` confirms it.
        """
        while True:
            path = paths[0]
            response = self._get(client, path)
            status = response.status_code if response is not None else None
            missing = status in (404, 405) or (status == 401 and path == "/ready")
            if missing and len(paths) > 1:
                paths.pop(0)
                continue
            if status == 401:
                self._fail(auth_problem(path, bool(self.api_key)))
            if status == 404:
                self._fail(not_found(path))
            if response is not None and status == 200:
                confirm = self._get(client, "/health_generate") if path == "/ready" else response
                if confirm is not None and confirm.status_code == 200:
                    return path, response
            self._wait_a_moment()

    # -- probes -------------------------------------------------------------------------

    def _get(self, client: httpx.AsyncClient, path: str) -> httpx.Response | None:
        """GET ``path``; return None on a transport error (refused, reset, timed out)."""
        import httpx

        self._interrupts.check()  # one that came after the last wait: no probe is cancelled
        self._probes += 1
        quick = path == "/ready" or (self.watch is not None and "connect" not in self._phases)
        bound = QUICK_PROBE_TIMEOUT if quick else PROBE_TIMEOUT
        limit = self._limit(bound)
        seen = Seen(path, at=0.0)
        response: httpx.Response | None = None
        failed: Exception | None = None
        try:
            response = self._prober.get(client, path, limit)
        except (TimeoutError, httpx.TimeoutException) as exc:
            reached = self._prober.connected or isinstance(
                exc, httpx.ReadTimeout | httpx.WriteTimeout
            )
            if limit < bound and self._last is not None and not reached:
                return None  # cut short by the gate's own deadline: the last answer says more
            # A whole answer: a server dribbling bytes gets no more time than a silent one.
            seen.error = f"no answer within {limit:.1f}s"
        except UnsafeBody as exc:
            seen.error, failed = str(exc), exc
        except httpx.TransportError as exc:
            seen.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            failed = exc
        if response is not None:
            seen.status, seen.body = response.status_code, response.text
            seen.server = response.headers.get("server")
        seen.at = self._elapsed()
        self._last = seen
        phase = self._current_phase()
        phase = "health" if phase == "connect" and response is not None else phase
        answer = str(seen.status) if seen.error is None else seen.error.split(":", 1)[0]
        self._tried.setdefault(phase, {})[path] = f"GET {path} -> {answer}"
        if isinstance(failed, UnsafeBody):  # a server that sends that will not send less next time
            self._fail(f"GET {path} returned {failed}")
        if failed is not None or (response is not None and response.status_code == 400):
            self._refuse_wrong_scheme(failed)
        if response is not None and "connect" not in self._phases:
            self._pass("connect")  # an HTTP answer, if not the one wanted
        if response is not None and 300 <= response.status_code < 400:
            # An http -> https ingress, a login page: following it would probe another server.
            location = response.headers.get("location") or "(no Location header)"
            self._fail(
                f"GET {path} answered {response.status_code} redirecting to {location}: the gate "
                "does not follow redirects; give the URL the server answers at itself (its "
                "scheme, host and port)"
            )
        return response

    def _refuse_wrong_scheme(self, exc: Exception | None) -> None:
        """Fail at once when the server speaks another scheme than the URL says.

        ``exc`` is the probe's transport error, or None for a 400 (nginx's answer to plain
        HTTP on its HTTPS port; a bare TLS server drops the connection instead).
        """
        import httpx

        url = httpx.URL(self.url)
        if exc is not None and (problem := tls_failure(exc, url)):  # an https:// URL
            self._fail(problem, phase="connect")
        dropped = exc is None or isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError)
        if url.scheme == "http" and dropped and not self._tls_checked:
            self._tls_checked = True  # one handshake settles it; a flaky server is no TLS one
            if self._prober.speaks_tls(url.host, url.port or 80, self._limit(QUICK_PROBE_TIMEOUT)):
                self._fail(
                    f"the server at {url.host}:{url.port or 80} speaks TLS (HTTPS), not plain "
                    f"HTTP; use {url.copy_with(scheme='https')}",
                    phase="connect",
                )

    # -- bookkeeping and messages -------------------------------------------------------

    def _elapsed(self) -> float:
        return self.clock() - self._start

    def _limit(self, bound: float) -> float:
        """Return the seconds a probe may take: ``bound``, less near the deadline (not 0)."""
        return min(max(self.timeout - self._elapsed(), 0.05), bound)

    def _current_phase(self) -> str:
        return next((p for p in _PHASES if p not in self._phases), _PHASES[-1])

    def _pass(self, phase: str) -> None:
        self._phases[phase] = self._elapsed() - sum(self._phases.values())  # phases follow on

    def _wait_a_moment(self) -> None:
        phase = self._current_phase()
        if self.watch is not None:
            self.watch(phase, self._elapsed())
        if self._elapsed() >= self.timeout:
            self._fail(
                f"not passed within the ready timeout of {self.timeout:g}s "
                f"(from {self.timeout_source})"
            )
        # Built (once: they are cached) while the server starts, not once it is ready.
        for name in ("openai_models",) if self.kind == "openai" else _SCHEMAS:
            validator(name)
        last_path = self._last.path if self._last is not None else ""
        cheap = self.ready_line is None and (phase == "connect" or last_path == "/ready")
        interval = min(self._interval, MAX_CHEAP_POLL_INTERVAL if cheap else MAX_POLL_INTERVAL)
        self._interval = interval * POLL_BACKOFF
        # Never sleep past the deadline: the last probe is sent at it, not after it.
        (self.ready_line or self.sleep)(max(min(interval, self.timeout - self._elapsed()), 0.0))
        self._interrupts.check()

    def _not_sglang(self, client: httpx.AsyncClient, models: object = None) -> str:
        """Say which engine this is, if its answers tell, and how to measure it anyway.

        Given ``models``, nothing unless the engine is recognised (a model list that breaks
        SGLang's schema may still be SGLang's, broken).
        """
        header = self._last.server if self._last is not None else None
        given = models is not None
        if not given:  # one quick look at the model list, best effort
            import httpx

            with contextlib.suppress(httpx.HTTPError, ValueError, TimeoutError):
                limit = self._limit(QUICK_PROBE_TIMEOUT)
                response = self._prober.get(client, "/v1/models", limit)
                header = response.headers.get("server") or header
                models = loads_body(response.content) if response.status_code == 200 else None
        found = recognise(header, models)
        if found is None and given:
            return ""
        engine = f"\n  this looks like {found[0]}: {found[1]}" if found else ""
        return f"{engine}\n  fix: {advice(self.name, self.url)}"

    def _fail(
        self,
        problem: str,
        error: type[ServerNotReady] = ServerNotReady,
        *,
        phase: str | None = None,
        **details: Any,
    ) -> NoReturn:
        """Raise ``error`` naming the phase, the problem, the last answer and a hint, redacted."""
        phase = phase or self._current_phase()
        what = "OpenAI-compatible server" if self.kind == "openai" else "SGLang server"
        lines = [
            f"{what} {self.name!r} at {self.url} is not ready: phase {phase!r} failed "
            f"after {self._elapsed():.2f}s: {problem}",
        ]
        if self._last is not None:
            lines.append(f"  last response: {self._last.describe()}")
        if tried := self._tried.get(phase):
            lines.append(f"  endpoints tried in phase {phase!r}: " + ", ".join(tried.values()))
        passed = ", ".join(f"{p} {t:.2f}s" for p, t in self._phases.items())
        lines.append(f"  phases passed: {passed or 'none'}")
        if hint := gate_hint(phase, self._last):
            lines.append(f"  hint: {hint}")
        raise error(self._redact("\n".join(lines)), phase=phase, **details) from None


# -- identity checks ---------------------------------------------------------------------

#: Expectation keys answered by ``/v1/models``; every other key is a ``/server_info`` key.
_MODEL_KEYS = frozenset({"model_id", "max_model_len"})


def _select_card(cards: Sequence[ModelCard], expectations: Iterable[Expectation]) -> ModelCard:
    """Return the card named by a ``model_id`` expectation, else the first (base) card."""
    wanted = next((e.value for e in expectations if e.key == "model_id"), None)
    return next((c for c in cards if c.id == wanted), cards[0])


def check_model_expectations(
    cards: Sequence[ModelCard], expectations: Sequence[Expectation]
) -> list[str]:
    """Return one problem line per unmet ``model_id`` / ``max_model_len`` expectation."""
    card = _select_card(cards, expectations)
    problems = []
    for e in expectations:
        if e.key == "model_id" and e.value not in [c.id for c in cards]:
            served = ", ".join(repr(c.id) for c in cards)
            problems.append(f"{_expected(e)}, the server serves {served}")
        elif e.key == "max_model_len" and card.max_model_len != e.value:
            reported = json.dumps(card.max_model_len)
            problems.append(f"{_expected(e)}, /v1/models reports {reported} for {card.id!r}")
    return problems


#: ``/server_info`` keys that are ``null`` unless given, and where the effective value is.
_EFFECTIVE = {
    "max_running_requests": "internal_states[*].effective_max_running_requests_per_dp, "
    "summed over DP ranks",
    "context_length": "/v1/models max_model_len",
}


def check_server_info_expectations(
    server_info: dict[str, Any],
    expectations: Iterable[Expectation],
    endpoint: str,
    *,
    models: Sequence[ModelCard] | None = None,
) -> list[str]:
    """Return one problem line per unmet ``/server_info`` key expectation.

    A key SGLang reports ``null`` (not given) is checked against its :data:`_EFFECTIVE` value.
    """
    problems = []
    for e in (e for e in expectations if e.key not in _MODEL_KEYS):
        actual = server_info.get(e.key)
        if e.key not in server_info:
            version = server_info.get("version", "?")
            problems.append(f"{_expected(e)}, but {endpoint} has no such key (SGLang {version})")
        elif actual is None and e.key in _EFFECTIVE:
            where, effective = _EFFECTIVE[e.key], models[0].max_model_len if models else None
            if e.key == "max_running_requests":
                effective = effective_max_running_requests(server_info)
            head = f"{_expected(e)}; {endpoint} reports null (not set on the server's command line)"
            if effective is None:
                hint = ", expect max_model_len instead" if e.key == "context_length" else ""
                problems.append(
                    f"{head}, and the effective value ({where}) is not available here{hint}"
                )
            elif not _equal(e.key, effective, e.value):
                problems.append(f"{head}, the effective value is {json.dumps(effective)} ({where})")
        elif not _equal(e.key, actual, e.value):
            adaptive_off = e.key == "speculative_adaptive" and e.value is True
            reports = f"{_expected(e)}, {endpoint} reports {json.dumps(actual)}"
            problems.append(reports + (_ADAPTIVE_OFF if adaptive_off else ""))
    return problems


def _expected(e: Expectation) -> str:
    return f"{e.key}: expected {json.dumps(e.value)} (from {e.source})"


#: Why ``speculative_adaptive`` reads false on a server launched with ``--speculative-adaptive``.
_ADAPTIVE_OFF = (
    ": SGLang turned adaptive speculation off at start-up and runs static speculation. It "
    "supports only --speculative-algorithm EAGLE or EAGLE3 with --speculative-eagle-topk 1, "
    "without attention DP, multi-layer EAGLE, two-batch overlap or pdmux; its log says "
    "'speculative_adaptive disabled: <reason>'"
)


def _equal(key: str, actual: object, expected: object) -> bool:
    # SGLang upper-cases it while resolving (``--speculative-algorithm eagle3`` → ``EAGLE3``).
    if key == "speculative_algorithm" and isinstance(actual, str) and isinstance(expected, str):
        return actual.upper() == expected.upper()
    # 8 and 8.0 are the same number, but True is not 1 here.
    if isinstance(actual, bool) or isinstance(expected, bool):
        return actual is expected
    return actual == expected
