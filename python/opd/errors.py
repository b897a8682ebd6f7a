"""opd.errors: the exception hierarchy and the code -> class table.

DESIGN
Every libopd call returns 0 or a negative OPD_E* code; check() turns a
code into an exception carrying the code, its name and the message of the
failed call (opd_last_error(), the daemon's own words for a rejected
request). Codes are grouped by what a caller does about them, one class
per group, all under OpdError:

    OpdError                      .code (int), .name ("EDTYPE"), .message
      BadArgumentError (ValueError)    the request was wrong: EINVAL ENOOP
                                       EARITY EDTYPE ESHAPE ELAYOUT EBOUNDS
                                       EOVERFLOW EARENA EFD EATTR EALIAS
                                       EREADONLY ENOENT
      OpdConnectionError (ConnectionError)  no usable connection: ECONNECT
                                       ECLOSED ESHUTDOWN EIO
      ProtocolError                    client/daemon disagree: EPROTO
                                       EVERSION ESTATE ETOOBIG
      LimitError                       a limit or memory ran out: ELIMIT
                                       ENOMEM
      OpdTimeoutError (TimeoutError)   ETIMEDOUT
      BackendError                     EDEVICE EBACKEND EINTERNAL
      OpdPermissionError (PermissionError)  EPERM: the daemon refused this
                                       user, or the socket is served by a
                                       user the client does not trust

Exceptions pickle (code and message survive), so an error raised in a
Pool worker reaches the parent intact.
"""
from . import protocol


class OpdError(Exception):
    """Base of every opd error: .code (negative int), .name ("EDTYPE"),
    .message (the daemon's or libopd's message)."""

    def __init__(self, code, message=None):
        self.code = code
        self.name = protocol.ERROR_NAMES.get(code, "E?")
        self.message = message or protocol.ERROR_MESSAGES.get(code, "error %d" % code)
        Exception.__init__(self, self.message)

    def __str__(self):
        return "%s (%s)" % (self.message, self.name)

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class BadArgumentError(OpdError, ValueError):
    """The request itself was wrong: operator, arity, dtype, shape, layout,
    bounds, arena, attribute or aliasing."""


class OpdConnectionError(OpdError, ConnectionError):
    """No usable connection: the daemon is not running, went away, or is
    shutting down."""

    def __init__(self, code, message=None):
        OpdError.__init__(self, code, message)

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class ProtocolError(OpdError):
    """The client and the daemon disagree about the protocol or the state."""


class LimitError(OpdError):
    """A daemon limit (arenas, tensors, bytes) or memory ran out."""


class OpdTimeoutError(OpdError, TimeoutError):
    """A wait timed out; the request is still pending."""

    def __init__(self, code, message=None):
        OpdError.__init__(self, code, message)

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class BackendError(OpdError):
    """The device or backend failed, or the daemon hit an internal error."""


class OpdPermissionError(OpdError, PermissionError):
    """Who may talk to whom: the daemon does not serve this user (or may not
    let it read a name), or libopd does not trust the socket's owner."""

    def __init__(self, code, message=None):
        OpdError.__init__(self, code, message)

    def __reduce__(self):
        return (type(self), (self.code, self.message))


_GROUPS = {
    BadArgumentError: ("EINVAL", "ENOOP", "EARITY", "EDTYPE", "ESHAPE",
                       "ELAYOUT", "EBOUNDS", "EOVERFLOW", "EARENA", "EFD",
                       "EATTR", "EALIAS", "EREADONLY", "ENOENT"),
    OpdConnectionError: ("ECONNECT", "ECLOSED", "ESHUTDOWN", "EIO"),
    ProtocolError: ("EPROTO", "EVERSION", "ESTATE", "ETOOBIG"),
    LimitError: ("ELIMIT", "ENOMEM"),
    OpdTimeoutError: ("ETIMEDOUT",),
    BackendError: ("EDEVICE", "EBACKEND", "EINTERNAL"),
    OpdPermissionError: ("EPERM",),
}

#: code -> exception class, for every code of protocol.ERRORS
ERROR_CLASSES = {protocol.ERROR_CODES[n]: cls
                 for cls, names in _GROUPS.items() for n in names}


def error(code, message=None):
    """Returns (does not raise) the exception for a negative code."""
    return ERROR_CLASSES.get(code, OpdError)(code, message)


def check(rc):
    """Returns rc if it is >= 0; else raises the matching OpdError with
    opd_last_error() as its message (read on this thread, right away)."""
    if rc >= 0:
        return rc
    from . import _lib
    msg = _lib._lib.opd_last_error()
    raise error(rc, msg.decode(errors="replace") if msg else None)
