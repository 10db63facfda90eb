"""bitnetd: a client for the bitnetd inference daemon, in Python's standard library only.

    import bitnetd
    with bitnetd.Client() as c:
        print(c.generate("Once upon a time", max_tokens=32).text)

It speaks the daemon's shared-memory protocol (shm/PROTOCOL.md) itself: no compiled part.
"""

from .aio import AsyncClient
from .client import (Classification, Client, Embedding, Generation, Grammar, LabelScore, Piece,
                     Score, TokenLogprob)
from .pipeline import pipeline
from .errors import *  # noqa: F401,F403 (the Error classes)
from .errors import __all__ as _errors_all

__version__ = "0.1.0"
__all__ = ["AsyncClient", "Classification", "Client", "Embedding", "Generation", "Grammar",
           "LabelScore", "Piece", "Score", "TokenLogprob", "pipeline"] + list(_errors_all)
