"""opd.mp: multiprocessing helpers: a per-process client and Pool set-up.

DESIGN
Workers need one connection each, made in the worker (a connection is
never shared across fork) and made once (not per task). client() returns
the process's default Client, created on first call with the socket that
pool_initializer (or set_default_socket) chose, else $OPD_SOCKET; after
fork() the same object reconnects in the child on first use. Tensors
travel to workers as small pickled references (see tensor.py), so the
usual pattern is:

    with opd.connect(sock) as c, multiprocessing.Pool(
            4, initializer=opd.pool_initializer, initargs=(sock,)) as pool:
        x = c.from_numpy(batch)            # filled once, in shared memory
        y = c.empty_like(x)                # the workers write here
        pool.starmap(work, [(x[i:i+k], y[i:i+k]) for i in range(0, n, k)])

    def work(x, y):                        # runs in a worker
        opd.client().softmax(x, out=y)     # zero copy both ways

It works the same under the fork, spawn and forkserver start methods.
"""
import os
import threading

from . import tensor
from .client import Client

_default = None
_default_socket = None
_lock = threading.Lock()


def set_default_socket(socket):
    """Sets the socket client() connects to in this process (None: the
    default). Closes an existing default client. Returns None."""
    global _default, _default_socket
    with _lock:
        _default_socket = socket
        old, _default = _default, None
    if old is not None:
        old.close()


def client():
    """Returns this process's default Client (connected lazily, reconnected
    after fork). Raises OpdConnectionError when first used if no daemon
    answers."""
    global _default
    c = _default
    if c is None:
        with _lock:
            if _default is None:
                _default = Client(_default_socket, connect=False)
            c = _default
    return c


def pool_initializer(socket=None):
    """multiprocessing.Pool initializer: makes the worker's default client
    (opd.client()) connect to `socket` and connects it, so a missing daemon
    fails at start-up rather than in the first task. Returns None."""
    set_default_socket(socket)
    client()._handle()


tensor.set_default_client(client)   # copies of tensors no client owns


def _after_fork():
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)
