"""opd.dask: opd under Dask: one daemon per node, weights published once
per node, operators mapped over dask arrays.

DESIGN
Dask schedules, opd computes. Each node (a host: its workers share its
shared memory) runs one opd daemon; OpdWorker, a WorkerPlugin, gives
each worker a Node: its node's name, its daemon's socket and one opd
Client, made lazily and again after the daemon went away (the old one
is closed, its caches dropped). Every failure to reach the daemon is a
NodeError naming the node, the socket and the worker, so a task that
failed says where. OpdDaemon (_daskd.py) starts a daemon per node for
users without an init system.

publish(client, name, array) sends the array to one worker per node,
the node's keeper, which publishes it on its daemon as "name@vN" (N
grows with each publish of `name`) and keeps its copy; the scheduler's
metadata ("opd.dask", name) records the version and the keepers. A
publish that fails on any node withdraws the copies the others took and
raises PublishError naming the failed nodes; the previous version stays
current. A keeper that reconnects (its daemon restarted) publishes what
it keeps again; restore(client) makes every keeper check now. Workers
attach on their own node (attach(), cached per connection).

map_blocks(op, *arrays, ...) is dask.array.map_blocks with a block
function that runs `op` (an operator name, or fn(c, *tensors, **kw))
through the worker's Node, with Published handles in the arguments
attached on the node; map_partitions does the same for a dataframe's
numeric columns. dask.py owns the worker-side Node (one
per worker, held by its plugin) and the driver-side calls; _daskd.py the
daemon processes.
"""
import socket as socketlib
import threading

import numpy as np
from distributed import WorkerPlugin, get_worker
from distributed.diagnostics.plugin import NannyPlugin

from . import _daskd, errors, protocol
from .client import Client, socket_path
from .tensor import Tensor

NAME = "opd"                    # the WorkerPlugin's name on each worker
_META = "opd.dask"              # scheduler metadata: (_META, name) -> record


class NodeError(errors.OpdConnectionError):
    """A worker could not use its node's daemon: .node, .socket, .worker."""

    def __init__(self, code, message=None, node=None, socket=None, worker=None):
        errors.OpdConnectionError.__init__(self, code, message)
        self.node, self.socket, self.worker = node, socket, worker

    def __reduce__(self):
        return (type(self), (self.code, self.message, self.node, self.socket,
                             self.worker))


class PublishError(errors.OpdError):
    """A publish that did not reach every node: .failed {node: reason};
    the copies it made elsewhere were withdrawn."""

    def __init__(self, code, message=None, failed=None):
        errors.OpdError.__init__(self, code, message)
        self.failed = dict(failed or {})

    def __reduce__(self):
        return (type(self), (self.code, self.message, self.failed))


class Node:
    """One worker's view of its node: name, socket, the opd Client, the
    per-connection caches and the publications this worker keeps."""

    def __init__(self, node, socket, worker, wait=None):
        self.node, self.socket, self.worker, self.wait = node, socket, worker, wait
        self._c = None
        self.generation = 0          # connections made so far
        self.cache = {}              # per connection: attachments, graphs
        self.kept = {}               # versioned name -> Tensor (keeper only)
        self._lock = threading.RLock()

    def error(self, cause):
        """The NodeError for `cause` (an exception), naming this node."""
        code = getattr(cause, "code", protocol.ERROR_CODES["ECONNECT"])
        return NodeError(code, "opd daemon of node %s (socket %s, worker %s): %s"
                         % (self.node, self.socket, self.worker, cause),
                         self.node, self.socket, self.worker)

    def client(self):
        """The worker's Client of its node's daemon (connects when needed,
        publishing again what this worker keeps). Raises NodeError."""
        c = self._c
        if c is not None:
            return c
        with self._lock:
            if self._c is None:
                try:
                    c = Client(self.socket, wait=self.wait)
                except errors.OpdError as e:
                    raise self.error(e) from None
                self.generation += 1
                self.cache = {}
                self._c = c
                try:
                    for vname, t in self.kept.items():
                        self.kept[vname] = c.publish(vname, t)
                except errors.OpdConnectionError as e:
                    self.drop()
                    raise self.error(e) from None
            return self._c

    def drop(self):
        """Forgets the connection (after the daemon went away)."""
        with self._lock:
            c, self._c = self._c, None
            self.cache = {}
        if c is not None:
            try:
                c.close()
            except errors.OpdError:
                pass

    def call(self, fn):
        """fn(client) through this node's daemon. A connection found lost
        (the daemon restarted since it was made) is dropped and fn tried
        once more on a new one; a daemon still away is a NodeError."""
        for again in (True, False):
            c = self.client()
            try:
                return fn(c)
            except NodeError:
                raise
            except errors.OpdConnectionError as e:
                self.drop()
                if not again:
                    raise self.error(e) from None

    def cached(self, key, make):
        """The object cached under `key` for this connection and thread,
        made by make() the first time (graphs, attachments)."""
        k = (key, threading.get_ident())
        v = self.cache.get(k)
        if v is None:
            v = self.cache[k] = make()
        return v

    def attach(self, vname):
        """The Tensor published as `vname` on this node (cached). Raises
        BadArgumentError (ENOENT) naming the node when it is not there."""
        def get(c):
            def make():
                try:
                    return c.attach(vname)
                except errors.BadArgumentError as e:
                    raise errors.error(e.code, "%r is not published on node %s "
                                       "(socket %s): %s; opd.dask.restore(client) "
                                       "or publish it again" % (vname, self.node,
                                                                self.socket,
                                                                e.message)) from None
            return self.cached(("attach", vname), make)
        return self.call(get)


class OpdWorker(WorkerPlugin):
    """Connects each worker to its node's daemon. socket: None (the usual
    way: $OPD_SOCKET, /run/opd/opd.sock, $XDG_RUNTIME_DIR/opd.sock), a
    path, a function of the worker returning one, or {node: socket} to
    emulate nodes on one host (the worker named i, as LocalCluster names
    them, joins the (i mod len)-th node in name order; node is then
    ignored); node: the node's name (None: $OPD_DASK_NODE, else the host
    name), or a function of the worker; wait: the transport (opd.Client's). setup() connects, so a
    worker on a node without a daemon fails to start its plugin with a
    NodeError naming the node."""

    name = NAME

    def __init__(self, socket=None, node=None, wait=None):
        self.socket, self.node, self.wait = socket, node, wait
        self.state = None

    def setup(self, worker):
        import os
        sock = self.socket(worker) if callable(self.socket) else self.socket
        node = self.node(worker) if callable(self.node) else self.node
        if isinstance(sock, dict):
            names = sorted(sock)
            try:
                i = int(worker.name)
            except (TypeError, ValueError):
                i = sum(str(worker.name).encode())
            node = names[i % len(names)]
            sock = sock[node]
        node = node or os.environ.get("OPD_DASK_NODE") or socketlib.gethostname()
        try:
            path = socket_path(sock)
        except errors.OpdError:
            path = sock
        self.state = Node(node, path, getattr(worker, "address", None), self.wait)
        self.state.client()

    def teardown(self, worker):
        if self.state is not None:
            self.state.drop()


class OpdDaemon(_daskd.OpdDaemon, NannyPlugin):
    """A NannyPlugin starting one opd daemon per node, stopped with the
    node's last nanny (see _daskd.OpdDaemon)."""


def start_daemon(socket, binary=None, args=(), node="this node"):
    """Starts an opd daemon on `socket` (binary: None for $OPD_BIN or `opd`
    on PATH; args: more options) unless one answers there, counting the
    caller as a user (an emulated node, a node without an init system).
    Returns True if it started one. Raises RuntimeError naming the node
    with the daemon's log when it does not come up."""
    return _daskd.start(socket, binary, args, node=node)


def stop_daemon(socket):
    """Counts one user of `socket` out; the last one stops (SIGTERM) the
    daemon start_daemon started. Returns its exit code, or None."""
    return _daskd.stop(socket)


def node(worker=None):
    """The calling worker's Node (or worker's: functions sent with
    client.run get theirs as their dask_worker argument, since current
    distributed's get_worker() answers inside tasks only). Raises
    RuntimeError outside a worker or without the OpdWorker plugin."""
    try:
        w = worker if worker is not None else get_worker()
    except ValueError:
        raise RuntimeError("opd.dask.node() runs on a dask worker") from None
    p = w.plugins.get(NAME)
    if p is None or p.state is None:
        raise RuntimeError("worker %s has no opd plugin: call "
                           "opd.dask.register(client) first" % w.address)
    return p.state


def register(client, socket=None, node=None, wait=None):
    """Registers OpdWorker on every worker, present and future (see
    OpdWorker). Raises NodeError naming the node if a worker finds no
    daemon. Returns {worker address: (node, socket)}."""
    add_plugin(client, OpdWorker(socket, node, wait), name=NAME)
    return nodes(client)


def add_plugin(client, plugin, name=None):
    """Registers a WorkerPlugin, or a NannyPlugin (OpdDaemon) on the
    nannies, with the API the installed distributed has: register_plugin
    (2023.9 and later, which tells the two kinds apart by their class;
    register_worker_plugin is gone from current releases) or
    register_worker_plugin(..., nanny=) before it."""
    name = name or getattr(plugin, "name", None)
    if hasattr(client, "register_plugin"):
        return client.register_plugin(plugin, name=name)
    return client.register_worker_plugin(
        plugin, name=name, nanny=isinstance(plugin, NannyPlugin))


def start_daemons(client, socket=None, args=()):
    """One opd daemon per node, started by the nannies (OpdDaemon) and
    stopped with them or by stop_daemons."""
    return add_plugin(client, OpdDaemon(socket=socket, args=args))


def stop_daemons(client):
    """Stops the daemons start_daemons started (each nanny's plugin
    teardown)."""
    return client.unregister_worker_plugin(OpdDaemon.name, nanny=True)


def nodes(client):
    """{worker address: (node, socket)} of the workers with the plugin."""
    return client.run(_where)


def _where(dask_worker=None):
    n = node(dask_worker)
    return (n.node, n.socket)


class Published:
    """What publish() returns: .name, .version, .vname (the name on each
    daemon), .keepers {node: worker}, .dtype, .shape; pickles small."""

    def __init__(self, name, version, keepers, dtype, shape):
        self.name, self.version, self.keepers = name, version, dict(keepers)
        self.vname = "%s@v%d" % (name, version)
        self.dtype, self.shape = dtype, tuple(shape)

    def attach(self):
        """On a worker: the Tensor on this worker's node."""
        return node().attach(self.vname)

    def __repr__(self):
        return "opd.dask.Published(%r, version=%d, nodes=%s)" % (
            self.name, self.version, sorted(self.keepers))


def _keep(vname, array, device=None, dask_worker=None):
    n = node(dask_worker)
    t = n.call(lambda c: c.publish(vname, array if device is None
                                   else c.from_numpy(array, device=device)))
    n.kept[vname] = t
    return n.node


def _unkeep(vname, dask_worker=None):
    n = node(dask_worker)
    if n.kept.pop(vname, None) is None:
        return False
    c = n._c
    if c is not None:
        try:
            c.unpublish(vname)
        except errors.OpdConnectionError:   # gone with the daemon
            n.drop()
        except errors.BadArgumentError:     # gone with an earlier connection
            pass
    return True


def _record(client, name):
    return client.get_metadata([_META, name], default=None)


def publish(client, name, array, device=None):
    """Publishes `array` (numpy, or anything np.asarray takes: a CPU torch
    tensor) as `name` on every node's daemon, once per node, kept by one
    worker of the node; device ("cuda", "cuda:1") puts the copy in the
    daemon's device memory (for map_blocks(..., device=...)). Each publish of a name makes a new version; the
    previous one is withdrawn once the new one is everywhere (attached
    tensors keep working). Returns a Published. Raises PublishError
    naming each node that failed (then no node keeps the new version)."""
    if not name or "/" in name or "@" in name:
        raise errors.error(protocol.EINVAL, "opd.dask.publish: bad name %r "
                           "(non-empty, no '/' or '@')" % (name,))
    a = np.ascontiguousarray(np.asarray(array))
    where = client.run(_where, on_error="return")
    keepers, failed = {}, {}
    for addr in sorted(where):
        r = where[addr]
        if isinstance(r, BaseException):
            failed[addr] = "worker %s: %s" % (addr, r)
        else:
            keepers.setdefault(r[0], addr)
    if not keepers and not failed:
        raise errors.error(protocol.EINVAL, "opd.dask.publish: no workers")
    old = _record(client, name) or {}
    version = int(old.get("version", 0)) + 1
    pub = Published(name, version, keepers, str(a.dtype), a.shape)
    res = client.run(_keep, pub.vname, a, device, workers=list(keepers.values()),
                     on_error="return") if keepers else {}
    for nd, addr in keepers.items():
        r = res.get(addr, RuntimeError("worker %s did not answer" % addr))
        if isinstance(r, BaseException):
            failed[nd] = str(r)
    if failed:
        ok = [addr for nd, addr in keepers.items() if nd not in failed]
        if ok:
            client.run(_unkeep, pub.vname, workers=ok, on_error="return")
        client.set_metadata([_META, name], dict(old, version=version))
        code = protocol.ERROR_CODES["ECONNECT"]
        raise PublishError(code, "opd.dask.publish(%r): failed on %d of %d "
                           "node(s), nothing published (version %d withdrawn):"
                           " %s" % (name, len(failed), len(keepers) +
                                    len([k for k in failed if k not in keepers]),
                                    version, "; ".join(
                                        "%s: %s" % kv for kv in sorted(failed.items()))),
                           failed)
    client.set_metadata([_META, name], {
        "version": version, "vname": pub.vname, "keepers": keepers,
        "dtype": pub.dtype, "shape": list(pub.shape)})
    if old.get("vname"):
        client.run(_unkeep, old["vname"], workers=list(old["keepers"].values()),
                   on_error="return")
    return pub


def unpublish(client, name):
    """Withdraws `name` from every node (attached tensors keep working).
    Raises KeyError if it is not published. Returns the nodes whose
    keeper withdrew it ({node: True}; False: gone with its worker or
    daemon already)."""
    rec = _record(client, name) or {}
    if not rec.get("vname"):
        raise KeyError("opd.dask.unpublish: %r is not published" % (name,))
    res = client.run(_unkeep, rec["vname"], workers=list(rec["keepers"].values()),
                     on_error="return")
    client.set_metadata([_META, name], {"version": rec["version"]})
    return {nd: res.get(addr) is True for nd, addr in rec["keepers"].items()}


def current(client, name):
    """The Published of `name`'s current version (raises KeyError)."""
    rec = _record(client, name) or {}
    if not rec.get("vname"):
        raise KeyError("opd.dask: %r is not published" % (name,))
    return Published(name, rec["version"], rec["keepers"], rec["dtype"],
                     rec["shape"])


def attach(name):
    """In a task on a worker: the Tensor published as `name` (a Published,
    or a name resolved to its current version through the scheduler: not
    from client.run, which runs on the worker's event loop) on this
    worker's node."""
    if isinstance(name, Published):
        return name.attach()
    from distributed import get_client
    return node().attach(current(get_client(), name).vname)


def _restore(dask_worker=None):
    n = node(dask_worker)
    if not n.kept:
        return 0
    def check(c):
        for vname in n.kept:
            try:
                c.attach(vname)
            except errors.BadArgumentError:
                raise errors.error(protocol.ECLOSED, "lost " + vname) from None
    n.call(check)         # a lost one: reconnected, published again
    return len(n.kept)


def restore(client):
    """Makes every keeper publish again what its daemon lost (a daemon
    restarted since). Returns {worker: publications kept}; raises
    NodeError if a keeper's daemon is still down."""
    return client.run(_restore)


def stats(client):
    """{node: the daemon's stats()} through one worker of each node."""
    out = {}
    for addr, (nd, _) in sorted(nodes(client).items()):
        if nd not in out:
            out[nd] = client.run(_stats, workers=[addr])[addr]
    return out


def _stats(dask_worker=None):
    return node(dask_worker).call(lambda c: c.stats())


def _as_input(c, b, device):
    if isinstance(b, Published):
        return node().attach(b.vname)
    if isinstance(b, np.ndarray):
        return c.from_numpy(np.ascontiguousarray(b), device=device)
    return b


def _block(*blocks, _opd_op=None, _opd_kw=None, _opd_device=None):
    def go(c):
        ins = [_as_input(c, b, _opd_device) for b in blocks]
        kw = {k: _as_input(c, v, _opd_device) if isinstance(v, Published) else v
              for k, v in (_opd_kw or {}).items()}
        if isinstance(_opd_op, str):
            out = c.run(_opd_op, *ins, device=_opd_device, **kw)
            return out.numpy() if isinstance(out, Tensor) else out
        out = _opd_op(c, *ins, **kw)
        if isinstance(out, Tensor):       # may be reused by its maker: copied
            return np.array(out.numpy())
        return out
    return node().call(go)


def map_blocks(op, *arrays, dtype=None, chunks=None, drop_axis=None,
               new_axis=None, name=None, device=None, resources=None, **kw):
    """dask.array.map_blocks running `op` on each block through the
    worker's node daemon. op: an operator name (c.run(op, *blocks, **kw):
    kw are its attributes) or fn(c, *blocks, **kw) returning an opd Tensor
    or a numpy array (c: the worker's Client; blocks as opd Tensors in
    shared memory). Published handles in arrays or kw arrive as the
    node's attached Tensor. dtype, chunks, drop_axis, new_axis, name: as
    dask's (the output block's shape and dtype when they differ from the
    first array's). device: where the blocks go ("cuda": copied to the
    daemon's GPU, the op run there, the result copied back; None: host
    memory, the daemon's choice). resources: the tasks' worker resources
    (e.g. {"GPU": 1}: only workers started with --resources GPU=1)."""
    import dask
    import dask.array as da
    extra = {}
    if drop_axis is not None:
        extra["drop_axis"] = drop_axis
    if new_axis is not None:
        extra["new_axis"] = new_axis
    if chunks is not None:
        extra["chunks"] = chunks
    if name is not None:
        extra["name"] = name
    with dask.annotate(**({"resources": resources} if resources else {})):
        return da.map_blocks(_block, *arrays, dtype=dtype or arrays[0].dtype,
                             _opd_op=op, _opd_kw=kw, _opd_device=device,
                             meta=np.empty((0,) * (
                                 arrays[0].ndim - len(_tuple(drop_axis)) +
                                 len(_tuple(new_axis))), dtype or arrays[0].dtype),
                             **extra)


def map_partitions(op, df, columns=None, out_columns=None, dtype="float32",
                   device=None, resources=None, **kw):
    """A dask dataframe's partitions through the node's daemon: each
    partition's `columns` (None: every numeric column) as one (rows,
    len(columns)) `dtype` block, run as map_blocks runs one (op, kw,
    device, resources alike), back as a DataFrame with the partition's
    index and `out_columns` (None: the same names; give them when `op`
    changes the width). Raises ValueError when the output's width is not
    len(out_columns)."""
    import dask
    import pandas as pd
    cols = list(columns) if columns is not None else [
        c for c in df.columns if np.issubdtype(df[c].dtype, np.number)]
    outs = list(out_columns) if out_columns is not None else cols
    meta = pd.DataFrame({c: np.empty(0, dtype) for c in outs})
    with dask.annotate(**({"resources": resources} if resources else {})):
        return df.map_partitions(_partition, op, cols, outs, dtype, device, kw,
                                 meta=meta)


def _partition(part, op, cols, outs, dtype, device, kw):
    import pandas as pd
    if len(part) == 0:
        return pd.DataFrame({c: np.empty(0, dtype) for c in outs}, index=part.index)
    y = np.asarray(_block(part[cols].to_numpy(dtype=dtype), _opd_op=op,
                          _opd_kw=kw, _opd_device=device))
    y = y.reshape(len(part), -1)
    if y.shape[1] != len(outs):
        raise ValueError("opd.dask.map_partitions: %r gave %d column(s) for "
                         "out_columns %r" % (op, y.shape[1], outs))
    return pd.DataFrame(y, index=part.index, columns=outs)


def _tuple(x):
    if x is None:
        return ()
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


async def dask_setup(server):
    """`--preload opd.dask` on a worker registers OpdWorker (the usual
    socket, $OPD_DASK_NODE or the host name); `--preload-nanny opd.dask`
    on a nanny starts the node's daemon ($OPD_SOCKET, $OPD_BIN)."""
    if hasattr(server, "plugin_add"):
        if type(server).__name__ == "Nanny":
            await server.plugin_add(OpdDaemon(), name=OpdDaemon.name)
        else:
            await server.plugin_add(OpdWorker(), name=NAME)
