# ruff: noqa: E501  (data: help texts and bucket bounds as SGLang writes them)
"""SGLang 0.5.23's other ``/metrics`` families: names, types, help texts and label sets.

Taken from a real 0.5.23 exposition (the real-SGLang tier, ``--enable-metrics``). The
renderer in :mod:`~pytest_sglang.emulator.http.metrics` writes the families it models live;
these complete the set, so a dashboard built on a real server finds every name it uses. Each
entry: name (without ``sglang:``), type, help, label scope (``scheduler``: the scheduler's
``engine_type``/``model_name``/``moe_ep_rank``/``pp_rank``/``tp_rank`` labels, plus ``pid`` for
``scheduler_pid``; ``tokenizer``: ``engine_type``/``model_name``; ``process``: none), the
extra label sets of its series, and a histogram's bucket bounds.
"""

from __future__ import annotations

from typing import NamedTuple


class Family(NamedTuple):
    """One metric family as SGLang 0.5.23 exposes it."""

    name: str
    kind: str
    help: str
    scope: str
    series: tuple[dict[str, str], ...]
    bounds: tuple[float, ...] = ()


FAMILIES: tuple[Family, ...] = (
    Family(
        'prefill_effective_tokens_total',
        'counter',
        'Effective prefill tokens with retracted-request re-counts excluded, updated on each log interval. mode: device_hit, host_hit, storage_hit, input. Windowed prefix cache hit rate = rate(sum of *_hit) / rate(sum of all modes); per-tier rate uses a single *_hit mode in the numerator.',
        'scheduler',
        ({'mode': 'input'}, {'mode': 'device_hit'}, {'mode': 'host_hit'}, {'mode': 'storage_hit'}),
    ),
    Family(
        'scheduler_idle_seconds_total',
        'counter',
        'Total wall time while the scheduler has no runnable or queued work.',
        'scheduler',
        ({},),
    ),
    Family(
        'scheduler_process_cpu_seconds_total',
        'counter',
        'Total CPU time consumed by the scheduler process across all threads.',
        'scheduler',
        ({},),
    ),
    Family(
        'scheduler_stage_seconds_total',
        'counter',
        'Total scheduler-loop wall time exclusively attributed to each stage. forward_overlap (full, partial, none): full=both endpoints active, partial=one, none=no observed overlap (including unavailable timing). Not exact overlapped/exposed seconds.',
        'scheduler',
        ({'category': 'other', 'forward_overlap': 'none'}, {'category': 'recv_requests', 'forward_overlap': 'none'}, {'category': 'process_input_requests', 'forward_overlap': 'none'}, {'category': 'get_next_batch_to_run', 'forward_overlap': 'none'}, {'category': 'process_queue', 'forward_overlap': 'none'}, {'category': 'run_batch', 'forward_overlap': 'none'}, {'category': 'process_batch_result', 'forward_overlap': 'none'}, {'category': 'sanity_check_cache', 'forward_overlap': 'none'}, {'category': 'idle', 'forward_overlap': 'none'}),
    ),
    Family(
        'dp_attention_tokens_total',
        'counter',
        'Tokens of MLP-sync steps on this DP rank. kind=scheduled: tokens this rank ran; kind=imbalance: tokens the busiest rank ran beyond this rank, i.e. capacity lost to DP imbalance on this rank. On speculative-decode steps the unit is batch rows (requests).',
        'scheduler',
        ({'kind': 'scheduled'}, {'kind': 'imbalance'}),
    ),
    Family(
        'dp_attention_steps_total',
        'counter',
        'MLP-sync steps on this DP rank. rank_state=idle: this rank had no tokens and only ran to keep the DP collectives in lockstep.',
        'scheduler',
        ({'rank_state': 'active'}, {'rank_state': 'idle'}),
    ),
    Family(
        'dp_attention_pairs_total',
        'counter',
        "Causal (query, key) pairs attended by MLP-sync steps on this DP rank, pricing every layer as full attention: a decode row reads its sequence, a prefill chunk its prefix plus the pairs within the chunk. kind=scheduled: this rank; kind=imbalance: the busiest rank's excess over this rank. The context-length counterpart of sglang:dp_attention_tokens_total; like it, speculative-decode steps count one query per row. Sliding-window layers execute fewer pairs than counted, so on hybrid-SWA models long rows are overstated.",
        'scheduler',
        ({'kind': 'scheduled'}, {'kind': 'imbalance'}),
    ),
    Family(
        'cuda_graph_passes_total',
        'counter',
        'Total number of forward passes categorized by CUDA graph.',
        'scheduler',
        ({'mode': 'prefill_none'}, {'mode': 'decode_none'}),
    ),
    Family(
        'realtime_tokens_total',
        'counter',
        'Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode.',
        'scheduler',
        ({'mode': 'prefill_compute'}, {'mode': 'decode'}, {'mode': 'prefill_cache'}),
    ),
    Family(
        'num_retracted_reqs',
        'gauge',
        'The number of retracted requests.',
        'scheduler_pid',
        ({},),
    ),
    Family(
        'num_paused_reqs',
        'gauge',
        'The number of paused requests by async weight sync.',
        'scheduler_pid',
        ({},),
    ),
    Family(
        'uncached_prompt_tokens_histogram',
        'histogram',
        'Histogram of uncached (compute) prompt token length.',
        'tokenizer',
        ({},),
        (100.0, 300.0, 500.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 7000.0, 8000.0, 9000.0, 10000.0, 12500.0, 15000.0, 17500.0, 20000.0, 22500.0, 25000.0, 27500.0, 30000.0, 35000.0, 40000.0, 60000.0, 80000.0, 100000.0, 200000.0, 300000.0, 400000.0, 600000.0, 800000.0, 1000000.0, 1100000.0),
    ),
    Family(
        'process_cpu_seconds_total',
        'counter',
        'Total CPU time consumed by this process (user + system)',
        'process',
        ({'component': 'detokenizer'}, {'component': 'tokenizer'}),
    ),
    Family(
        'startup_time_seconds',
        'gauge',
        'Engine startup duration by phase in seconds.',
        'tokenizer',
        ({'phase': 'load_weight'}, {'phase': 'kv_cache_allocation'}, {'phase': 'scheduler_e2e'}, {'phase': 'tokenizer_e2e'}),
    ),
    Family(
        'startup_cuda_graph_time_seconds',
        'gauge',
        'CUDA graph capture duration by phase in seconds.',
        'tokenizer',
        ({'phase': 'prefill'}, {'phase': 'decode'}, {'phase': 'target_verify'}, {'phase': 'draft_prefill'}, {'phase': 'draft_decode'}, {'phase': 'draft_extend'}),
    ),
    Family(
        'http_requests_total',
        'counter',
        'Total number of HTTP requests by endpoint and method',
        'process',
        ({'endpoint': '/health', 'method': 'GET'}, {'endpoint': '/health_generate', 'method': 'GET'}, {'endpoint': '/ready', 'method': 'GET'}, {'endpoint': '/v1/models', 'method': 'GET'}, {'endpoint': '/server_info', 'method': 'GET'}, {'endpoint': '/model_info', 'method': 'GET'}, {'endpoint': '/generate', 'method': 'POST'}, {'endpoint': '/freeze_gc', 'method': 'POST'}, {'endpoint': '/v1/chat/completions', 'method': 'POST'}, {'endpoint': '/v1/completions', 'method': 'POST'}, {'endpoint': '/metrics', 'method': 'GET'}),
    ),
    Family(
        'http_responses_total',
        'counter',
        'Total number of HTTP responses by endpoint and status code',
        'process',
        ({'endpoint': '/health', 'method': 'GET', 'status_code': '503'}, {'endpoint': '/health_generate', 'method': 'GET', 'status_code': '503'}, {'endpoint': '/ready', 'method': 'GET', 'status_code': '503'}, {'endpoint': '/v1/models', 'method': 'GET', 'status_code': '200'}, {'endpoint': '/server_info', 'method': 'GET', 'status_code': '200'}, {'endpoint': '/model_info', 'method': 'GET', 'status_code': '200'}, {'endpoint': '/generate', 'method': 'POST', 'status_code': '200'}, {'endpoint': '/freeze_gc', 'method': 'POST', 'status_code': '200'}, {'endpoint': '/health', 'method': 'GET', 'status_code': '200'}, {'endpoint': '/health_generate', 'method': 'GET', 'status_code': '200'}, {'endpoint': '/ready', 'method': 'GET', 'status_code': '200'}, {'endpoint': '/v1/chat/completions', 'method': 'POST', 'status_code': '200'}, {'endpoint': '/v1/chat/completions', 'method': 'POST', 'status_code': '400'}, {'endpoint': '/generate', 'method': 'POST', 'status_code': '400'}, {'endpoint': '/v1/completions', 'method': 'POST', 'status_code': '200'}),
    ),
    Family(
        'cached_tokens_total',
        'counter',
        'Number of cached prompt tokens by source (device/host/storage).',
        'tokenizer',
        ({'cache_source': 'device'},),
    ),
    Family(
        'routing_keys_active',
        'gauge',
        'Number of unique routing keys with active requests',
        'process',
        ({},),
    ),
    Family(
        'http_requests_active',
        'gauge',
        'Number of currently active HTTP requests',
        'process',
        ({'endpoint': '/health', 'method': 'GET'}, {'endpoint': '/health_generate', 'method': 'GET'}, {'endpoint': '/ready', 'method': 'GET'}, {'endpoint': '/v1/models', 'method': 'GET'}, {'endpoint': '/server_info', 'method': 'GET'}, {'endpoint': '/model_info', 'method': 'GET'}, {'endpoint': '/generate', 'method': 'POST'}, {'endpoint': '/freeze_gc', 'method': 'POST'}, {'endpoint': '/v1/chat/completions', 'method': 'POST'}, {'endpoint': '/v1/completions', 'method': 'POST'}, {'endpoint': '/metrics', 'method': 'GET'}),
    ),
    Family(
        'dp_attention_token_imbalance_ratio',
        'histogram',
        'Per MLP-sync step, max tokens over mean tokens across the DP ranks (1.0 = balanced, num_dp_ranks = one busy rank). Reported once per engine, by the scheduler of DP rank 0.',
        'scheduler',
        ({},),
        (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0),
    ),
    Family(
        'dp_attention_sync_wait_seconds',
        'histogram',
        "Wall time of this DP rank's scheduler MLP-sync all-gather per step. On the gloo path (the default with overlap scheduling) this is waiting for the slowest rank; on the device-group paths it also includes the gather's stream sync.",
        'scheduler',
        ({},),
        (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    ),
    Family(
        'per_stage_req_latency_seconds',
        'histogram',
        'The latency of each stage of requests.',
        'scheduler',
        ({'stage': 'request_process'}, {'stage': 'prefill_forward'}),
        (0.001, 0.0016200000000000001, 0.0026244000000000007, 0.004251528, 0.006887475360000002, 0.011157710083200004, 0.018075490334784006, 0.029282294342350097, 0.047437316834607154, 0.07684845327206359, 0.12449449430074302, 0.20168108076720373, 0.3267233508428701, 0.5292918283654495, 0.8574527619520282, 1.389073474362286, 2.2502990284669036, 3.6454844261163837, 5.905684770308542, 9.567209327899839, 15.49887911119774, 25.10818416014034, 40.67525833942735, 65.89391850987231, 106.74814798599316, 172.93199973730896, 280.1498395744405, 453.84274011059364, 735.2252389791618, 1191.064887146242),
    ),
    Family(
        'queue_time_seconds',
        'histogram',
        'Histogram of queueing time in seconds.',
        'scheduler',
        ({},),
        (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0, 1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0),
    ),
    Family(
        'max_total_num_tokens',
        'gauge',
        'Maximum total number of tokens in the KV cache pool.',
        'scheduler',
        ({},),
    ),
    Family(
        'weight_memory_usage_gb',
        'gauge',
        'Memory used by model weights in GB.',
        'scheduler',
        ({},),
    ),
    Family(
        'kv_cache_memory_usage_gb',
        'gauge',
        'Memory used by the KV cache pools in GB.',
        'scheduler',
        ({},),
    ),
    Family(
        'graph_memory_usage_gb',
        'gauge',
        'Memory used by captured device graphs in GB.',
        'scheduler',
        ({'phase': 'prefill'}, {'phase': 'decode'}, {'phase': 'target_verify'}, {'phase': 'draft_prefill'}, {'phase': 'draft_decode'}, {'phase': 'draft_extend'}),
    ),
    Family(
        'page_size',
        'gauge',
        'KV cache page size in tokens.',
        'scheduler',
        ({},),
    ),
    Family(
        'num_pages',
        'gauge',
        'Number of KV cache pages.',
        'scheduler',
        ({},),
    ),
    Family(
        'context_len',
        'gauge',
        'Maximum context length.',
        'scheduler',
        ({},),
    ),
    Family(
        'startup_available_gpu_memory_gb',
        'gauge',
        'Available GPU memory in GB at startup.',
        'scheduler',
        ({},),
    ),
    Family(
        'decode_sum_seq_lens',
        'gauge',
        'The sum of all sequence lengths in decode.',
        'scheduler',
        ({},),
    ),
    Family(
        'full_token_usage',
        'gauge',
        'The token usage for full attention layers.',
        'scheduler',
        ({},),
    ),
    Family(
        'swa_token_usage',
        'gauge',
        'The token usage for SWA layers.',
        'scheduler',
        ({},),
    ),
    Family(
        'mamba_usage',
        'gauge',
        'The token usage for Mamba layers.',
        'scheduler',
        ({},),
    ),
    Family(
        'kv_evictable_tokens',
        'gauge',
        'Number of evictable (radix-cached) token slots in the KV cache pool.',
        'scheduler',
        ({},),
    ),
    Family(
        'swa_available_tokens',
        'gauge',
        'Number of free token slots in the SWA pool (hybrid-SWA only).',
        'scheduler',
        ({},),
    ),
    Family(
        'swa_evictable_tokens',
        'gauge',
        'Number of evictable (radix-cached) token slots in the SWA pool.',
        'scheduler',
        ({},),
    ),
    Family(
        'swa_used_tokens',
        'gauge',
        'Number of actively used token slots in the SWA pool.',
        'scheduler',
        ({},),
    ),
    Family(
        'mamba_available_tokens',
        'gauge',
        'Number of free state slots in the mamba SSM pool (hybrid-SSM only).',
        'scheduler',
        ({},),
    ),
    Family(
        'mamba_evictable_tokens',
        'gauge',
        'Number of evictable (radix-cached) state slots in the mamba SSM pool.',
        'scheduler',
        ({},),
    ),
    Family(
        'mamba_used_tokens',
        'gauge',
        'Number of actively used state slots in the mamba SSM pool.',
        'scheduler',
        ({},),
    ),
    Family(
        'spec_cap_length',
        'gauge',
        'Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot (0 when no cap is scheduled).',
        'scheduler',
        ({},),
    ),
    Family(
        'spec_block_accept_length',
        'gauge',
        'Mean uncapped full-block accept length per verify step (accept + cap-trimmed drafts; exact only in DSpark cap-accept mode).',
        'scheduler',
        ({},),
    ),
    Family(
        'num_prefill_bootstrap_queue_reqs',
        'gauge',
        'The number of requests in the prefill bootstrap queue.',
        'scheduler',
        ({},),
    ),
    Family(
        'num_prefill_inflight_queue_reqs',
        'gauge',
        'The number of requests in the prefill inflight queue.',
        'scheduler',
        ({},),
    ),
    Family(
        'num_decode_prealloc_queue_reqs',
        'gauge',
        'The number of requests in the decode prealloc queue.',
        'scheduler',
        ({},),
    ),
    Family(
        'num_decode_transfer_queue_reqs',
        'gauge',
        'The number of requests in the decode transfer queue.',
        'scheduler',
        ({},),
    ),
    Family(
        'num_decode_host_receive_queue_reqs',
        'gauge',
        'Requests in the decode transfer queue receiving into host memory or waiting for device admission.',
        'scheduler',
        ({},),
    ),
    Family(
        'num_decode_deferred_kv_release_reqs',
        'gauge',
        'The number of failed decode requests whose KV allocations are held pending transfer drain acknowledgement or timeout.',
        'scheduler',
        ({},),
    ),
    Family(
        'pending_prealloc_token_usage',
        'gauge',
        'The token usage for pending preallocated tokens (not preallocated yet).',
        'scheduler',
        ({},),
    ),
    Family(
        'prealloc_full_token_usage',
        'gauge',
        'Share of the full-attention KV pool held by decode requests whose KV transfer is pending (preallocated, not yet running); same capacity basis as sglang:full_token_usage.',
        'scheduler',
        ({},),
    ),
    Family(
        'prealloc_swa_token_usage',
        'gauge',
        'Share of the SWA KV pool held by decode requests whose KV transfer is pending; same capacity basis as sglang:swa_token_usage.',
        'scheduler',
        ({},),
    ),
    Family(
        'fwd_occupancy',
        'gauge',
        'Forward pass GPU occupancy percentage.',
        'scheduler',
        ({},),
    ),
    Family(
        'new_token_ratio',
        'gauge',
        'The new token ratio.',
        'scheduler',
        ({},),
    ),
    Family(
        'num_unique_running_routing_keys',
        'gauge',
        'Number of unique routing keys in running batch.',
        'scheduler',
        ({},),
    ),
    Family(
        'routing_key_running_req_count',
        'gauge',
        'Distribution of routing keys by running request count (gt < count <= le).',
        'scheduler',
        ({'gt': '0', 'le': '1'}, {'gt': '1', 'le': '2'}, {'gt': '2', 'le': '3'}, {'gt': '3', 'le': '5'}, {'gt': '5', 'le': '7'}, {'gt': '7', 'le': '10'}, {'gt': '10', 'le': '20'}, {'gt': '20', 'le': '50'}, {'gt': '50', 'le': '100'}, {'gt': '100', 'le': '200'}, {'gt': '200', 'le': '+Inf'}),
    ),
    Family(
        'routing_key_all_req_count',
        'gauge',
        'Distribution of routing keys by running+waiting request count (gt < count <= le).',
        'scheduler',
        ({'gt': '0', 'le': '1'}, {'gt': '1', 'le': '2'}, {'gt': '2', 'le': '3'}, {'gt': '3', 'le': '5'}, {'gt': '5', 'le': '7'}, {'gt': '7', 'le': '10'}, {'gt': '10', 'le': '20'}, {'gt': '20', 'le': '50'}, {'gt': '50', 'le': '100'}, {'gt': '100', 'le': '200'}, {'gt': '200', 'le': '+Inf'}),
    ),
)  # fmt: skip
