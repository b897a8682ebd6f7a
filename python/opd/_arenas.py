"""opd._arenas: the arenas a connection registers (mixed into opd.Client).

DESIGN
Arenas is a mixin of Client: the daemon knows a tensor's memory by an
arena id of this connection's session. Host arenas (memfds from
memory.create_arena, carved by the client's Allocator) are registered
by fd (opd_arena_register_fd) when made, or on first use by another
connection (_arena_id). Device arenas are daemon-owned memory
(opd_alloc, exportable through opd_alloc_flags where the daemon has CUDA
VMM), one Allocator per device (_dalloc), known here as
memory.RemoteArena (_remote: also imports and attachments). _reg maps
arena serial -> arena id. Arenas that died are released (_drop_arena),
or queued by their finalizers in _pending_release and released at the
connection's next call (_drain_releases: Client._handle), never from
inside the garbage collector. The state lives in Client.__init__ and is
reset by Client._connect.
"""
import ctypes
import weakref

from . import errors, memory, protocol
from .errors import check

_ALLOC_EXPORTABLE = 0x1  # OPD_ALLOC_EXPORTABLE


class Arenas:
    """Client's arena registry: arena ids, device allocators, releases."""

    def _new_arena(self, size):
        h = self._handle()
        a = memory.create_arena(size)
        aid = ctypes.c_uint64()
        check(self._lib.opd_arena_register_fd(h, a.fd, size, ctypes.byref(aid)))
        self._reg[a.serial] = aid.value
        a.regs[self._serial] = weakref.ref(self)
        return a

    def _remote(self, aid, size, device, kind, readonly=False, keep=None):
        a = memory.RemoteArena(size, device, kind, self, readonly, keep)
        self._reg[a.serial] = aid
        a.regs[self._serial] = weakref.ref(self)
        return a

    def _new_device_arena(self, device, size, exportable=False):
        h = self._handle()
        aid = ctypes.c_uint64()
        fn = getattr(self._lib, "opd_alloc_flags", None)
        if exportable and fn is not None and device not in self._no_vmm:
            rc = fn(h, device.encode(), size, _ALLOC_EXPORTABLE, ctypes.byref(aid))
            if rc == 0:
                a = self._remote(aid.value, size, device, "alloc")
                a.exportable = True
                return a
            if rc != protocol.EBACKEND:       # ENOMEM, ELIMIT, EDEVICE, ...
                check(rc)
            self._no_vmm.add(device)          # no CUDA VMM: plain memory
        check(self._need("opd_alloc")(h, device.encode(), size, ctypes.byref(aid)))
        return self._remote(aid.value, size, device, "alloc")

    def _dalloc(self, device):
        a = self._dallocs.get(device)
        if a is None:
            with self._lock:
                a = self._dallocs.get(device)
                if a is None:
                    a = memory.Allocator(
                        lambda size, d=device: self._new_device_arena(d, size, True),
                        self._drop_arena, self._gen, owner=weakref.ref(self),
                        min_arena=64 << 20, spare=512 << 20, grow_max=1 << 30)
                    self._dallocs[device] = a
        return a

    def _drop_arena(self, arena):
        arena.regs.pop(self._serial, None)
        self._maps.pop(arena.serial, None)    # unmapped with its last view
        aid = self._reg.pop(arena.serial, None)
        if aid is not None and self._h is not None:
            self._lib.opd_arena_release(self._h, aid)  # errors: session gone

    def _drain_releases(self, h):
        while self._pending_release:
            try:
                serial = self._pending_release.popleft()
            except IndexError:
                return
            aid = self._reg.pop(serial, None)
            self._maps.pop(serial, None)
            if aid is not None:
                self._lib.opd_arena_release(h, aid)

    def _arena_id(self, arena):
        aid = self._reg.get(arena.serial)
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
        with self._lock:
            aid = self._reg.get(arena.serial)
            if aid is None:
                out = ctypes.c_uint64()
                check(self._lib.opd_arena_register_fd(
                    self._h, arena.fd, arena.size, ctypes.byref(out)))
                aid = self._reg[arena.serial] = out.value
                arena.regs[self._serial] = weakref.ref(self)
            return aid
