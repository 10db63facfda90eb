"""AsyncClient: the Client's calls for asyncio, each run on a thread pool (a completion comes
through a futex in shared memory, which an event loop cannot watch).
"""

from typing import Any, Dict, List, Optional, Sequence, Union

from . import errors
from .client import Classification, Client, Embedding, Generation, Grammar, Label, Message, \
    Prompt, Score

__all__ = ["AsyncClient"]


class AsyncClient:
    """The Client's methods for asyncio: each call runs the blocking one on a thread pool of
    at most ``slots`` threads (the session's slots bound what can be in flight anyway), so the
    event loop never blocks on a futex. Same arguments and results as Client; ``stream``
    is an async iterator. Use ``async with`` or ``await close()``.
    """

    def __init__(self, socket: Optional[str] = None, timeout: Optional[float] = None,
                 slots: int = 0):
        import concurrent.futures

        self._client = Client(socket, timeout, slots)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self._client.info()["slots"], thread_name_prefix="bitnetd")

    async def _call(self, fn, *args, **kwargs):
        import asyncio
        import functools

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._client.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    def info(self) -> Dict[str, Any]:
        return self._client.info()

    async def generate(self, prompt: Prompt, **kwargs) -> Generation:
        return await self._call(self._client.generate, prompt, **kwargs)

    async def generate_batch(self, prompts: Sequence[Prompt],
                             **kwargs) -> List[Union[Generation, errors.Error]]:
        return await self._call(self._client.generate_batch, prompts, **kwargs)

    async def grammar(self, **kwargs) -> Grammar:
        return await self._call(self._client.grammar, **kwargs)

    async def chat(self, messages: Sequence[Message], **kwargs) -> Generation:
        return await self._call(self._client.chat, messages, **kwargs)

    async def chat_batch(self, conversations: Sequence[Sequence[Message]],
                         **kwargs) -> List[Union[Generation, errors.Error]]:
        return await self._call(self._client.chat_batch, conversations, **kwargs)

    async def score(self, text: Prompt, **kwargs) -> Score:
        return await self._call(self._client.score, text, **kwargs)

    async def score_batch(self, texts: Sequence[Prompt],
                          **kwargs) -> List[Union[Score, errors.Error]]:
        return await self._call(self._client.score_batch, texts, **kwargs)

    async def classify(self, text: Prompt, labels: Sequence[Label],
                       **kwargs) -> Classification:
        return await self._call(self._client.classify, text, labels, **kwargs)

    async def classify_batch(self, items: Sequence[Any],
                             **kwargs) -> List[Union[Classification, errors.Error]]:
        return await self._call(self._client.classify_batch, items, **kwargs)

    async def embed(self, input: Prompt, **kwargs) -> Embedding:
        return await self._call(self._client.embed, input, **kwargs)

    async def embed_batch(self, inputs: Sequence[Prompt],
                          **kwargs) -> List[Union[Embedding, errors.Error]]:
        return await self._call(self._client.embed_batch, inputs, **kwargs)

    async def tokenize(self, text: Union[str, bytes], **kwargs) -> List[int]:
        return await self._call(self._client.tokenize, text, **kwargs)

    async def detokenize(self, ids: Sequence[int], **kwargs) -> str:
        return await self._call(self._client.detokenize, ids, **kwargs)

    async def stats(self) -> str:
        return await self._call(self._client.stats)

    async def stream(self, prompt: Prompt, **kwargs):
        """Yields Pieces as they arrive. Closing the iterator cancels the request: leave a loop
        early inside ``contextlib.aclosing(...)`` to cancel at once (otherwise it is closed
        when asyncio finalizes it)."""
        it = self._client.stream(prompt, **kwargs)
        done = object()
        try:
            while True:
                piece = await self._call(next, it, done)
                if piece is done:
                    return
                yield piece
        finally:
            await self._call(it.close)
