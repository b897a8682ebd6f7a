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

Memory that someone else owns and this process maps shared (a torch
storage's POSIX shm file, _torch.py finds it) is registered too, by the
file's fd with "shm" (opd_arena_register_shm: the daemon maps an unsealed
tmpfs file under its SIGBUS guard) as a ShmArena, once per owner: `shm`
maps the owner's key to it (or to False where it could not be
registered, so that a failure is not retried per call) and a finalizer on
the owner drops the entry and queues the id's release when the owner
dies. Inputs that had to be copied into shared memory instead (staging)
are counted here and told to the daemon (opd_note_staging) at most every
STAGING_NOTE seconds, and by flush_staging().
"""
import collections
import ctypes
import time
import weakref

from . import errors, memory, protocol
from .errors import check

_ALLOC_EXPORTABLE = 0x1  # OPD_ALLOC_EXPORTABLE
STAGING_NOTE = 0.05      # seconds between a client's staging notes


class ShmArena:
    """A shared-memory file mapped here by its owner (a torch storage's),
    registered with the daemon as a host arena: .base is the address of
    the file's byte 0 here, .size the file's size, .data the file offset
    of the owner's first byte. It owns neither fd nor mapping: the owner's
    live as long as the owner, and a Tensor over it keeps the owner."""
    __slots__ = ("serial", "size", "base", "data", "regs", "__weakref__")
    device = "cpu"
    readonly = False
    fd = None
    opened = False
    kind = "shm"

    def __init__(self, size, base, data):
        self.serial = next(memory._serials)
        self.size, self.base, self.data = size, base, data
        self.regs = {}

    def __repr__(self):
        return "<opd.ShmArena %d bytes at 0x%x>" % (self.size, self.base)


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
        self.shm = {}                  # owner key -> ShmArena, or False
        self.staged = [0, 0]           # staging copies, bytes (this process)
        self.unsent = [0, 0]           # of them, not yet told to the daemon
        self.sent_at = 0.0

    def reset(self, gen=None):
        """Forgets the arenas of the previous connection; with gen (a new
        connection of that fork generation) makes the host Allocator."""
        self.reg = {}
        self.pending.clear()
        self.dallocs, self.no_vmm = {}, set()
        self.shm = {}
        self.unsent = [0, 0]
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
        self.note(aid.value, a.base, size)
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
                self.note(aid, arena.base, arena.size)
            return aid

    # ---- memory owned elsewhere: shm files ------------------------------------
    def register_shm(self, key, owner, fd, size, base, data):
        """Registers the shm file `fd` (`size` bytes, mapped here at `base`,
        the owner's bytes from file offset `data`) of owner `owner` (an
        object whose death releases it) under `key`; returns the ShmArena,
        or False (also kept under key) where the daemon refuses it or
        libopd cannot register shm files."""
        c = self._c
        fn = getattr(c._lib, "opd_arena_register_shm", None)
        a = False
        if fn is not None:
            if fn.argtypes is None:
                fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64,
                               ctypes.POINTER(ctypes.c_uint64)]
                fn.restype = ctypes.c_int
            aid = ctypes.c_uint64()
            h = c._handle()
            with c._lock:
                rc = fn(h, fd, size, ctypes.byref(aid))
            if rc == 0:
                a = ShmArena(size, base, data)
                self.reg[a.serial] = aid.value
                a.regs[c._serial] = weakref.ref(c)
                self.note(aid.value, base, size)
            elif rc not in (protocol.EFD, protocol.EINVAL, protocol.EPROTO):
                check(rc)              # ELIMIT, ECLOSED, ...: say so
        self.shm[key] = a
        fin = weakref.finalize(owner, _shm_gone, weakref.ref(self), key,
                               a.serial if a else None)
        fin.atexit = False
        return a

    # ---- where arenas lie here, for libopd (torch's CPU kernel) ---------------
    def note(self, aid, base, size):
        """Tells libopd that arena id aid is mapped here at base (size
        bytes): opd_arena_find then places a pointer in it."""
        fn = getattr(self._c._lib, "opd_arena_note", None)
        if fn is not None and self._c._h is not None:
            fn(self._c._h, aid, base, size)

    def unnote(self, serial):
        """Arena `serial` is about to be unmapped: libopd forgets where it
        lay (its id is released at the next call), so that no pointer of
        a later mapping at that address is placed in it."""
        aid = self.reg.get(serial)
        if aid is not None:
            self.note(aid, None, 0)

    def shm_count(self):
        """The shm files registered through this connection now."""
        return sum(1 for a in self.shm.values() if a)

    # ---- staging: the fallback copies ---------------------------------------
    def note_staging(self, nbytes):
        """Counts one input copied into shared memory (nbytes bytes) and
        tells the daemon what is unsent when STAGING_NOTE has passed."""
        st, un = self.staged, self.unsent
        st[0] += 1
        st[1] += nbytes
        un[0] += 1
        un[1] += nbytes
        now = time.monotonic()
        if now - self.sent_at >= STAGING_NOTE:
            self.sent_at = now
            self.flush_staging()

    def flush_staging(self):
        """Tells the daemon the staging copies not yet told (STATS'
        "staging"). Returns None."""
        un = self.unsent
        if not un[0]:
            return
        c = self._c
        fn = getattr(c._lib, "opd_note_staging", None)
        if fn is None or c._h is None:
            return
        if fn.argtypes is None:
            fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]
            fn.restype = ctypes.c_int
        n, b = un
        un[0] = un[1] = 0
        check(fn(c._handle(), n, b))


def _shm_gone(ref, key, serial):
    # the owner died (from the garbage collector: only queue the release)
    arenas = ref()
    if arenas is None:
        return
    a = arenas.shm.get(key)
    if a is False or (a is not None and a.serial == serial):
        arenas.shm.pop(key, None)
    if serial is not None:
        arenas.unnote(serial)
        arenas.pending.append(serial)
