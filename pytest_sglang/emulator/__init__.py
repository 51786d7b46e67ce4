"""An SGLang server emulator: ``python -m pytest_sglang.emulator --model-path M [flags]``.

It accepts ``sglang.launch_server``'s flags, serves SGLang's HTTP API (startup phases, native
``/generate``, the OpenAI endpoints, ``/server_info``, ``/metrics``, API key) on a real socket,
generates deterministic fake tokens, timed by a continuous-batching and speculative-decoding
performance model calibrated to the story's figures (or a fixed delay per token), and injects
faults on request (``--emulator-fault NAME``). It imports nothing from the rest of
``pytest_sglang``: the plugin starts it as a process and checks it with its own schemas, which
is what makes those contract tests worth anything.

Subpackages, bottom first (imports only run down; ``tests/architecture/test_layers.py``):

- ``engine/``: the engines behind one interface (``engine``): the fixed-delay
  ``simple_engine``; the performance model (``perf_model``, pure), continuous batching in
  model time (``batch_scheduler``, pure) and the asyncio ``batch_engine`` that runs them; the
  fake ``tokenizer``, counters (``stats``), one request's run (``tracking``), the ground-truth
  ``trace`` and kernel receive times (``arrivals``).
- ``config/``: SGLang's flags and their resolution (``server_args``, ``cli``), the
  ``--emulator-*`` options (``options``, ``perf_options``), the emulated model (``model``)
  and the fault registry (``faults``).
- ``runtime/``: what a route needs, built once (``context``, ``engines``), server ``state``,
  SGLang-style ``logs``, ``signals``, fake-GPU holders (``gpus``), the startup phases
  (``loading``, ``warmup``), the ``hang`` listener and the runtime's ``errors``.
- ``http/``: the Starlette ``app``, its endpoints (``native``, ``openai_api``, ``info``,
  ``health``, ``admin``, ``metrics``), ``auth`` and the generation faults' middleware.
- ``lifecycle``: the phases in order and the shutdown; ``__main__``: the entry point.

``docs/emulator.md`` explains the performance model and its calibration.
"""
