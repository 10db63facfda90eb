"""Models by name (shm/PROTOCOL.md section 15): the MODELS lines as ModelStatus, and the load,
unload and reload commands, on a session's socket."""

from typing import List, Optional

from . import _wire as w
from . import errors

__all__ = ["ModelStatus"]

_INTS = ("bytes", "weight_bytes", "kv_bytes", "idle_since_ms", "waiting", "running", "context",
         "vocab_size", "loads", "keep_alive_ms")


class ModelStatus:
    """One model as the daemon reports it: ``name``, ``state`` ("unloaded", "loading",
    "loaded", "unloading", "failed"), ``default``, ``pinned``, ``bytes`` (``weight_bytes`` +
    ``kv_bytes``: what the memory budget counts), ``idle_since_ms`` (loaded and idle: since
    when, ms since the epoch; else 0), ``waiting``, ``running``, ``context``, ``vocab_size``,
    ``loads``, ``keep_alive_ms`` (-1: never) and ``error`` (why it failed, else "")."""

    def __init__(self, fields):
        self.name = fields.get("name", "")
        self.state = fields.get("state", "unknown")
        self.default = fields.get("default") == "1"
        self.pinned = fields.get("pinned") == "1"
        for key in _INTS:
            setattr(self, key, int(fields.get(key, "-1" if key == "keep_alive_ms" else "0")))
        self.error = fields.get("error", "")

    def __repr__(self):
        return "ModelStatus(name=%r, state=%r, bytes=%d)" % (self.name, self.state, self.bytes)


def parse_line(line):
    """A MODELS line (section 15.3): space-separated key=value fields, ``error`` last and to
    the end of the line; keys this package does not know are kept too."""
    fields, rest = {}, line
    while rest:
        key, eq, value = rest.partition("=")
        if not eq:
            break
        if key == "error":
            fields[key] = value
            break
        value, _, rest = value.partition(" ")
        fields[key] = value
    return ModelStatus(fields)


def parse(payload) -> List[ModelStatus]:
    return [parse_line(line) for line in payload.decode("utf-8", "replace").split("\n") if line]


def _require(seg):
    if not seg.features & w.FEAT_MODELS:
        raise errors.UnsupportedError("the daemon serves no models by name")


def models(seg) -> List[ModelStatus]:
    _require(seg)
    return parse(seg.control(w.CTL_MODELS))


def command(seg, op, name: Optional[str]):
    """A model command (section 15.4): the model's status when it is done; ModelLoadError
    (with the status in ``.status``) when the model ended up failed."""
    _require(seg)
    magic, rop, err, payload = seg.control_raw(op, extra=w.model_name_record(name))
    if magic != w.CTL_REPLY_MAGIC or rop != op:
        raise errors.ProtocolError("bad control reply")
    lines = parse(payload)
    if err:
        e = errors.error_for(err, lines[0].error if lines and lines[0].error else None)
        e.status = lines[0] if lines else None
        raise e
    return lines
