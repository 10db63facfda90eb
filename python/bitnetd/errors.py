"""Errors: one class per protocol error code (shm/PROTOCOL.md section 9.2) and terminal status.

Every error a request can end with is an ``Error``; a ``_batch`` call returns an instance in
the failed item's place instead of raising it.
"""

# The codes on the wire (section 9.2).
E_INVALID, E_TOKEN, E_TOO_LONG, E_AGAIN, E_SHUTDOWN, E_DISCONNECTED = range(1001, 1007)
E_TIMEOUT, E_PROTOCOL, E_VERSION, E_BUSY, E_BACKEND, E_CANCELLED = range(1007, 1013)
E_NOT_DONE, E_EMPTY, E_KV_SPACE, E_UNSUPPORTED = range(1013, 1017)
E_GRAMMAR, E_GRAMMAR_LIMIT, E_GRAMMAR_STUCK = range(1017, 1020)
E_MODEL_NOT_FOUND, E_MODEL_LOAD, E_MODEL_UNLOADED, E_DENIED = range(1020, 1024)

__all__ = [
    "Error", "InvalidError", "TokenError", "TooLongError", "AgainError", "ShutdownError",
    "DisconnectedError", "TimeoutError", "ProtocolError", "VersionError", "BusyError",
    "BackendError", "CancelledError", "EmptyError", "KVSpaceError", "UnsupportedError",
    "GrammarError", "GrammarLimitError", "GrammarStuckError", "ModelNotFoundError",
    "ModelLoadError", "ModelUnloadedError", "DeniedError", "DeadlineError", "error_for",
]


class Error(Exception):
    """A bitnetd error. ``code`` is the protocol's number (e.g. 1003), ``name`` its name."""

    code = 0
    name = "ERROR"

    def __init__(self, message=None):
        super().__init__(message or "%s (%d)" % (self.name, self.code))


def _make(name, code, doc, wire_name=None):
    return type(name, (Error,), {"code": code, "__doc__": doc,
                                 "name": wire_name or name.replace("Error", "").upper()})


InvalidError = _make("InvalidError", E_INVALID, "A request or call parameter is out of range.")
TokenError = _make("TokenError", E_TOKEN, "A token id is >= the vocabulary size.")
TooLongError = _make("TooLongError", E_TOO_LONG, "A prompt exceeds a capacity or the context.",
                     "TOO_LONG")
AgainError = _make("AgainError", E_AGAIN, "No free slot now: try again.")
ShutdownError = _make("ShutdownError", E_SHUTDOWN, "The daemon is shutting down.")
DisconnectedError = _make("DisconnectedError", E_DISCONNECTED, "The daemon is gone.")
TimeoutError = _make("TimeoutError", E_TIMEOUT, "The wait's timeout expired.")
ProtocolError = _make("ProtocolError", E_PROTOCOL, "The peer broke the protocol.")
VersionError = _make("VersionError", E_VERSION, "ABI version mismatch.")
BusyError = _make("BusyError", E_BUSY, "The daemon has no room for this connection.")
BackendError = _make("BackendError", E_BACKEND, "The backend failed on this request.")
CancelledError = _make("CancelledError", E_CANCELLED, "The request was cancelled.")
EmptyError = _make("EmptyError", E_EMPTY, "The request has no prompt tokens (or, to classify, no "
                   "prefix, no label, or a label of no token).")
KVSpaceError = _make("KVSpaceError", E_KV_SPACE,
                     "The request needs more KV cache than the daemon has.", "KV_SPACE")
UnsupportedError = _make("UnsupportedError", E_UNSUPPORTED,
                         "The daemon does not offer this request.")
GrammarError = _make("GrammarError", E_GRAMMAR,
                     "The grammar is not valid, or asks for what cannot be enforced (the message "
                     "is the daemon's: what and where).")
GrammarLimitError = _make("GrammarLimitError", E_GRAMMAR_LIMIT,
                          "The grammar is over a limit: size, nesting, rules, states, a "
                          "repetition, compile time (the message names it).", "GRAMMAR_LIMIT")
GrammarStuckError = _make("GrammarStuckError", E_GRAMMAR_STUCK,
                          "No token of the vocabulary continues the output inside the grammar.",
                          "GRAMMAR_STUCK")
ModelNotFoundError = _make("ModelNotFoundError", E_MODEL_NOT_FOUND,
                           "The daemon serves no model of that name (section 15).",
                           "MODEL_NOT_FOUND")
ModelLoadError = _make("ModelLoadError", E_MODEL_LOAD,
                       "The request's model could not be loaded: its file failed, it changed "
                       "without a reload, or it does not fit the daemon's memory budget.",
                       "MODEL_LOAD")
ModelUnloadedError = _make("ModelUnloadedError", E_MODEL_UNLOADED,
                           "The request's model was unloaded before the request ended.",
                           "MODEL_UNLOADED")
DeniedError = _make("DeniedError", E_DENIED,
                    "Only root or the daemon's user may load, unload or reload models.")
DeadlineError = _make("DeadlineError", 0, "The request's deadline passed (status DEADLINE).")

_BY_CODE = {c.code: c for c in (InvalidError, TokenError, TooLongError, AgainError, ShutdownError,
                                 DisconnectedError, TimeoutError, ProtocolError, VersionError,
                                 BusyError, BackendError, CancelledError, EmptyError, KVSpaceError,
                                 UnsupportedError, GrammarError, GrammarLimitError,
                                 GrammarStuckError, ModelNotFoundError, ModelLoadError,
                                 ModelUnloadedError, DeniedError)}


def error_for(code, message=None):
    """The Error instance for a protocol error code."""
    cls = _BY_CODE.get(code)
    if cls is None:
        err = Error(message or "error %d" % code)
        err.code = code
        return err
    return cls(message)
