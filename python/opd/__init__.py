"""opd: Python client of the opd operator daemon (ctypes over libopd).

DESIGN
Standard library only; numpy and torch are used when present. The
package is a thin layer over libopd's C ABI (_lib.py), one concern a
module: errors.py (OpdError hierarchy), memory.py (shared-memory arenas
and the allocator), tensor.py (Tensor: views, numpy, DLPack, pickling as
a shared reference), client.py (the connection and the public API:
Client, Prepared, Request, connect), with Client's mixins _runner.py
(argument conversion, caches, the run memo), _torch.py (torch interop),
_arenas.py (the arenas a connection registers), _ops.py (generated
operator methods), _publish.py (publish/attach) and _graph.py /
_graphrun.py (Client.graph: graphs built, defined once, run as one
request; dynamo.py is their torch.compile backend); mp.py adds the
per-process client and Pool helpers. See docs/python.md, "Package
layout".

    import opd, numpy as np
    with opd.connect() as c:
        x = c.from_numpy(np.random.rand(8, 1024).astype(np.float32))
        y = c.softmax(x)
        print(y.numpy().sum(axis=-1))

On a GPU daemon, c.empty(shape, dtype, device="cuda"), t.to("cuda"),
t.cpu(), torch CUDA tensors as inputs and outputs, c.publish / c.attach:
see docs/python.md, "GPU".
"""
from . import protocol
from ._lib import LibraryNotFoundError
from ._graph import Graph, Value
from .client import Client, Request, connect, socket_path
from .errors import (BackendError, BadArgumentError, LimitError,
                     OpdConnectionError, OpdError, OpdPermissionError,
                     OpdTimeoutError, ProtocolError)
from .memory import forget_shared
from .mp import client, pool_initializer, set_default_socket
from .tensor import (Tensor, device_name, dtype_name, from_reference,
                     share_reference)

__version__ = "0.1.0"
DTYPES = tuple(n for n, _, _ in protocol.DTYPES)


def lib_version():
    """Returns libopd's version string (loads the library)."""
    from . import _lib
    return _lib.load().opd_version().decode()


def lib_path():
    """Returns the path libopd was loaded from (loads it)."""
    from . import _lib
    _lib.load()
    return _lib.path


__all__ = ["Client", "Request", "Tensor", "Graph", "Value", "connect", "client",
           "pool_initializer", "set_default_socket", "socket_path",
           "share_reference", "from_reference", "forget_shared",
           "dtype_name", "device_name", "lib_version", "lib_path", "DTYPES",
           "OpdError", "BadArgumentError", "OpdConnectionError",
           "ProtocolError", "LimitError", "OpdTimeoutError", "BackendError",
           "OpdPermissionError", "LibraryNotFoundError"]
