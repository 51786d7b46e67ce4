"""An SGLang server emulator: ``python -m pytest_sglang.emulator --model-path M [flags]``.

It accepts ``sglang.launch_server``'s flags, serves SGLang's HTTP API (startup phases, native
``/generate``, the OpenAI endpoints, ``/server_info``, ``/metrics``, API key) on a real socket,
generates deterministic fake tokens, timed by a continuous-batching and speculative-decoding
performance model calibrated to the story's figures (or a fixed delay per token), and injects
faults on request (``--emulator-fault NAME``). It imports nothing from the rest of
``pytest_sglang``: the plugin starts it as a process and checks it with its own schemas, which
is what makes those contract tests worth anything.

Modules, one job each:

- ``__main__``: the entry point, ``main()``.
- ``cli``: argparse for SGLang's flags and the ``--emulator-*`` options.
- ``config``: the frozen launch configuration the CLI produces.
- ``server_args``: SGLang's ServerArgs defaults and their resolution (what ``/server_info`` shows).
- ``model``: the emulated model's config (architecture, context length, EOS id).
- ``tokenizer``: a deterministic fake tokenizer (one token per whitespace-separated word).
- ``faults``: the fault registry.
- ``state``: server status shared by the HTTP layer and the lifecycle.
- ``stats``: counters and histograms that ``/metrics`` and ``internal_states`` read.
- ``engine``: the engine interface (``Engine`` protocol, requests, token chunks).
- ``simple_engine``: the fixed-delay engine behind that interface.
- ``perf_model``: the performance model (step costs, acceptance, noise; pure) and its
  calibration; ``batch_scheduler``: continuous batching in model time (pure), with a
  closed-loop simulation; ``batch_engine``: the asyncio engine that runs them (the default).
- ``perf_options``: the ``--emulator-*`` options of the model and the engine they build.
- ``trace``: the ground-truth trace (``--emulator-trace``) and its HTTP-level stamps.
- ``fault_middleware``: the generation faults (``error-rate``, ``stall-stream``,
  ``crash-under-load``) at the HTTP level.
- ``tracking``: one request's run through the engine, with its tokenizer-side metrics.
- ``web``, ``auth``: HTTP helpers (JSON, SSE, error envelopes) and the API-key middleware.
- ``native``, ``openai_api``, ``info``, ``health``, ``admin``, ``metrics``: the endpoints.
- ``context``: everything a route needs (config, engine, counters, status), built once.
- ``app``: assembles the Starlette application for one emulated version.
- ``lifecycle``: the phases in order (load, warm-up, ready) and the shutdown.
- ``loading``, ``warmup``: phase A (port closed, load lines) and phase B (SGLang's warm-up).
- ``signals``: SIGTERM/SIGINT handling and SGLang-like fatal exits.
- ``hang``: the listener for the ``hang`` fault, which accepts connections and never answers.
- ``logs``: SGLang-style log lines on stdout.
"""
