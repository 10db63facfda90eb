"""Errors: one class per protocol error code (shm/PROTOCOL.md section 9.2) and terminal status.

Every error a request can end with is an ``Error``; a ``_batch`` call returns an instance in
the failed item's place instead of raising it.
"""

__all__ = [
    "Error", "InvalidError", "TokenError", "TooLongError", "AgainError", "ShutdownError",
    "DisconnectedError", "TimeoutError", "ProtocolError", "VersionError", "BusyError",
    "BackendError", "CancelledError", "EmptyError", "KVSpaceError", "UnsupportedError",
    "DeadlineError", "error_for",
]


class Error(Exception):
    """A bitnetd error. ``code`` is the protocol's number (e.g. 1003), ``name`` its name."""

    code = 0
    name = "ERROR"

    def __init__(self, message=None):
        super().__init__(message or "%s (%d)" % (self.name, self.code))


def _make(name, code, doc):
    return type(name, (Error,), {"code": code, "name": name.replace("Error", "").upper() or name,
                                 "__doc__": doc})


InvalidError = _make("InvalidError", 1001, "A request or call parameter is out of range.")
TokenError = _make("TokenError", 1002, "A token id is >= the vocabulary size.")
TooLongError = _make("TooLongError", 1003, "A prompt exceeds a capacity or the context.")
AgainError = _make("AgainError", 1004, "No free slot now: try again.")
ShutdownError = _make("ShutdownError", 1005, "The daemon is shutting down.")
DisconnectedError = _make("DisconnectedError", 1006, "The daemon is gone.")
TimeoutError = _make("TimeoutError", 1007, "The wait's timeout expired.")
ProtocolError = _make("ProtocolError", 1008, "The peer broke the protocol.")
VersionError = _make("VersionError", 1009, "ABI version mismatch.")
BusyError = _make("BusyError", 1010, "The daemon has no room for this connection.")
BackendError = _make("BackendError", 1011, "The backend failed on this request.")
CancelledError = _make("CancelledError", 1012, "The request was cancelled.")
EmptyError = _make("EmptyError", 1014, "The request has no prompt tokens.")
KVSpaceError = _make("KVSpaceError", 1015, "The request needs more KV cache than the daemon has.")
UnsupportedError = _make("UnsupportedError", 1016, "The daemon does not offer this request.")
DeadlineError = _make("DeadlineError", 0, "The request's deadline passed (status DEADLINE).")

_BY_CODE = {c.code: c for c in (InvalidError, TokenError, TooLongError, AgainError, ShutdownError,
                                 DisconnectedError, TimeoutError, ProtocolError, VersionError,
                                 BusyError, BackendError, CancelledError, EmptyError, KVSpaceError,
                                 UnsupportedError)}


def error_for(code, message=None):
    """The Error instance for a protocol error code."""
    cls = _BY_CODE.get(code)
    if cls is None:
        err = Error(message or "error %d" % code)
        err.code = code
        return err
    return cls(message)
