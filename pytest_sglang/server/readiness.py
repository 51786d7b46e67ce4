"""The layered readiness gate: the server is really ready, and it is the right one.

Phases, waiting and failure messages: ``docs/architecture.md``, "The readiness gate". Clock,
sleep and the HTTP transport are injectable, so tests script a server without sockets.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pytest_sglang.config.redaction import Redactor
from pytest_sglang.config.targets import ServerTarget
from pytest_sglang.config.values import Expectation, Sourced
from pytest_sglang.errors import IdentityMismatch, SchemaMismatch, ServerNotReady
from pytest_sglang.interrupts import redelivered
from pytest_sglang.loadgen.jsoncodec import UnsafeBody, loads_body
from pytest_sglang.server.engines import advice, recognise
from pytest_sglang.server.handle import ModelCard, ReadinessTimings, SGLangServer
from pytest_sglang.server.hints import auth_problem, gate_hint
from pytest_sglang.server.identity import (
    MODEL_KEYS,
    check_model_expectations,
    check_server_info_expectations,
    select_card,
)
from pytest_sglang.server.probing import Prober, Seen, tls_failure
from pytest_sglang.server.schemas import describe_violations, validator, violations

if TYPE_CHECKING:
    import httpx

__all__ = ["CHEAP_POLL_INTERVAL", "POLL_INTERVAL", "ReadinessGate"]

#: Seconds between probes that cost the server nothing: ``/ready``, and any probe before the
#: port answers. Used when no log tells readiness (an attached server).
CHEAP_POLL_INTERVAL = 0.02
#: Seconds between the first other probes. The wait grows by ``POLL_BACKOFF`` after each up
#: to ``MAX_POLL_INTERVAL``: a server that warms up for minutes runs (and logs) a few health
#: generations a second, not twenty.
POLL_INTERVAL = 0.05
POLL_BACKOFF = 1.5
MAX_POLL_INTERVAL = 0.25
#: Upper bound of one probe: a healthy ``/health_generate`` answers in ~1 s, a stuck one
#: gives up after SGLANG_HEALTH_CHECK_TIMEOUT (20 s) by itself.
PROBE_TIMEOUT = 30.0
#: Upper bound of a probe that should answer at once: ``/ready``, and any probe before the
#: first HTTP answer when a launched process is watched. A port held by somebody else's
#: listener (our server then dies with "address already in use") accepts the connection
#: and never answers: the watch must not wait 30 s to notice our process is gone.
QUICK_PROBE_TIMEOUT = 2.0
_PHASES = ("connect", "health", "models", "identity", "server_info")
_SCHEMAS = ("v1_models", "server_info", "model_info")


class ReadinessGate:
    """Wait until a server passes every phase; return its :class:`SGLangServer` handle.

    :param name: the server's name (``default`` or the NAME of ``--sglang-url NAME=URL``).
    :param url: base URL without trailing slash.
    :param timeout: seconds for the whole gate; ``timeout_source`` says where it was set.
    :param expectations: identity checks (model id, ``max_model_len``, server-info keys).
    :param kind: ``"sglang"`` (every phase) or ``"openai"`` (a plain OpenAI-compatible
        server: no SGLang-only ``server_info`` phase).
    :param headers: extra headers for every probe (``--sglang-header``); values are secrets.
    :param transport: an httpx (async) transport to use instead of the network (tests).
    :param watch: called with (phase, elapsed seconds) before every wait (launch mode: notice
        a dead process, show progress); it may raise to abort the gate.
    :param ready_line: waits up to the given seconds, returning early when the server logs
        its ready line (launch mode); used instead of ``sleep``.
    """

    def __init__(
        self,
        name: str,
        url: str,
        *,
        timeout: float,
        timeout_source: str = "default",
        api_key: str | None = None,
        expectations: Sequence[Expectation] = (),
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        watch: Callable[[str, float], None] | None = None,
        secrets: Sequence[str] = (),
        kind: str = "sglang",
        headers: Mapping[str, str] | None = None,
        ready_line: Callable[[float], object] | None = None,
    ) -> None:
        self.name = name
        self.kind = kind
        self.headers = dict(headers or {})
        self.url = url
        self.timeout = timeout
        self.timeout_source = timeout_source
        self.api_key = api_key
        self.expectations = tuple(expectations)
        self._transport = transport
        self._clock = clock
        self._sleep = sleep
        self._next_interval = POLL_INTERVAL
        self._watch = watch
        self._ready_line = ready_line
        self._redact = Redactor((*secrets, *([api_key] if api_key else []), *self.headers.values()))
        self._phases: dict[str, float] = {}
        self._probes = 0
        self._last: Seen | None = None
        #: Every endpoint each phase tried, with its last answer: ``{phase: {path: answer}}``.
        self._tried: dict[str, dict[str, str]] = {}
        self._server_header: str | None = None
        self._start = 0.0
        self._phase_start = 0.0
        self._prober: Prober | None = None
        self._tls_checked = False
        self._validators_built = False
        #: Raises a Ctrl-C (or SIGTERM) that a finalizer or a probe's end dropped.
        self._check_interrupts: Callable[[], None] = lambda: None

    @classmethod
    def for_target(
        cls,
        target: ServerTarget,
        url: str,
        *,
        timeout: Sourced[float],
        api_key: str | None,
        watch: Callable[[str, float], None] | None = None,
        secrets: Sequence[str] = (),
        ready_line: Callable[[float], object] | None = None,
    ) -> ReadinessGate:
        """Return the gate for ``target`` at ``url``: how the pool and the launcher build it."""
        return cls(
            target.name,
            url,
            timeout=timeout.value,
            timeout_source=timeout.source,
            api_key=api_key,
            expectations=target.expectations,
            watch=watch,
            secrets=secrets,
            kind=target.kind,
            headers=target.header_map,
            ready_line=ready_line,
        )

    # -- public -------------------------------------------------------------------------

    def wait(self) -> SGLangServer:
        """Run every phase in order; raise :class:`ServerNotReady` (or a subclass) on failure.

        Called from a thread that runs an event loop (an ``async def`` test asking for a
        server), the gate runs on a worker thread with its own loop while the caller waits.
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
        headers.update(self.headers)
        self._start = self._phase_start = self._clock()
        with asyncio.Runner() as runner, redelivered() as self._check_interrupts:
            self._prober = Prober(runner)
            client = httpx.AsyncClient(
                base_url=self.url,
                headers=headers,
                transport=self._transport,
                follow_redirects=False,
                # A proxy from the environment must not sit between us and the server.
                trust_env=False,
                # Plain HTTP never needs the CA store (relative paths, no redirects followed),
                # and loading it is most of what building a client costs.
                verify=self.url.startswith("https:"),
            )
            skipped: dict[str, str] = {}
            server_info: dict[str, Any] = {}
            model_info: dict[str, Any] = {}
            try:
                self._wait_healthy(client)
                if self.kind == "openai":
                    cards = self._fetch_models(client, schema="openai_models")
                    card = self._check_identity(cards)
                    skipped["server_info"] = self._openai_skip_reason()
                else:
                    cards = self._fetch_models(client)
                    card = self._check_identity(cards)
                    server_info, model_info = self._fetch_server_info(client)
                self._check_interrupts()
            finally:
                runner.run(client.aclose())
                self._prober = None
        return SGLangServer(
            name=self.name,
            url=self.url,
            model=card,
            models=tuple(cards),
            model_info=model_info,
            server_info=server_info,
            readiness=ReadinessTimings(
                phases=dict(self._phases), probes=self._probes, skipped=skipped
            ),
            api_key=self.api_key,
            kind=self.kind,
            extra_headers=dict(self.headers),
        )

    def _openai_skip_reason(self) -> str:
        unchecked = [e.describe() for e in self.expectations if e.key not in MODEL_KEYS]
        reason = "SGLang only: an OpenAI-compatible server has no /server_info"
        if unchecked:
            reason += f" (expectations not checked here: {', '.join(unchecked)})"
        return reason

    # -- phases -------------------------------------------------------------------------

    def _wait_healthy(self, client: httpx.AsyncClient) -> None:
        """Pass ``connect`` at the first answer, ``health`` when the health probe says 200.

        SGLang: ``/ready`` (from 0.5.23; on older releases 404, or 401 where it is not
        exempt from the API key) confirmed by one ``/health_generate``, else
        ``/health_generate`` alone. OpenAI-compatible: ``/health``, else ``/v1/models``
        (not every engine has ``/health``: Ollama has none).
        """
        openai = self.kind == "openai"
        paths = ["/health", "/v1/models"] if openai else ["/ready", "/health_generate"]
        fall_back_on = (404, 405) if openai else (401, 404)
        phase = "connect"
        while True:
            path = paths[0]
            response = self._get(client, path)
            if response is not None:
                if phase == "connect":
                    self._pass("connect")
                    phase = "health"
                status = response.status_code
                if len(paths) > 1 and status in fall_back_on:
                    paths.pop(0)
                    continue
                if status == 401:
                    problem = auth_problem(path, bool(self.api_key))
                    raise ServerNotReady(self._message(phase, problem), phase=phase)
                if status == 404:
                    problem = (
                        "neither /health nor /v1/models exists (404): not an OpenAI-compatible "
                        "server, or the URL carries a path prefix (give the URL without /v1)"
                        if openai
                        else "GET /health_generate answered 404: this is not an SGLang server, "
                        "or the URL carries a path prefix; give the server's base URL"
                        + self._not_sglang(client)
                    )
                    raise ServerNotReady(self._message(phase, problem), phase=phase)
                if status == 200:
                    if path != "/ready":
                        break
                    # /ready is instant but only reflects a status flag: confirm that the
                    # server really generates with one /health_generate.
                    confirm = self._get(client, "/health_generate")
                    if confirm is not None and confirm.status_code == 200:
                        break
            self._wait_a_moment(phase)
        self._pass("health")

    def _fetch_models(
        self, client: httpx.AsyncClient, schema: str = "v1_models"
    ) -> list[ModelCard]:
        _, body = self._get_json_200(client, "/v1/models", phase="models")
        found = violations(body, schema, 1)
        if found:
            recognised = (
                self._not_sglang(client, body, always=False) if schema == "v1_models" else ""
            )
            raise SchemaMismatch(
                self._message(
                    "models",
                    "GET /v1/models returned a body that breaks the model-list schema: "
                    + (describe_violations(body, schema) or str(found[0]))
                    + recognised,
                ),
                phase="models",
                json_path=found[0].json_path,
            )
        self._pass("models")
        return [ModelCard.from_json(card) for card in body["data"]]

    def _check_identity(self, cards: list[ModelCard]) -> ModelCard:
        problems = check_model_expectations(cards, self.expectations)
        if problems:
            raise IdentityMismatch(
                self._message(
                    "identity",
                    "the server does not serve the expected model:\n  " + "\n  ".join(problems),
                ),
                phase="identity",
            )
        self._pass("identity")
        return select_card(cards, self.expectations)

    def _fetch_server_info(
        self, client: httpx.AsyncClient
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        # 0.5.23 renamed the endpoints; the old names still answer there but log a warning
        # on every call, so try the new name first.
        info_path, server_info = self._get_json_200(
            client, "/server_info", phase="server_info", old_path="/get_server_info"
        )
        # Held redacted from here on: api_key, admin_api_key never reach a repr (pytest -l).
        server_info = self._redact.json(server_info)
        model_info_path, model_info = self._get_json_200(
            client, "/model_info", phase="server_info", old_path="/get_model_info"
        )
        for path, body, schema in (
            (info_path, server_info, "server_info"),
            (model_info_path, model_info, "model_info"),
        ):
            found = violations(body, schema, 1)
            if found:
                raise SchemaMismatch(
                    self._message(
                        "server_info",
                        f"GET {path} returned a body that breaks its schema: "
                        + (describe_violations(body, schema) or str(found[0])),
                    ),
                    phase="server_info",
                    json_path=found[0].json_path,
                )
        problems = check_server_info_expectations(server_info, self.expectations, info_path)
        if problems:
            raise IdentityMismatch(
                self._message(
                    "server_info",
                    "the server runs another configuration than "
                    "expected:\n  " + "\n  ".join(problems),
                ),
                phase="server_info",
            )
        self._pass("server_info")
        return server_info, model_info

    # -- HTTP helpers -------------------------------------------------------------------

    def _request(self, client: httpx.AsyncClient, path: str, limit: float) -> httpx.Response:
        assert self._prober is not None, "probes run inside wait()"
        return self._prober.get(client, path, limit)

    def _get(self, client: httpx.AsyncClient, path: str) -> httpx.Response | None:
        """GET ``path``; return None on a transport error (refused, reset, timed out)."""
        import httpx

        remaining = max(self.timeout - self._elapsed(), 0.05)
        self._probes += 1
        quick = path == "/ready" or (self._watch is not None and "connect" not in self._phases)
        bound = QUICK_PROBE_TIMEOUT if quick else PROBE_TIMEOUT
        probe_timeout = min(remaining, bound)
        seen = Seen("GET", path, at=0.0)
        response: httpx.Response | None = None
        failed: httpx.TransportError | None = None
        unsafe: UnsafeBody | None = None
        try:
            response = self._request(client, path, probe_timeout)
        except (TimeoutError, httpx.TimeoutException) as exc:
            connected = self._prober is not None and self._prober.connected
            reached = connected or isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout)
            if probe_timeout < bound and self._last is not None and not reached:
                # Cut short by the gate's own deadline before it reached the server: it says
                # nothing new, and the failure message keeps what the server last said.
                return None
            # A whole answer: a server dribbling bytes gets no more time than a silent one.
            seen.error = f"no answer within {probe_timeout:.1f}s"
        except UnsafeBody as exc:
            seen.error = f"{exc}"
            unsafe = exc
        except httpx.TransportError as exc:
            seen.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            failed = exc
        if response is not None:
            seen.status = response.status_code
            seen.body = response.text
            seen.server = response.headers.get("server")
            if seen.server:
                self._server_header = seen.server
        seen.at = self._elapsed()
        self._last = seen
        phase = self._current_phase()
        if phase == "connect" and response is not None:
            phase = "health"  # the first answer passes connect: it was a health probe
        answer = str(seen.status) if seen.error is None else seen.error.split(":", 1)[0]
        self._tried.setdefault(phase, {})[path] = answer
        if failed is not None or (response is not None and response.status_code == 400):
            self._refuse_wrong_scheme(failed)
        if unsafe is not None:  # a server that sends that will not send less next time
            raise ServerNotReady(self._message(phase, f"GET {path} returned {unsafe}"), phase=phase)
        if response is not None and 300 <= response.status_code < 400:
            self._refuse_redirect(path, response)
        return response

    def _refuse_wrong_scheme(self, exc: Exception | None) -> None:
        """Fail at once when the server speaks another scheme than the URL says.

        ``exc`` is the probe's transport error, or None for a 400 answer (nginx answers a
        plain request on its HTTPS port with 400 "The plain HTTP request was sent to HTTPS
        port"; a TLS server without such a page drops the connection).
        """
        import httpx

        url = httpx.URL(self.url)
        problem = tls_failure(exc, url) if exc is not None else None
        dropped = exc is None or isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError)
        if problem is None and url.scheme == "http" and dropped and not self._tls_checked:
            assert self._prober is not None
            self._tls_checked = True  # one handshake settles it; a flaky server is no TLS one
            limit = min(QUICK_PROBE_TIMEOUT, max(self.timeout - self._elapsed(), 0.05))
            if self._prober.speaks_tls(url.host, url.port or 80, limit):
                problem = (
                    f"the server at {url.host}:{url.port or 80} speaks TLS (HTTPS), not plain "
                    f"HTTP; use {url.copy_with(scheme='https')}"
                )
        if problem is not None:
            raise ServerNotReady(self._message("connect", problem), phase="connect")

    def _refuse_redirect(self, path: str, response: httpx.Response) -> None:
        # An http -> https ingress, a login page, a trailing-slash rule: following it would
        # probe another server than the one named, and waiting would wait out the timeout.
        location = response.headers.get("location") or "(no Location header)"
        if "connect" not in self._phases:
            self._pass("connect")  # an HTTP answer, if not the one wanted
        phase = self._current_phase()
        raise ServerNotReady(
            self._message(
                phase,
                f"GET {path} answered {response.status_code} redirecting to {location}: "
                "the gate does not follow redirects; give the URL the server answers at "
                "itself (its scheme, host and port)",
            ),
            phase=phase,
        )

    def _get_json_200(
        self, client: httpx.AsyncClient, path: str, *, phase: str, old_path: str | None = None
    ) -> tuple[str, Any]:
        """GET ``path`` until 200 and return (path, JSON body); 404 switches to ``old_path``."""
        first = path
        while True:
            response = self._get(client, path)
            if response is not None and response.status_code == 404 and old_path is not None:
                path, old_path = old_path, None
                continue
            if response is not None:
                if response.status_code == 404:
                    tried = f"{first} and {path}" if path != first else path
                    raise ServerNotReady(
                        self._message(
                            phase,
                            f"GET {tried} answered 404: not an SGLang server?"
                            + self._not_sglang(client),
                        ),
                        phase=phase,
                    )
                if response.status_code == 401:
                    raise ServerNotReady(
                        self._message(phase, auth_problem(path, bool(self.api_key))), phase=phase
                    )
                if response.status_code == 200:
                    try:
                        return path, loads_body(response.content)
                    except ValueError as exc:  # UnsafeBody included
                        what = (
                            exc
                            if isinstance(exc, UnsafeBody)
                            else "200 with a body that is not JSON"
                        )
                        raise SchemaMismatch(
                            self._message(phase, f"GET {path} returned {what}"),
                            phase=phase,
                            json_path="$",
                        ) from None
            self._wait_a_moment(phase)

    # -- bookkeeping and messages -------------------------------------------------------

    def _elapsed(self) -> float:
        return self._clock() - self._start

    def _current_phase(self) -> str:
        return next((p for p in _PHASES if p not in self._phases), _PHASES[-1])

    def _pass(self, phase: str) -> None:
        now = self._clock()
        self._phases[phase] = now - self._phase_start
        self._phase_start = now

    def _wait_a_moment(self, phase: str) -> None:
        if self._watch is not None:
            self._watch(phase, self._elapsed())
        self._check_deadline(phase)
        if not self._validators_built:  # built while the server starts, not once it is ready
            for name in ("openai_models",) if self.kind == "openai" else _SCHEMAS:
                validator(name)
            self._validators_built = True
        last = self._last
        cheap = "connect" not in self._phases or (last is not None and last.path == "/ready")
        if cheap and self._ready_line is None:
            interval = CHEAP_POLL_INTERVAL
        else:
            interval = self._next_interval
            self._next_interval = min(interval * POLL_BACKOFF, MAX_POLL_INTERVAL)
        # Never sleep past the deadline: the last probe is sent at it, not after it.
        (self._ready_line or self._sleep)(max(min(interval, self.timeout - self._elapsed()), 0.0))
        self._check_interrupts()

    def _check_deadline(self, phase: str) -> None:
        if self._elapsed() >= self.timeout:
            raise ServerNotReady(
                self._message(
                    phase,
                    f"not passed within the ready timeout of "
                    f"{self.timeout:g}s (from {self.timeout_source})",
                ),
                phase=phase,
            )

    def _not_sglang(
        self, client: httpx.AsyncClient, models: object = None, *, always: bool = True
    ) -> str:
        """Say which engine this is, if its answers tell, and how to measure it anyway.

        ``always=False``: say nothing unless the engine is recognised (a model list that
        breaks SGLang's schema may still be SGLang's, broken).
        """
        if models is None:
            # One quick look at the model list; the failure at hand stays the message.
            import httpx

            last = self._last
            limit = min(QUICK_PROBE_TIMEOUT, max(self.timeout - self._elapsed(), 0.05))
            try:
                response = self._request(client, "/v1/models", limit)
                self._server_header = response.headers.get("server") or self._server_header
                models = loads_body(response.content) if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError, TimeoutError):  # a best-effort hint only
                models = None
            self._last = last
        found = recognise(self._server_header, models)
        if found is None and not always:
            return ""
        engine = f"\n  this looks like {found.engine}: {found.evidence}" if found else ""
        return f"{engine}\n  fix: {advice(self.name, self.url)}"

    def _message(self, phase: str, problem: str) -> str:
        what = "OpenAI-compatible server" if self.kind == "openai" else "SGLang server"
        lines = [
            f"{what} {self.name!r} at {self.url} is not ready: phase {phase!r} failed "
            f"after {self._elapsed():.2f}s: {problem}",
        ]
        if self._last is not None:
            lines.append(f"  last response: {self._last.describe()}")
        tried = self._tried.get(phase)
        if tried:
            lines.append(
                f"  endpoints tried in phase {phase!r}: "
                + ", ".join(f"GET {path} -> {answer}" for path, answer in tried.items())
            )
        passed = ", ".join(f"{p} {t:.2f}s" for p, t in self._phases.items())
        lines.append(f"  phases passed: {passed or 'none'}")
        hint = gate_hint(phase, self._last)
        if hint:
            lines.append(f"  hint: {hint}")
        return self._redact("\n".join(lines))
