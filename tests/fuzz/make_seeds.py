#!/usr/bin/python3
"""Writes the seed corpora of the libFuzzer targets (tests/fuzz/corpus/).

    /usr/bin/python3 tests/fuzz/make_seeds.py     # from the repository root

Standard library only. Each seed is a small, meaningful input in the format
its target's DESIGN comment describes (tests/fuzz/fuzz_<target>.c):
  wire     byte 0 = max_depth, then one msgpack payload
  desc     byte 0 = mode | arena-size class << 1, 8 bytes of offset, then a
           msgpack descriptor (mode 0) or raw fields (mode 1)
  session  byte 0 = prefix flags, then [op][len][data] commands (op | 16:
           from a second client)
The files are named after what they hold and rewritten on every run (the
directories are emptied first), so the corpus in the tree is exactly what
this script makes.
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- a minimal msgpack encoder (the smallest forms, as msgpack-c writes) ----


def mp(v):
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, int):
        if 0 <= v < 0x80:
            return bytes([v])
        if -32 <= v < 0:
            return struct.pack("b", v)
        if v >= 0:
            for tag, fmt, lim in ((0xcc, ">B", 1 << 8), (0xcd, ">H", 1 << 16),
                                  (0xce, ">I", 1 << 32), (0xcf, ">Q", 1 << 64)):
                if v < lim:
                    return bytes([tag]) + struct.pack(fmt, v)
        for tag, fmt, lim in ((0xd0, ">b", 1 << 7), (0xd1, ">h", 1 << 15),
                              (0xd2, ">i", 1 << 31), (0xd3, ">q", 1 << 63)):
            if v >= -lim:
                return bytes([tag]) + struct.pack(fmt, v)
        raise ValueError(v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode()
        n = len(b)
        if n < 32:
            return bytes([0xa0 | n]) + b
        if n < 256:
            return b"\xd9" + bytes([n]) + b
        return b"\xda" + struct.pack(">H", n) + b
    if isinstance(v, bytes):
        return b"\xc4" + bytes([len(v)]) + v
    if isinstance(v, (list, tuple)):
        n = len(v)
        head = bytes([0x90 | n]) if n < 16 else b"\xdc" + struct.pack(">H", n)
        return head + b"".join(mp(x) for x in v)
    if isinstance(v, dict):
        n = len(v)
        head = bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n)
        return head + b"".join(mp(k) + mp(x) for k, x in v.items())
    raise TypeError(type(v))


# protocol.h
HELLO, REGISTER, RELEASE, RUN, INFER, OPS, STATS, PING = 1, 2, 3, 4, 5, 6, 7, 8
ALLOC, PUBLISH, ATTACH, UNPUBLISH, IMPORT, EXPORT, RING_SETUP = 10, 11, 12, 13, 14, 15, 16
STREAM, SYNC = 18, 19
F32, I64, U8 = 1, 8, 6


def req(t, i, body):
    return mp([t, i, body])


def t(arena, offset, shape, dtype=F32, strides=None):
    """A tensor descriptor [arena, offset, dtype, shape, strides]."""
    return [arena, offset, dtype, list(shape), strides]


def run(i, op, ins, outs, attrs=None):
    body = {"op": op, "in": ins, "out": outs}
    if attrs:
        body["attrs"] = attrs
    return req(RUN, i, body)


# ---- session commands (fuzz_session.c) ------------------------------------
FRAME, RAW, RING, POKE, FDS, TURNS, READ, SHUT = range(8)
P_HELLO, P_ARENA_A, P_ARENA_B, P_RINGS, P_ADAPTIVE, P_POOL, P_FILL, P_READ = (
    1 << k for k in range(8))


def cmd(op, data=b""):
    if len(data) > 255:
        return bytes([op | 8]) + struct.pack("<H", len(data)) + data
    return bytes([op, len(data)]) + data


def session(pre, *cmds):
    return bytes([pre]) + b"".join(cmds)


def frame(payload):
    return cmd(FRAME, payload)


A, B = 1, 2  # the prefix's arenas: 16 KiB and 4 KiB


def session_seeds():
    s = {}
    hello = P_HELLO
    ab = P_HELLO | P_ARENA_A | P_ARENA_B
    s["hello"] = session(hello)
    s["ping_before_hello"] = session(0, frame(req(PING, 1, {})))
    s["hello_by_hand"] = session(0, frame(req(HELLO, 1, {"protocol": 1,
                                                          "client": "x\ny",
                                                          "priority": "high"})))
    s["ops_stats"] = session(hello, frame(req(OPS, 10, {})),
                             frame(req(STATS, 11, {})), cmd(READ))
    softmax = run(10, "softmax", [t(A, 0, [4, 16])], [t(A, 256, [4, 16])],
                  {"dim": -1})
    s["softmax"] = session(P_HELLO | P_ARENA_A, frame(softmax), cmd(READ))
    s["softmax_twice_cached"] = session(P_HELLO | P_ARENA_A, frame(softmax),
                                        frame(softmax), cmd(READ))
    s["softmax_pool"] = session(P_HELLO | P_ARENA_A | P_POOL, frame(softmax),
                                frame(softmax), cmd(TURNS, b"\x0f"), cmd(READ))
    s["infer_matmul"] = session(hello, frame(req(INFER, 12, {
        "op": "matmul", "in": [t(0, 0, [2, 3]), t(0, 0, [3, 4])]})))
    s["matmul"] = session(ab, frame(run(13, "matmul",
                                        [t(A, 0, [8, 16]), t(A, 512, [16, 8])],
                                        [t(B, 0, [8, 8])])), cmd(READ))
    s["add_broadcast"] = session(ab, frame(run(14, "add",
                                               [t(A, 0, [4, 8]), t(A, 1024, [8])],
                                               [t(B, 0, [4, 8])])))
    s["mul_strided_refused"] = session(ab, frame(run(15, "mul",
                                             [t(A, 0, [4, 4], strides=[8, 1]),
                                              t(A, 0, [4, 4], strides=[0, 1])],
                                             [t(B, 0, [4, 4])])))
    s["relu_inplace"] = session(P_HELLO | P_ARENA_A,
                                frame(run(16, "relu", [t(A, 0, [64])],
                                          [t(A, 0, [64])])))
    s["gelu_tanh"] = session(ab, frame(run(17, "gelu", [t(A, 0, [3, 5])],
                                           [t(B, 0, [3, 5])],
                                           {"approximate": "tanh"})))
    s["layernorm"] = session(ab, frame(run(18, "layernorm",
                                           [t(A, 0, [4, 8]), t(A, 128, [8]),
                                            t(A, 160, [8])],
                                           [t(B, 0, [4, 8])], {"eps": 1e-5})))
    s["rmsnorm"] = session(ab, frame(run(19, "rmsnorm",
                                         [t(A, 0, [2, 16]), t(A, 128, [16])],
                                         [t(B, 0, [2, 16])], {"eps": 0.0})))
    s["conv2d"] = session(ab, frame(run(20, "conv2d",
                                        [t(A, 0, [1, 2, 5, 5]),
                                         t(A, 256, [3, 2, 3, 3]),
                                         t(A, 512, [3])],
                                        [t(B, 0, [1, 3, 3, 3])],
                                        {"stride": 1, "padding": 0,
                                         "dilation": 1})))
    s["copy_strided"] = session(ab, frame(run(21, "copy",
                                              [t(A, 0, [4, 4], strides=[1, 4])],
                                              [t(B, 0, [4, 4])])))
    s["nms"] = session(ab, frame(run(22, "nms",
                                     [t(A, 0, [4, 4]), t(A, 64, [4])],
                                     [t(B, 0, [4], I64), t(B, 64, [1], I64)],
                                     {"iou_threshold": 0.5})))
    s["noop_many"] = session(ab, frame(run(23, "noop",
                                           [t(A, 0, [0]), t(B, 4096, [0, 1 << 40]),
                                            t(A, 0, [], U8)], [])))
    s["run_errors"] = session(ab,
                              frame(run(24, "softmax", [t(A, 8, [1 << 62, 0])],
                                        [t(B, 0, [1 << 62, 0])])),
                              frame(run(25, "softmax", [t(9, 0, [4])],
                                        [t(B, 0, [4])])),
                              frame(run(26, "nope", [], [])),
                              frame(run(27, "softmax", [t(A, 2, [4])],
                                        [t(A, 0, [4])])), cmd(READ))
    s["release_then_run"] = session(ab, frame(softmax),
                                    frame(req(RELEASE, 30, {"arena": A})),
                                    frame(softmax), cmd(READ))
    s["publish_attach"] = session(ab,
                                  frame(req(PUBLISH, 31, {"arena": A, "name": "w",
                                                          "meta": "m"})),
                                  frame(req(ATTACH, 32, {"name": "w"})),
                                  frame(run(33, "relu", [t(3, 0, [16])],
                                            [t(B, 0, [16])])),
                                  frame(req(UNPUBLISH, 34, {"name": "w"})),
                                  cmd(READ))
    s["alloc_import_export"] = session(hello,
                                       frame(req(ALLOC, 40, {"device": "cuda:0",
                                                             "size": 4096})),
                                       frame(req(IMPORT, 41, {"handle": bytes(64),
                                                              "offset": 0, "size": 64,
                                                              "device": "cuda"})),
                                       frame(req(EXPORT, 42, {"arena": 1})))
    s["register_by_hand"] = session(hello,
                                    cmd(FDS, b"\x00" + req(REGISTER, 50, {"size": 4096})),
                                    cmd(FDS, b"\x03" + req(REGISTER, 51, {"size": 4096})),
                                    cmd(FDS, b"\x02" + req(REGISTER, 52, {"size": 4096})),
                                    frame(req(REGISTER, 53, {"size": 4096})),
                                    cmd(READ))
    s["stray_fd_then_register"] = session(hello,
                                          cmd(FDS, b"\x08" + req(PING, 54, {})),
                                          frame(req(REGISTER, 55, {"size": 4096})))
    s["too_many_fds"] = session(hello, cmd(FDS, bytes([0x48]) + req(PING, 56, {})))
    ring_ping = req(PING, 60, {})
    s["rings_spin"] = session(P_HELLO | P_ARENA_A | P_RINGS, cmd(RING, ring_ping),
                              cmd(RING, softmax), cmd(TURNS, b"\x04"), cmd(READ))
    s["rings_adaptive"] = session(P_HELLO | P_ARENA_A | P_RINGS | P_ADAPTIVE,
                                  cmd(RING, ring_ping), cmd(RING, softmax),
                                  cmd(TURNS, b"\x04"), cmd(READ))
    # hostile shared memory: the submission ring's first slot gets a seq
    # word from the future, the completion ring's tail jumps ahead
    sq_slot0 = 256  # the header is 4 cache lines (common/ring.h)
    s["rings_corrupt_seq"] = session(P_HELLO | P_RINGS,
                                     cmd(POKE, struct.pack("<HI", sq_slot0, 7)),
                                     cmd(TURNS, b"\x02"), cmd(READ))
    s["rings_corrupt_len"] = session(P_HELLO | P_RINGS,
                                     cmd(POKE, struct.pack("<HII", sq_slot0, 1, 99999)),
                                     cmd(TURNS, b"\x02"), cmd(READ))
    cq_tail = 8192 + 64  # the cq begins on the first page after the sq
    s["rings_corrupt_cq_tail"] = session(P_HELLO | P_RINGS | P_ADAPTIVE,
                                         cmd(POKE, struct.pack("<HQ", cq_tail, 1 << 40)),
                                         *[cmd(RING, ring_ping)] * 9,
                                         cmd(TURNS, b"\x04"))
    s["ring_setup_by_hand"] = session(hello, cmd(FDS, b"\x00" + req(RING_SETUP, 61, {
        "size": 4096, "sq_slots": 2, "sq_slot_size": 16, "cq_slots": 2,
        "cq_slot_size": 16, "wait": "spin"})))
    # asynchronous runs (answered at completion on the cpu), SYNC
    # (waits for the runs before it), STREAM without a device, bad flags
    s["async_runs_and_syncs"] = session(ab, *[frame(req(RUN, 80 + k, {
        "op": "relu", "in": [t(A, 0, [64])], "out": [t(B, 0, [64])],
        "async": k % 16})) for k in range(17)],
        *[frame(req(SYNC, 90 + k, {})) for k in range(10)], cmd(READ))
    s["stream_no_device"] = session(hello, frame(req(STREAM, 100, {
        "device": "cuda:0", "event": b"\x00" * 64})), frame(req(SYNC, 101, {})))
    # STREAM asking for the flag word, refused FLAG runs
    s["stream_flag_no_device"] = session(hello, frame(req(STREAM, 102, {
        "device": "cuda:0", "event": b"\x00" * 64, "flag": True,
        "events": b"\x00" * 128})), frame(req(RUN, 103, {
            "op": "nope", "device": "cuda:0", "async": 11})),
        frame(req(RUN, 104, {"op": "relu", "async": 8})), frame(req(SYNC, 105, {})))
    # STREAM's wait_ms, WORD runs with slots (good and bad)
    s["stream_words_no_device"] = session(ab, frame(req(STREAM, 106, {
        "device": "cuda:0", "event": b"\x00" * 64, "flag": True,
        "events": b"\x00" * 64, "wait_ms": 5})), *[frame(req(RUN, 107 + k, {
            "op": "relu", "in": [t(A, 0, [64])], "out": [t(B, 0, [64])],
            "async": f})) for k, f in enumerate((27 | 5 << 8, 27 | 63 << 8, 27 | 64 << 8,
                                                 16 | 1 << 8, 11 | 3 << 8, 27))],
        frame(req(SYNC, 120, {})), cmd(READ))
    s["unread_replies"] = session(hello, *[frame(req(OPS, 70 + k, {})) for k in range(6)],
                                  cmd(TURNS, b"\x08"))
    s["inflight_limit_pool"] = session(P_HELLO | P_ARENA_A | P_POOL,
                                       *[frame(softmax)] * 6, cmd(READ))
    s["partial_frame"] = session(hello, cmd(RAW, struct.pack("<I", 100) + b"\x93\x08"))
    s["frame_too_big"] = session(hello, cmd(RAW, struct.pack("<I", 1 << 20)))
    s["bad_payloads"] = session(hello, frame(b"\xc1"), frame(mp([8, 1])))
    s["half_close"] = session(P_HELLO | P_ARENA_A, frame(softmax), cmd(SHUT),
                              cmd(TURNS, b"\x03"), cmd(READ))
    # a second client (op | 16): attaches the first one's publication and
    # runs on it, then the publisher goes while the reader still works
    two = lambda op, data=b"": cmd(op | 16, data)
    relu_att = run(91, "relu", [t(2, 0, [16])], [t(3, 0, [16])])  # attached, own
    s["two_clients_attach"] = session(P_HELLO | P_ARENA_A,
                                      frame(req(PUBLISH, 90, {"arena": A, "name": "w"})),
                                      two(FRAME, req(ATTACH, 1, {"name": "w"})),
                                      two(FDS, b"\x00" + req(REGISTER, 2, {"size": 4096})),
                                      two(FRAME, relu_att), cmd(SHUT),
                                      cmd(TURNS, b"\x02"), two(FRAME, relu_att),
                                      two(READ))
    s["two_clients_squat"] = session(P_HELLO | P_ARENA_A,
                                     two(FDS, b"\x00" + req(REGISTER, 1, {"size": 4096})),
                                     two(FRAME, req(PUBLISH, 2, {"arena": 2, "name": "w"})),
                                     frame(req(PUBLISH, 90, {"arena": A, "name": "w"})),
                                     frame(req(ATTACH, 91, {"name": "w"})),
                                     two(FRAME, req(UNPUBLISH, 3, {"name": "w"})),
                                     cmd(READ), two(READ))
    s["fill_arena"] = session(P_HELLO | P_ARENA_A | P_FILL | P_READ,
                              frame(softmax), frame(run(80, "layernorm",
                                                        [t(A, 0, [2, 8])],
                                                        [t(A, 1024, [2, 8])])))
    return s


# ---- wire and desc --------------------------------------------------------


def wire_seeds():
    s = {}
    d = bytes([8])  # OPD_MAX_DEPTH
    s["hello"] = d + req(HELLO, 1, {"protocol": 1, "client": "seed"})
    s["run"] = d + run(2, "softmax", [t(1, 0, [4, 16])], [t(1, 256, [4, 16])],
                       {"dim": -1})
    s["reply"] = d + mp([0, 3, -7, {"message": "softmax: input 0 (x) ..."}])
    s["scalars"] = d + mp([None, True, False, 0, 127, 128, -1, -32, -33, 255, 256,
                           65535, 65536, (1 << 32), (1 << 64) - 1, -(1 << 63),
                           1.5, "", "s" * 40, b"\x00\x01"])
    s["float32"] = d + b"\x92\xca\x7f\xc0\x00\x01\xca\x00\x00\x00\x01"
    s["wide_forms"] = d + (b"\x93\xdc\x00\x01\xc0\xde\x00\x01\xa1k\xc0"
                           b"\xdb\x00\x00\x00\x01x")
    s["nested_8"] = d + b"\x91" * 7 + b"\x90"
    s["nested_9"] = d + b"\x91" * 8 + b"\x90"
    s["depth_32"] = bytes([32]) + b"\x91" * 31 + b"\x80"
    s["big_count"] = d + b"\xdd\xff\xff\xff\xff\x00"
    s["ext"] = d + b"\xd4\x01\x02"
    s["trailing"] = d + b"\x90\x90"
    return s


def desc_seeds():
    s = {}

    def m(arena_class, desc, offset=0):
        return bytes([arena_class << 1]) + struct.pack("<Q", offset) + mp(desc)

    def raw(arena_class, offset, rank, dtype, contiguous, shape, strides=()):
        b = bytes([1 | arena_class << 1]) + struct.pack("<Q", offset)
        b += bytes([rank, dtype | contiguous << 4])
        b += b"".join(struct.pack("<q", x) for x in list(shape) + [0] * (8 - len(shape)))
        b += b"".join(struct.pack("<q", x) for x in strides)
        return b

    s["contiguous"] = m(3, t(1, 64, [2, 3, 4]))
    s["strided"] = m(3, t(1, 0, [4, 4], strides=[1, 4]))
    s["broadcast"] = m(2, t(1, 0, [1000, 4], strides=[0, 1]))
    s["rank0"] = m(2, t(1, 8, [], I64))
    s["empty_huge"] = m(3, t(1, 0, [0, 1 << 62, 1 << 62]))
    s["empty_bounded"] = m(2, t(1, 64, [1 << 20, 0, 1 << 20, 3]))
    s["overflow"] = m(7, t(1, 0, [1 << 40, 1 << 40, 1]))
    s["neg_stride"] = m(3, t(1, 0, [4, 4], strides=[4, -1]))
    s["misaligned"] = m(3, t(1, 4, [4], 4))
    s["rank9"] = m(3, t(1, 0, [1] * 9))
    s["raw_empty_huge"] = raw(3, 0, 3, F32, 1, [0, 1 << 62, 1 << 62])
    s["raw_strided_max"] = raw(7, 0, 2, F32, 0, [2, 2], [1 << 61, 1])
    s["raw_int64_max"] = raw(6, 0, 2, 4, 1, [(1 << 63) - 1, 0])
    return s


def gdef(inputs, consts, nodes, outputs, device=None):
    """A GRAPH_DEFINE body: inputs [(name, shape)], consts [(name, tensor)],
    nodes [(op, [ids], attrs)], outputs [ids]."""
    body = {"inputs": [{"name": n, "dtype": F32, "shape": list(sh)} for n, sh in inputs],
            "consts": [{"name": n, "tensor": c} for n, c in consts],
            "nodes": [dict({"op": op, "in": ins, "n_out": 1}, **({"attrs": a} if a else {}))
                      for op, ins, a in nodes],
            "outputs": outputs}
    if device:
        body["device"] = device
    return body


def graph_seeds():
    s = {}
    mlp = gdef([("x", [2, 8])],
               [("w1", t(1, 0, [8, 16])), ("b1", t(1, 512, [16])),
                ("w2", t(1, 1024, [16, 4])), ("b2", t(1, 2048, [4]))],
               [("matmul", [0, 1], None), ("add", [5, 2], None), ("relu", [6], None),
                ("matmul", [7, 3], None), ("add", [8, 4], None)], [9])
    s["mlp"] = mp(mlp)
    s["norms"] = mp(gdef([("x", [4, 32])], [("g", t(1, 0, [32])), ("b", t(1, 128, [32]))],
                         [("layernorm", [0, 1, 2], {"eps": 1e-5}), ("gelu", [3], None),
                          ("softmax", [4], None), ("rmsnorm", [5, 1], None)], [6, 4]))
    s["out_of_order"] = mp(gdef([("x", [16])], [], [("relu", [2], None), ("relu", [0], None)],
                                [1]))
    s["cycle"] = mp(gdef([("x", [4])], [], [("relu", [0], None), ("add", [1, 3], None),
                                            ("relu", [2], None)], [3]))
    s["bad_shape"] = mp(gdef([("x", [3, 8])], [("w", t(1, 0, [16, 4]))],
                             [("matmul", [0, 1], None)], [2]))
    s["nms"] = mp(gdef([("boxes", [8, 4]), ("scores", [8])], [],
                       [("nms", [0, 1], {"iou": 0.5})], [2]))
    s["conv"] = mp(gdef([("x", [1, 2, 6, 6])], [("w", t(1, 0, [4, 2, 3, 3]))],
                        [("conv2d", [0, 1], {"padding": 1}), ("relu", [2], None)], [3]))
    s["cuda"] = mp(gdef([("x", [4])], [], [("relu", [0], None)], [1], "cuda:0"))
    return s


def main():
    total = 0
    for name, seeds in (("wire", wire_seeds()), ("desc", desc_seeds()),
                        ("session", session_seeds()), ("graph", graph_seeds())):
        d = os.path.join(HERE, "corpus", name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for k, v in sorted(seeds.items()):
            with open(os.path.join(d, k), "wb") as f:
                f.write(v)
            total += len(v)
        print(f"tests/fuzz/corpus/{name}: {len(seeds)} seeds")
    print(f"{total} bytes in all")


if __name__ == "__main__":
    main()
