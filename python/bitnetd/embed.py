"""Embeddings (shm/PROTOCOL.md section 6.14): the request a Client sends for one input and the
Embedding it makes of the daemon's answer, with Matryoshka truncation where the model allows it.
"""

import math
import struct
from typing import List, Optional

from . import _wire as w
from . import errors

__all__ = ["Embedding", "truncate"]


class Embedding:
    """One input's embedding: ``vector``, a list of floats of unit length (the final norm's
    output at the input's positions, pooled as ``pooling`` says: "mean", "cls" or "last", then
    divided by its L2 norm); ``n_tokens``, the input's length in tokens; ``trained``, whether
    the model was trained to embed (its file names the pooling; False for a generative model
    pooled by bitnetd --pooling); ``dim``, the vector's length (the model's, or the
    ``dimensions`` asked for)."""

    __slots__ = ("vector", "n_tokens", "pooling", "trained")

    def __init__(self, vector, n_tokens, pooling, trained):
        self.vector, self.n_tokens, self.pooling, self.trained = vector, n_tokens, pooling, \
            trained

    @property
    def dim(self) -> int:
        return len(self.vector)

    def __repr__(self):
        return "Embedding(dim=%d, n_tokens=%d, pooling=%r)" % (self.dim, self.n_tokens,
                                                               self.pooling)


def truncate(vector: List[float], dimensions: int) -> List[float]:
    """The first ``dimensions`` numbers of a unit vector, divided again by their L2 norm (in
    binary64, summed in order, then rounded to binary32 as the daemon's vector is): what
    Matryoshka-trained models are used with, and what OpenAI's ``dimensions`` does."""
    head = vector[:dimensions]
    norm = 0.0
    for x in head:
        norm += x * x
    norm = math.sqrt(norm)
    if norm == 0.0:
        return list(head)
    return [_f32(x / norm) for x in head]


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check_dimensions(dimensions):
    """None, or an Error for a ``dimensions`` that cannot be one."""
    if dimensions is None:
        return None
    if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
        return errors.InvalidError("dimensions must be a positive integer, not %r" % (dimensions,))
    return None


def embedding(res, dimensions: Optional[int] = None):
    """The Embedding of a DONE slot's response (section 6.14), cut to ``dimensions`` when
    given: a model trained to embed may be cut (its vector normalised again); a generative
    model pooled by --pooling may not (an InvalidError), nor may a vector be made longer."""
    words = res["tokens"]
    if not words or len(words) != res["n_tokens"]:
        return errors.ProtocolError("an embedding of %d words" % res["n_tokens"])
    vector = list(struct.unpack("<%df" % len(words), struct.pack("<%dI" % len(words), *words)))
    info = res["embed_pooling"]
    out = Embedding(vector, res["prompt_tokens"], w.POOLINGS.get(info & 0xFF, "unknown"),
                    bool(info & w.EMBED_TRAINED))
    if dimensions is None or dimensions == len(vector):
        return out
    if dimensions > len(vector):
        return errors.InvalidError("dimensions %d is more than the model's %d" %
                                   (dimensions, len(vector)))
    if not out.trained:
        return errors.InvalidError(
            "dimensions %d: this model was not trained to embed (bitnetd pools a generative "
            "model by --pooling), so its vectors cannot be cut short; ask for %d or leave "
            "dimensions out" % (dimensions, len(vector)))
    out.vector = truncate(vector, dimensions)
    return out
