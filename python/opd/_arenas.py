"""opd._arenas: the arenas a connection registers (a part of opd.Client).

DESIGN
The daemon knows a tensor's memory by an arena id of this connection's
session. Arenas, held by its Client as `_arenas`, owns what this
connection knows of them: `reg` maps arena serial -> arena id; `alloc`
is the Allocator of host arenas (memfds from memory.create_arena,
registered by fd with opd_arena_register_fd when made, or on first use
by another connection: arena_id); `dallocs` holds one Allocator per
device whose arenas are daemon-owned memory (opd_alloc, exportable
through opd_alloc_flags where the daemon has CUDA VMM), known here as
memory.RemoteArena (remote: also imports and attachments). Arenas that
died are released (drop_arena), or queued by their finalizers in
`pending` (memory.py appends to the Client's `_pending_release`, this
very deque) and released at the connection's next call (drain: from
Client._handle), never from inside the garbage collector. A released
arena id is reported to `on_release` (the torch part unmaps its view).
reset() forgets everything when the connection changes (fork, close).
It reaches the connection only through its Client (handle, lock, lib).
"""
import collections
import ctypes
import weakref

from . import errors, memory, protocol
from .errors import check

_ALLOC_EXPORTABLE = 0x1  # OPD_ALLOC_EXPORTABLE


class Arenas:
    """A connection's arena registry: arena ids, allocators, releases."""

    def __init__(self, client):
        self._c = client
        self.reg = {}                  # arena serial -> daemon arena id
        self.pending = collections.deque()   # serials to release
        self.alloc = None              # Allocator of host arenas
        self.dallocs = {}              # "cuda:N" -> Allocator of device arenas
        self.no_vmm = set()            # devices whose exportable alloc failed
        self.on_release = None         # f(serial): an arena id was released

    def reset(self, gen=None):
        """Forgets the arenas of the previous connection; with gen (a new
        connection of that fork generation) makes the host Allocator."""
        self.reg = {}
        self.pending.clear()
        self.dallocs, self.no_vmm = {}, set()
        if gen is not None:
            c = self._c
            self.alloc = memory.Allocator(self.new_arena, self.drop_arena,
                                          gen, owner=weakref.ref(c))

    def new_arena(self, size):
        c = self._c
        h = c._handle()
        a = memory.create_arena(size)
        aid = ctypes.c_uint64()
        check(c._lib.opd_arena_register_fd(h, a.fd, size, ctypes.byref(aid)))
        self.reg[a.serial] = aid.value
        a.regs[c._serial] = weakref.ref(c)
        return a

    def remote(self, aid, size, device, kind, readonly=False, keep=None):
        c = self._c
        a = memory.RemoteArena(size, device, kind, c, readonly, keep)
        self.reg[a.serial] = aid
        a.regs[c._serial] = weakref.ref(c)
        return a

    def new_device_arena(self, device, size, exportable=False):
        c = self._c
        h = c._handle()
        aid = ctypes.c_uint64()
        fn = getattr(c._lib, "opd_alloc_flags", None)
        if exportable and fn is not None and device not in self.no_vmm:
            rc = fn(h, device.encode(), size, _ALLOC_EXPORTABLE, ctypes.byref(aid))
            if rc == 0:
                a = self.remote(aid.value, size, device, "alloc")
                a.exportable = True
                return a
            if rc != protocol.EBACKEND:       # ENOMEM, ELIMIT, EDEVICE, ...
                check(rc)
            self.no_vmm.add(device)           # no CUDA VMM: plain memory
        check(c._need("opd_alloc")(h, device.encode(), size, ctypes.byref(aid)))
        return self.remote(aid.value, size, device, "alloc")

    def dalloc(self, device):
        a = self.dallocs.get(device)
        if a is None:
            c = self._c
            with c._lock:
                a = self.dallocs.get(device)
                if a is None:
                    a = memory.Allocator(
                        lambda size, d=device: self.new_device_arena(d, size, True),
                        self.drop_arena, c._gen, owner=weakref.ref(c),
                        min_arena=64 << 20, spare=512 << 20, grow_max=1 << 30)
                    self.dallocs[device] = a
        return a

    def drop_arena(self, arena):
        c = self._c
        arena.regs.pop(c._serial, None)
        if self.on_release is not None:
            self.on_release(arena.serial)     # unmapped with its last view
        aid = self.reg.pop(arena.serial, None)
        if aid is not None and c._h is not None:
            c._lib.opd_arena_release(c._h, aid)  # errors: session gone

    def drain(self, h):
        """Releases the arena ids queued in `pending` (on handle h)."""
        pending, lib = self.pending, self._c._lib
        while pending:
            try:
                serial = pending.popleft()
            except IndexError:
                return
            aid = self.reg.pop(serial, None)
            if self.on_release is not None:
                self.on_release(serial)
            if aid is not None:
                lib.opd_arena_release(h, aid)

    def arena_id(self, arena):
        aid = self.reg.get(arena.serial)
        if aid is not None:
            return aid
        if arena.base is None:
            raise errors.error(protocol.EARENA, "this tensor is in daemon "
                               "memory (%s, %s) of another connection's "
                               "session (or of one that closed, or of the "
                               "parent before fork): device memory belongs to "
                               "one connection; copy it (t.cpu(), t.to(device, "
                               "client=c)) or publish it"
                               % (arena.kind, arena.device))
        c = self._c
        with c._lock:
            aid = self.reg.get(arena.serial)
            if aid is None:
                out = ctypes.c_uint64()
                check(c._lib.opd_arena_register_fd(
                    c._h, arena.fd, arena.size, ctypes.byref(out)))
                aid = self.reg[arena.serial] = out.value
                arena.regs[c._serial] = weakref.ref(c)
            return aid
