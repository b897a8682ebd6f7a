"""Host-side parts of the CUDA-era API that a CPU daemon serves too:
publish/attach of host tensors (across connections and processes),
read-only attachments, unknown names, devices named in runs, the
high-priority hello, and what a daemon without a GPU answers; names
belong to their uid (readers=, and as root a child of another uid that
sees only what was shared with it)."""
import json
import multiprocessing as mp
import os
import pickle

import numpy as np
import pytest

import opd
import _gpu_workers


def test_device_names():
    assert opd.device_name("cuda") == "cuda:0"
    assert opd.device_name("cuda:3") == "cuda:3"
    assert opd.device_name(1) == "cuda:1"
    assert opd.device_name("cpu") == "cpu"
    assert opd.device_name("auto", auto=True) == "auto"
    for bad in ("gpu", "cuda:", "cuda:x", "auto"):
        with pytest.raises(opd.BackendError):
            opd.device_name(bad)


def test_host_tensor_device(c):
    x = c.from_numpy(np.ones((2, 3), np.float32))
    assert x.device == "cpu" and not x.is_cuda and not x.readonly
    assert x.to("cpu") is x and x.cpu() is x
    assert x.__dlpack_device__() == (1, 0)


def test_run_on_cpu_named(c):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = c.softmax(c.from_numpy(a), device="cpu")
    e = np.exp(a - a.max(-1, keepdims=True))
    assert np.allclose(y.numpy(), e / e.sum(-1, keepdims=True))
    r = c.submit("relu", c.from_numpy(a - 5), device="auto")
    assert (r.wait().numpy() == np.maximum(a - 5, 0)).all()


def test_high_priority_hello(daemon):
    with opd.connect(daemon.socket, priority="high") as c:
        assert c.priority == "high"
        assert c.relu(np.ones(3, np.float32)).tolist() == [1, 1, 1]
        c2 = pickle.loads(pickle.dumps(c))
        assert c2.priority == "high"
        c2.close()
    with pytest.raises(opd.BadArgumentError):
        opd.connect(daemon.socket, priority="urgent")


def test_no_gpu_answers_edevice(c):
    if c.devices():
        pytest.skip("this daemon has CUDA devices (tests/python/test_gpu.py covers them)")
    with pytest.raises(opd.BackendError) as e:
        c.empty((4,), device="cuda")
    assert e.value.name == "EDEVICE"
    with pytest.raises(opd.BackendError) as e:
        c.relu(np.ones(3, np.float32), device="cuda")
    assert e.value.name == "EDEVICE"
    with pytest.raises(opd.BackendError) as e:
        c.import_cuda(bytes(64), 0, 64, "cuda:0")
    assert e.value.name == "EDEVICE"


def test_publish_attach_host(daemon, c):
    name = "host-w-%d" % os.getpid()
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = c.from_numpy(a)
    pub = c.publish(name, x)
    assert pub.arena is not x.arena and (pub.numpy() == a).all()
    with opd.connect(daemon.socket) as b:
        w = b.attach(name)
        assert w.readonly and w.device == "cpu" and w.shape == (4, 6)
        assert w.dtype == "float32" and "read-only" in repr(w)
        assert (w.numpy() == a).all()                  # a copy: not mapped here
        assert (np.asarray(w[1]) == a[1]).all()
        assert (b.relu(b.add(w, w)).numpy() == 2 * a).all()
        with pytest.raises(opd.BadArgumentError) as e:
            b.relu(b.from_numpy(a), out=w)
        assert e.value.name == "EREADONLY"
        with pytest.raises(TypeError):
            pickle.dumps(w)
        with pytest.raises(opd.BadArgumentError) as e:
            c.relu(w)                                  # another connection's arena
        assert e.value.name == "EARENA"
        pub.numpy()[0, 0] = 100                        # the publisher's own copy
        assert w.numpy()[0, 0] == 100
        with pytest.raises(opd.BadArgumentError) as e:
            c.publish(name, x)                         # the name is taken
        assert e.value.name == "EINVAL"
        c.unpublish(name)
        assert w.numpy()[0, 0] == 100                  # attachments outlive the name
        with pytest.raises(opd.BadArgumentError) as e:
            b.attach(name)
        assert e.value.name == "ENOENT"
    with pytest.raises(opd.BadArgumentError) as e:
        c.unpublish(name)
    assert e.value.name == "ENOENT"


def test_publish_attach_host_across_processes(daemon, c):
    name = "host-x-%d" % os.getpid()
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    c.publish(name, a)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_gpu_workers.attach_and_read, args=(daemon.socket, name, q))
    p.start()
    try:
        r = q.get(timeout=60)
    finally:
        p.join(30)
        if p.is_alive():
            p.kill()
    assert r[0] == "ok", r
    _, dev, shape, seen, doubled, ro = r
    assert dev == "cpu" and tuple(shape) == (3, 4)
    assert np.array_equal(np.array(seen, np.float32), a)
    assert np.allclose(doubled, 2 * a) and ro == "EREADONLY"
    c.unpublish(name)


def test_attach_without_meta_is_bytes(daemon, c):
    # a publication made through libopd without meta attaches as raw bytes
    x = c.from_numpy(np.arange(4, dtype=np.float32))
    name = "raw-%d" % os.getpid()
    lib = opd._lib.load()
    opd.errors.check(lib.opd_publish(c._handle(), c._arena_id(x.arena),
                                     name.encode(), None))
    w = c.attach(name)
    assert w.dtype == "uint8" and w.shape == (x.arena.size,)
    assert w[:16].tobytes() == np.arange(4, dtype=np.float32).tobytes()
    c.unpublish(name)


def test_publish_readers_arguments(c):
    x = c.from_numpy(np.arange(4, dtype=np.float32))
    name = "rd-%d" % os.getpid()
    with pytest.raises(opd.BadArgumentError) as e:
        c.publish(name, x, readers=["no-such-user-opd"])
    assert e.value.name == "EINVAL" and 'no user is named "no-such-user-opd"' in str(e.value)
    with pytest.raises(opd.BadArgumentError) as e:
        c.publish(name, x, readers=["group:no-such-group-opd"])
    assert e.value.name == "EINVAL" and "no group is named" in str(e.value)
    with pytest.raises(TypeError):
        c.publish(name, x, readers="root")            # a list, not one name
    with pytest.raises(opd.BadArgumentError) as e:
        c.publish("a/" + name, x)
    assert e.value.name == "EINVAL" and "may not contain '/'" in str(e.value)
    # every form is accepted; the owner reads its name bare and qualified
    me = os.getuid()
    c.publish(name, x, readers=[me, str(me), "*", "group:%d" % os.getgid(), "root"])
    import pwd
    user = pwd.getpwuid(me).pw_name
    for n in (name, "%s/%s" % (user, name), "%d/%s" % (me, name)):
        assert c.attach(n).numpy().tolist() == [0, 1, 2, 3]
    c.unpublish(name)


def _other_uid_reads(sock, names, q):
    """In a child: become uid 64123 and attach each name; q gets, per name,
    its values or the error's name."""
    os.setgroups([])
    os.setgid(64123)
    os.setuid(64123)
    out = []
    with opd.connect(sock) as o:
        for n in names:
            try:
                out.append(o.attach(n).numpy().tolist())
            except opd.OpdError as e:
                out.append(e.name)
    os.write(q, json.dumps(out).encode())


def test_publish_readers_confine_other_uids(daemon, c):
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another uid (setuid in a child)")
    d = os.path.dirname(daemon.socket)
    modes = os.stat(d).st_mode & 0o777, os.stat(daemon.socket).st_mode & 0o777
    os.chmod(d, 0o755)
    os.chmod(daemon.socket, 0o666)
    tag = os.getpid()
    try:
        c.publish("mine-%d" % tag, np.arange(3, dtype=np.float32))
        c.publish("theirs-%d" % tag, np.arange(3, dtype=np.float32) + 10,
                  readers=[64123])
        names = ["mine-%d" % tag, "root/mine-%d" % tag, "0/theirs-%d" % tag,
                 "root/theirs-%d" % tag, "theirs-%d" % tag]
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(r)
                _other_uid_reads(daemon.socket, names, w)
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        got = b""
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            got += b
        os.close(r)
        assert os.waitpid(pid, 0)[1] == 0, "the child failed"
        seen = json.loads(got.decode())
        assert seen == ["ENOENT", "ENOENT", [10, 11, 12], [10, 11, 12], "ENOENT"], seen
    finally:
        os.chmod(d, modes[0])
        os.chmod(daemon.socket, modes[1])
        for n in ("mine-%d" % tag, "theirs-%d" % tag):
            try:
                c.unpublish(n)
            except opd.OpdError:
                pass
