"""opd.memory: shared-memory arenas and the per-connection tensor allocator.

DESIGN
An Arena is one sealed memfd mapped in this process, made here
(create_arena: memfd_create, ftruncate, F_SEAL_SHRINK|GROW|SEAL, mmap) or
opened from another process's tensor reference (/proc/<pid>/fd/<fd>, see
open_shared). The package, not libopd, owns every fd and mapping (it
registers them with opd_arena_register_fd rather than using
opd_arena_create): so memory stays valid for as long as a Tensor or numpy
view uses it, even after its Client is closed, and unmapping happens in
exactly one place, when the Arena object dies. Any Client can use any
Arena: the first time a
tensor of an arena reaches a connection that does not know it, the client
registers the fd (opd_arena_register_fd); the registration is released
when the Arena object dies. Arenas are recognised by the memfd's
(st_dev, st_ino), which is what a pickled reference carries, so a
reference unpickled in the process that holds the arena reuses it.

The Allocator carves tensors out of its client's arenas: 64-byte aligned
blocks, first fit over a per-arena free list sorted by offset (freed
blocks coalesce with their neighbours). When nothing fits it adds an arena
of max(16 MiB, request rounded up to 2 MiB); when an arena becomes empty
and another empty one exists, the smaller is released, so one spare stays
mapped. Device allocators (Client._arenas.dalloc) add arenas of at least 64 MiB,
as large as all their arenas so far (up to 1 GiB), and keep up to 512 MiB
of empty arenas besides the spare: a device arena costs an allocation in
the daemon, an export and a mapping here (milliseconds), which a model
whose activations come and go every forward must not pay per call. A block is freed when its Block object dies (the last Tensor or
view using it): Block.__del__ only appends to a deque, and the allocator
drains that deque at its next call, under its lock. Freeing never runs
allocator code from inside the garbage collector, so a collection that
fires in the middle of an allocation cannot corrupt the free lists.

fork(): the generation counter below is bumped in every child. A child's
Client starts a fresh allocator; the parent's arenas stay mapped in the
child (the mappings are inherited and shared), their tensors stay usable
(registered with the child's own connection by their inherited fd), and
frees of the parent's blocks in the child are dropped, since that space
is the parent's to reuse.

Device memory (RemoteArena): a Client keeps one more Allocator per CUDA
device whose arenas are daemon-owned device allocations (opd_alloc_flags,
exportable CUDA VMM memory when the daemon offers it), so device tensors
are carved out exactly like host ones; those arenas belong to one
connection (its session frees them when it closes) and are not mapped
here, except on the GPU when Tensor.torch() asks for a zero-copy view
(_cuda.py maps the exported arena once per connection).
"""
import bisect
import collections
import ctypes
import fcntl
import itertools
import os
import threading
import weakref

from . import errors, protocol

ALIGN = 64
MIN_ARENA = 16 << 20
ARENA_ROUND = 2 << 20

_fork_gen = [0]
_serials = itertools.count(1)


def _after_fork_in_child():
    _fork_gen[0] += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


def fork_generation():
    """Returns a number that changes in every child after fork()."""
    return _fork_gen[0]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                       ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value
_PROT_RW = 0x1 | 0x2
_MAP_SHARED = 0x01

# (st_dev, st_ino) -> Arena, every arena alive in this process
_by_inode = weakref.WeakValueDictionary()
# the last few arenas opened from other processes, kept mapped so that a
# worker handed tensors of the same batch again and again maps it once
_recent = collections.deque(maxlen=4)
_registry_lock = threading.Lock()


class Arena:
    """One sealed memfd mapped here: .size, .base (address), .fd, .key
    ((st_dev, st_ino)), .opened (True if mapped from another process)."""
    __slots__ = ("serial", "size", "base", "fd", "key", "opened", "regs",
                 "__weakref__")
    device = "cpu"
    readonly = False

    def __init__(self, size, base, fd, opened=False):
        st = os.fstat(fd)
        self.serial = next(_serials)
        self.size, self.base, self.fd, self.opened = size, base, fd, opened
        self.key = (st.st_dev, st.st_ino)
        self.regs = {}  # id(client) -> weakref(client): connections that know it
        fin = weakref.finalize(self, _arena_gone, self.serial, self.regs,
                               base, size, fd)
        fin.atexit = False
        with _registry_lock:
            _by_inode[self.key] = self

    def __repr__(self):
        return "<opd.Arena %d bytes fd=%d%s>" % (
            self.size, self.fd, " opened" if self.opened else "")


class RemoteArena:
    """Memory the daemon holds for one connection, not mapped in this
    process: device memory from opd_alloc (kind "alloc"), an attachment of
    a published arena ("attach", read-only), or the client's own CUDA
    memory imported by IPC handle ("import", e.g. a torch tensor's
    storage, which .keep holds alive). .exportable: allocated as CUDA
    VMM memory that the daemon exports for a zero-copy torch view
    (Tensor.torch). .size, .device ("cuda:0", or "cpu"
    for an attached host arena), .readonly, .kind, .client (weakref to the
    Client whose session owns it). Its id is known to that client only
    (client._arenas.reg); the id is released at the client's next call after
    this object dies. .base is None: nothing here can read it directly."""
    __slots__ = ("serial", "size", "device", "kind", "readonly", "client",
                 "keep", "regs", "exportable", "__weakref__")
    base = None
    fd = None
    opened = False

    def __init__(self, size, device, kind, client, readonly=False, keep=None):
        self.serial = next(_serials)
        self.size, self.device, self.kind = size, device, kind
        self.readonly, self.keep = readonly, keep
        self.exportable = False      # CUDA VMM memory the daemon can export
        self.client = weakref.ref(client)
        self.regs = {}
        fin = weakref.finalize(self, _remote_gone, self.serial, self.regs)
        fin.atexit = False

    def __repr__(self):
        return "<opd.RemoteArena %s %d bytes on %s%s>" % (
            self.kind, self.size, self.device,
            " read-only" if self.readonly else "")


def _remote_gone(serial, regs):
    for ref in list(regs.values()):
        c = ref()
        if c is not None:
            c._pending_release.append(serial)


def _arena_gone(serial, regs, base, size, fd):
    # every connection that registered the arena releases it at its next
    # call, and forgets where it lay before it is unmapped
    for ref in list(regs.values()):
        c = ref()
        if c is not None:
            c._arenas.unnote(serial)
            c._pending_release.append(serial)
    _libc.munmap(base, size)
    try:
        os.close(fd)
    except OSError:
        pass


def _map(fd, size):
    base = _libc.mmap(None, size, _PROT_RW, _MAP_SHARED, fd, 0)
    if base is None or base == _MAP_FAILED:
        e = ctypes.get_errno()
        os.close(fd)
        raise errors.error(protocol.ENOMEM, "mmap of %d bytes failed: %s"
                           % (size, os.strerror(e)))
    return base


OFF_MAX = 2 ** 63 - 1        # the largest file size (off_t)


def create_arena(size):
    """Returns a new zero-filled Arena of `size` bytes: a memfd sealed
    against shrinking and growing, mapped shared here. Raises OpdError
    (EIO, ENOMEM) on failure, LimitError (ELIMIT) for a size no file can
    have, leaving nothing open."""
    if size > OFF_MAX:
        raise errors.error(protocol.ELIMIT, "arena of %d bytes: a shared-memory "
                           "file holds at most %d bytes" % (size, OFF_MAX))
    try:
        fd = os.memfd_create("opd-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError as e:
        raise errors.error(protocol.EIO, "memfd_create: %s" % e.strerror)
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK |
                    fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    except OSError as e:
        os.close(fd)
        raise errors.error(protocol.ENOMEM if e.errno == 28 else protocol.EIO,
                           "arena of %d bytes: %s" % (size, e.strerror))
    return Arena(size, _map(fd, size), fd)


def open_shared(pid, fd, key, size):
    """Returns the Arena for memfd `fd` of process `pid` whose (st_dev,
    st_ino) is `key`: the one already in this process if any, else opened
    through /proc/<pid>/fd/<fd> and mapped shared. Raises BadArgumentError
    (EARENA) if it cannot be opened or is no longer that memfd (the sender
    freed it before the receiver opened it)."""
    key = tuple(key)
    a = _by_inode.get(key)
    if a is not None:
        return a
    path = "/proc/%d/fd/%d" % (pid, fd)
    try:
        nfd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        raise errors.error(protocol.EARENA, "cannot open the shared arena %s "
                           "(%s): the sending process must be alive, of the "
                           "same user, and keep the tensor until it is "
                           "received" % (path, e.strerror))
    st = os.fstat(nfd)
    if (st.st_dev, st.st_ino) != key or st.st_size != size:
        os.close(nfd)
        raise errors.error(protocol.EARENA, "%s is no longer the shared arena "
                           "(the tensor was freed before it was received)" % path)
    a = Arena(size, _map(nfd, size), nfd, True)
    _recent.append(a)
    return a


def forget_shared():
    """Drops the small cache of arenas opened from other processes, so they
    are unmapped once no tensor uses them. Returns None."""
    _recent.clear()


class Block:
    """A tensor's space in an allocator arena; freed when this dies."""
    __slots__ = ("state", "offset", "size", "alloc", "__weakref__")

    def __init__(self, alloc, state, offset, size):
        self.alloc, self.state, self.offset, self.size = alloc, state, offset, size

    @property
    def arena(self):
        return self.state.arena

    def __del__(self):
        try:
            self.alloc._pending.append((self.state, self.offset, self.size))
        except Exception:  # interpreter shutdown
            pass


class _ArenaState:
    __slots__ = ("arena", "offs", "sizes", "used")

    def __init__(self, arena):
        self.arena = arena
        self.offs = [0]          # free blocks' offsets, sorted
        self.sizes = [arena.size]
        self.used = 0            # bytes in live blocks


class Allocator:
    """Carves 64-byte aligned blocks out of arenas made by `create(size)
    -> Arena`; gives empty arenas beyond one spare back with
    `release(arena)`."""

    def __init__(self, create, release, gen, owner=None, min_arena=None,
                 spare=0, grow_max=0):
        self._create, self._release = create, release
        self.min_arena = min_arena or MIN_ARENA
        self.spare = spare       # empty bytes kept mapped besides one arena
        self.grow_max = grow_max  # new arenas as large as all so far, to this
        self.owner = owner       # weakref to the Client it allocates for
        self._states = []
        self._pending = collections.deque()
        self._lock = threading.Lock()
        self.gen = gen           # fork generation it belongs to

    def alloc(self, nbytes):
        """Returns a Block of at least nbytes (>= 64). Raises OpdError if a
        new arena is needed and the daemon refuses it."""
        size = (max(int(nbytes), 1) + ALIGN - 1) & ~(ALIGN - 1)
        with self._lock:
            self._drain_locked()
            for st in self._states:
                for i, s in enumerate(st.sizes):
                    if s >= size:
                        return self._take(st, i, size)
            asize = max(self.min_arena,
                        (size + ARENA_ROUND - 1) & ~(ARENA_ROUND - 1))
            if self.grow_max:     # geometric: few arenas for a big working set
                have = sum(st.arena.size for st in self._states)
                asize = max(asize, min(have, self.grow_max))
            st = _ArenaState(self._create(asize))
            self._states.append(st)
            return self._take(st, 0, size)

    def _take(self, st, i, size):
        off = st.offs[i]
        if st.sizes[i] == size:
            del st.offs[i], st.sizes[i]
        else:
            st.offs[i] += size
            st.sizes[i] -= size
        st.used += size
        return Block(self, st, off, size)

    def drain(self):
        """Frees the blocks whose tensors died since the last call and
        releases surplus empty arenas. Returns None."""
        if self._pending:
            with self._lock:
                self._drain_locked()

    def _drain_locked(self):
        if self.gen != _fork_gen[0]:
            self._pending.clear()   # the parent's space: not ours to reuse
            return
        freed = False
        while self._pending:
            st, off, size = self._pending.popleft()
            self._free(st, off, size)
            freed = freed or st.used == 0
        if freed:
            empty = [s for s in self._states if s.used == 0]
            if len(empty) > 1:
                empty.sort(key=lambda s: s.arena.size)
                kept = sum(st.arena.size for st in empty[:-1])
                for st in empty[:-1]:     # the smallest first
                    if kept <= self.spare:
                        break
                    kept -= st.arena.size
                    self._states.remove(st)
                    self._release(st.arena)

    def _free(self, st, off, size):
        offs, sizes = st.offs, st.sizes
        i = bisect.bisect_left(offs, off)
        st.used -= size
        if i > 0 and offs[i - 1] + sizes[i - 1] == off:      # join previous
            i -= 1
            sizes[i] += size
        else:
            offs.insert(i, off)
            sizes.insert(i, size)
        if i + 1 < len(offs) and offs[i] + sizes[i] == offs[i + 1]:  # join next
            sizes[i] += sizes[i + 1]
            del offs[i + 1], sizes[i + 1]

    def stats(self):
        """Returns {"arenas", "bytes_mapped", "bytes_used"} of this allocator."""
        with self._lock:
            self._drain_locked()
            return {"arenas": len(self._states),
                    "bytes_mapped": sum(s.arena.size for s in self._states),
                    "bytes_used": sum(s.used for s in self._states)}
