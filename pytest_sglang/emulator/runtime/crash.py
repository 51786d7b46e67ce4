"""How a real SGLang server dies of a token id outside the model's vocabulary.

SGLang 0.5.23 does not check ``input_ids`` (native ``/generate``) or token-id prompts
(``/v1/completions``) against the vocabulary. An id ``>= vocab_size`` (or negative) reaches the
embedding lookup in the scheduler, which raises ``IndexError: index out of range in self``;
the scheduler process dies, the main process receives SIGQUIT ("Received sigquit from a child
process. It usually means the child failed."), kills its process tree and itself (exit status
-9) a few seconds later. Seen measured on the real-SGLang tier with a 1024-token vocabulary
(``real_sglang/README.md``, ``tests/real/test_vocabulary.py``).

What the client sees, and what the emulator therefore does:

- a non-streamed request gets **no response**: its connection is closed when the process
  dies;
- a streamed request gets ``200`` and the ``text/event-stream`` headers (SGLang returns the
  streaming response before the scheduler reads the prompt), then **no event** and the
  connection closes when the process dies;
- every other request in flight is cut the same way, and the server is gone (exit -9).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from pytest_sglang.emulator.runtime.context import EmulatorContext
from pytest_sglang.emulator.runtime.logs import scheduler_logger
from pytest_sglang.emulator.runtime.signals import kill_self

#: Seconds from the bad request to the process's death (about 5 s on the 2-core tier machine,
#: most of it SGLang killing its process tree; shorter here, the shape is what matters).
EXIT_DELAY = 2.0


def out_of_vocabulary(ctx: EmulatorContext, prompts: Iterable[Sequence[int]]) -> int | None:
    """Return the first id of ``prompts`` without an embedding row, or ``None``."""
    for ids in prompts:
        for token_id in ids:
            if not ctx.tokenizer.in_vocabulary(token_id):
                return token_id
    return None


async def die_of_unknown_token(ctx: EmulatorContext, token_id: int) -> None:
    """Crash as SGLang's scheduler does on ``token_id``; never returns (the process dies)."""
    scheduler_logger().error(
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "sglang/srt/layers/vocab_parallel_embedding.py", in forward\n'
        "    output_parallel = self.quant_method.embedding(self, masked_input.long())\n"
        "IndexError: index out of range in self\n"
        "(emulated: token id %d is outside the model's vocabulary of %d)",
        token_id,
        ctx.tokenizer.vocab_size,
    )
    ctx.log.error("Received sigquit from a child process. It usually means the child failed.")
    ctx.state.shutting_down = True
    asyncio.get_running_loop().call_later(EXIT_DELAY, kill_self)
    await asyncio.Event().wait()
