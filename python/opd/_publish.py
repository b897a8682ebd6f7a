"""opd._publish: published tensors (a part of opd.Client).

DESIGN
Publications, held by its Client as `_pubs`, owns the names this
connection published (`names`: name -> the Tensor published). publish() copies a tensor into an arena
of its own (host memory, or device memory for a device tensor) and
publishes that arena under a name with its dtype, shape and offset as
JSON meta (opd_publish, or opd_publish2 with a readers list); _pubs
keeps the copy while the name lasts. attach() returns a read-only Tensor
on the attached arena, typed from the meta (raw bytes when there is none
of ours). It reaches the connection through its Client (handle, need,
run, settle, the conversion of a torch tensor or array) and arenas
through the Arenas part.
"""
import ctypes
import json
import numbers

from .errors import check
from .tensor import Tensor, dtype_name


class Publications:
    """A connection's publish, unpublish and attach."""

    def __init__(self, client, arenas):
        self._c, self._arenas = client, arenas
        self.names = {}                # name -> the Tensor published

    def reset(self):
        """Forgets the names of the previous connection (closed with it)."""
        self.names = {}

    def publish(self, name, t, readers=None):
        """Publishes a copy of tensor t (a host or device Tensor, or a torch
        tensor) under `name` (at most 63 bytes, no "/"), for other
        connections of the daemon to attach read-only (c.attach). The name
        belongs to this process's uid: connections of the same uid attach
        it as `name`, and other uids only if `readers` lists them, as
        "user/name" or "uid/name". readers: None (this uid only) or a list
        of uids (int), user names, "group:NAME" / "group:GID" (members of
        the group) or "*" (every client the daemon serves); root and the
        daemon's own uid may attach any name. The copy gets an arena of its
        own (device memory for a device tensor) and dtype, shape and offset
        travel as JSON meta. The name lasts until unpublish(name) or until
        this connection closes; the memory lasts while any attachment
        does. Returns the published Tensor (this connection's own copy:
        writing it changes what attachers read). Raises BadArgumentError
        (EINVAL: name taken by this uid, empty or with a "/"; an unknown
        user or group in readers)."""
        c, arenas = self._c, self._arenas
        h = c._handle()
        if readers is None:
            fn, extra = c._need("opd_publish"), ()
        else:
            if isinstance(readers, (str, bytes, numbers.Integral)):
                raise TypeError("readers must be a list of uids, user names, "
                                "'group:NAME' or '*', not %r" % (readers,))
            fn = c._need("opd_publish2")
            rs = [str(int(r)) if isinstance(r, numbers.Integral) and
                  not isinstance(r, bool) else r for r in readers]
            for r in rs:
                if not isinstance(r, str):
                    raise TypeError("readers entries are uids (int) or "
                                    "strings, not %r" % (r,))
            arr = (ctypes.c_char_p * max(len(rs), 1))(
                *[r.encode() for r in rs])
            extra = (arr, len(rs))
        if not isinstance(t, Tensor):
            t = c._runner.convert(t)
        nbytes = max(t.nbytes, 1)
        if t.device == "cpu":
            arena = arenas.new_arena((nbytes + 4095) & ~4095)
            own = Tensor(arena, 0, t.dtype, t.shape, None, arena)
            if t.arena.base is not None and t.is_contiguous():
                ctypes.memmove(own.data_ptr(), t.data_ptr(), t.nbytes)
            elif t.size:
                c.run("copy", t, out=own)
        else:
            arena = arenas.new_device_arena(t.device, (nbytes + 255) & ~255)
            own = Tensor(arena, 0, t.dtype, t.shape, None, arena)
            if t.size:
                c.run("copy", t, out=own)
        c._settle()   # the copy, and what wrote t, done for attachers
        meta = json.dumps({"dtype": t.dtype, "shape": list(t.shape),
                           "offset": 0}, separators=(",", ":"))
        check(fn(h, arenas.arena_id(arena), name.encode(), meta.encode(),
                 *extra))
        self.names[name] = own
        return own

    def unpublish(self, name):
        """Withdraws `name`; attachments made before keep working. Raises
        BadArgumentError (ENOENT: nothing published under it; EINVAL:
        another connection published it). Returns None."""
        c = self._c
        check(c._need("opd_unpublish")(c._handle(), name.encode()))
        self.names.pop(name, None)

    def attach(self, name):
        """Returns the tensor published under `name` as a read-only Tensor of
        this connection (on "cpu" or "cuda:N": the publisher's memory, no
        copy). Use it as an input anywhere; as an output the daemon refuses
        it (BadArgumentError, EREADONLY). It is not mapped here: numpy(),
        cpu() and torch() copy it. `name` is one of this uid's names, or
        "user/name" ("uid/name") for another uid's name shared with this
        one. Raises BadArgumentError (ENOENT) if nothing is published under
        that name, or it is another uid's and not shared with this uid (the
        two are not told apart)."""
        c = self._c
        h = c._handle()
        aid, size = ctypes.c_uint64(), ctypes.c_uint64()
        dev = ctypes.create_string_buffer(64)
        meta = ctypes.create_string_buffer(512)
        check(c._need("opd_attach")(h, name.encode(), ctypes.byref(aid),
                                       ctypes.byref(size), dev, 64, meta, 512))
        device = dev.value.decode() or "cpu"
        a = self._arenas.remote(aid.value, size.value, device, "attach",
                                readonly=True)
        try:
            m = json.loads(meta.value.decode()) if meta.value else {}
            dt = dtype_name(m["dtype"])
            shape = tuple(int(d) for d in m["shape"])
            off = int(m.get("offset", 0))
        except Exception:           # published without (our) meta: bytes
            dt, shape, off = "uint8", (size.value,), 0
        return Tensor(a, off, dt, shape, None, a)

