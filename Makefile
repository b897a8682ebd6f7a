# opd: one entry point for deps, build, test, run, bench, install.
#
#   make            build/opd, build/libopd.so, build/libopd.a, build/opctl
#   make deps       install the Debian packages opd needs (apt-get, as root
#                   or through sudo)
#   make test       build and run every test (installs what is missing)
#   make run        build, start a daemon on a private socket, run the
#                   example workload against it, stop it
#   make bench      run the benchmarks, print their figures
#   make plugins    the example operator plugins (examples/plugins) and the
#                   tests' plugins, into build/plugins/; build/pkgconfig/opd.pc
#   make install    install like a package: binaries, libopd, headers,
#                   opd.pc, Python package, unit, SysV script, config,
#                   man pages (PREFIX, DESTDIR; see "install" below)
#
# Variables: CUDA=auto|0|1 (auto: CUDA sources compile when nvcc is found),
# BLAS=1|0 (0: no OpenBLAS, the CPU matmul/conv2d fast kernels fall back to
# the reference), ASAN=1 (address + undefined sanitizers), DEBUG=1 (-O0
# -g3), PREFIX, TORCH=auto|0|1 (1: libopd carries the C kernels of
# torch.ops.opd on CUDA tensors, client/torch/, which look torch up at run
# time and need nothing of it to build; auto: 1 when python3 or
# /usr/bin/python3 finds torch).
#
#   make CUDA=1 BLAS=0 build/tests/gpu_kernels
#                   the CUDA kernels' check against the CPU reference and
#                   their benchmark (--bench); needs only nvcc, cudart and
#                   cuBLASLt (the GPU machine)

CC      ?= cc
CUDA    ?= auto
BLAS    ?= 1
ASAN    ?= 0
DEBUG   ?= 0
PREFIX  ?= /usr/local
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
.DEFAULT_GOAL := all
B       := build

ifeq ($(CUDA),auto)
  CUDA_ON := $(if $(NVCC),1,0)
else
  CUDA_ON := $(CUDA)
endif
TORCH   ?= auto
ifeq ($(TORCH),auto)
  TORCH_ON := $(shell for p in python3 /usr/bin/python3; do $$p -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' 2>/dev/null && { echo 1; exit; }; done; echo 0)
else
  TORCH_ON := $(TORCH)
endif
# libopd is relinked when TORCH_ON changes (its objects differ)
$(shell mkdir -p $(B); [ "$$(cat $(B)/.torch 2>/dev/null)" = "$(TORCH_ON)" ] || { echo $(TORCH_ON) > $(B)/.torch; rm -f $(B)/libopd.so $(B)/libopd.a; })

OPENBLAS_INC := /usr/include/x86_64-linux-gnu/openblas-pthread
OPENBLAS_LIB := /usr/lib/x86_64-linux-gnu/openblas-pthread

CPPFLAGS += -Iinclude -I. -I$(OPENBLAS_INC) -D_GNU_SOURCE
CFLAGS   += -std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes -fPIC -pthread -MMD -MP \
            -Werror=implicit-function-declaration
ifeq ($(DEBUG),1)
  CFLAGS += -O0 -g3
else
  CFLAGS += -O2 -g
endif
ifeq ($(ASAN),1)
  CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer
  LDFLAGS += -fsanitize=address,undefined
endif
LDFLAGS += -pthread
# TRACE=1: every C function's entry recorded (tests/arch/ftrace.c, linked
# into opd and libopd.so) for the request-path check,
# tests/arch/request_path.py; build it in its own B= (make trace).
TRACE ?= 0
ifeq ($(TRACE),1)
  CFLAGS += -finstrument-functions
  TRACE_OBJ := $(B)/obj/tests/arch/ftrace.o
endif
# DEPS=dir: take libuv and msgpack-c from a folder of unpacked Debian
# packages (headers in dir/include, static archives in dir/lib) — how the
# daemon is built on a machine where they cannot be installed (the GPU
# machine; see docs/gpu.md). Default: the system's.
DEPS ?=
ifneq ($(DEPS),)
  CPPFLAGS += -I$(DEPS)/include
  UV_LIB := $(DEPS)/lib/libuv_a.a
  MSGPACK_LIB := $(DEPS)/lib/libmsgpackc.a
  # a shared library cannot take Debian's non-PIC archive: the .so it ships
  SO_MSGPACK_LIB := -L$(abspath $(DEPS))/lib -l:libmsgpackc.so.2 \
                    -Wl,-rpath,$(abspath $(DEPS))/lib
else
  UV_LIB := -luv
  MSGPACK_LIB := -lmsgpackc
  SO_MSGPACK_LIB := -lmsgpackc
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
ifeq ($(BLAS),0)
  CPPFLAGS += -DOPD_NO_BLAS
  BLAS_LIBS :=
else
  BLAS_LIBS := -L$(OPENBLAS_LIB) -lopenblas
endif
# The service's libraries (daemon/conffile.c, service.c, metrics.c), each
# optional: auto uses it when pkg-config finds it. INIH: the config file
# (libinih-dev); SYSTEMD: sd_notify and the watchdog (libsystemd-dev);
# MHD: the metrics endpoint (libmicrohttpd-dev). Without one, the feature
# says at run time that opd was built without it.
INIH    ?= auto
SYSTEMD ?= auto
MHD     ?= auto
have = $(if $(filter auto,$(1)),$(shell pkg-config --exists $(2) 2>/dev/null && echo 1 || echo 0),$(1))
INIH_ON    := $(call have,$(INIH),inih)
SYSTEMD_ON := $(call have,$(SYSTEMD),libsystemd)
MHD_ON     := $(call have,$(MHD),libmicrohttpd)
SVC_LIBS :=
ifeq ($(INIH_ON),1)
  CPPFLAGS += -DOPD_HAVE_INIH
  SVC_LIBS += -linih
endif
ifeq ($(SYSTEMD_ON),1)
  CPPFLAGS += -DOPD_HAVE_SYSTEMD
  SVC_LIBS += -lsystemd
endif
ifeq ($(MHD_ON),1)
  CPPFLAGS += -DOPD_HAVE_MICROHTTPD
  SVC_LIBS += -lmicrohttpd
endif
# the objects that differ with them rebuild when they change
SVC_STAMP := $(B)/.svc
$(shell mkdir -p $(B); [ "$$(cat $(SVC_STAMP) 2>/dev/null)" = "$(INIH_ON)$(SYSTEMD_ON)$(MHD_ON)" ] || echo $(INIH_ON)$(SYSTEMD_ON)$(MHD_ON) > $(SVC_STAMP))
$(B)/obj/daemon/conffile.o $(B)/obj/daemon/service.o $(B)/obj/daemon/metrics.o: $(SVC_STAMP)
DAEMON_LIBS := $(UV_LIB) $(MSGPACK_LIB) $(BLAS_LIBS) $(SVC_LIBS) -lm
# The objects that differ with BLAS rebuild when it changes (stamp file).
BLAS_STAMP := $(B)/.blas
$(shell mkdir -p $(B); [ "$$(cat $(BLAS_STAMP) 2>/dev/null)" = "$(BLAS)" ] || echo $(BLAS) > $(BLAS_STAMP))
$(B)/obj/kernels/matmul/cpu.o $(B)/obj/kernels/conv2d/cpu.o $(B)/obj/kernels/common/gemm.o: $(BLAS_STAMP)
ifeq ($(CUDA_ON),1)
  CPPFLAGS += -isystem $(CUDA_HOME)/include
  # cudart static (nvcc's default); cuBLASLt from the toolkit's lib64
  CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
               -lcublasLt -lcudart_static -ldl -lrt
endif
CLIENT_LIBS := $(MSGPACK_LIB)

# CUDA code: machine code for sm_80 and sm_90 plus compute_90
# PTX for newer GPUs. -MMD: header dependencies, as for C.
NVCC_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
NVCCFLAGS := -std=c++17 -O2 -Iinclude -I. $(NVCC_ARCH) -Xcompiler -fPIC,-Wall -MMD -MP
# TEST_OPS=1 compiles operators that exist only for tests (kernels/fault:
# a CUDA kernel that poisons its context on purpose). Use a separate B=.
TEST_OPS ?= 0
ifeq ($(TEST_OPS),1)
  CPPFLAGS += -DOPD_TEST_OPS
  NVCCFLAGS += -DOPD_TEST_OPS
endif

$(info opd: CC=$(CC) CUDA=$(CUDA)->$(CUDA_ON)$(if $(NVCC), (nvcc: $(NVCC)),) BLAS=$(BLAS) ASAN=$(ASAN) DEBUG=$(DEBUG) INIH=$(INIH_ON) SYSTEMD=$(SYSTEMD_ON) MHD=$(MHD_ON) TORCH=$(TORCH)->$(TORCH_ON))

COMMON_SRC  := $(sort $(wildcard common/*.c))
KERNEL_SRC  := $(sort $(wildcard kernels/*/*.c))
# the device backend: CUDA, or the none backend in a build without CUDA
# (daemon/backend/backend.h)
DAEMON_SRC  := $(filter-out daemon/main.c,$(sort $(wildcard daemon/*.c daemon/run/*.c daemon/mem/*.c daemon/graph/*.c))) \
               daemon/backend/cpu.c
ifeq ($(CUDA_ON),1)
  DAEMON_SRC += $(sort $(wildcard daemon/backend/cuda/*.c))
else
  DAEMON_SRC += daemon/backend/none.c
endif
CLIENT_SRC  := $(sort $(wildcard client/libopd/*.c))
# BENCH=1: libopd with what exists only to compare and diagnose (OPD_BENCH:
# OPD_STREAM_LEGACY's side|fork|busy|word|kernel, OPD_STREAM_TRACE,
# OPD_STREAM_STAMPS, the exported opd__stream_legacy), for bench/ and the
# GPU suite; libopd's objects rebuild when it changes (stamp file)
BENCH ?= 0
BENCH_STAMP := $(B)/.bench
$(shell mkdir -p $(B); [ "$$(cat $(BENCH_STAMP) 2>/dev/null)" = "$(BENCH)" ] || echo $(BENCH) > $(BENCH_STAMP))
ifeq ($(BENCH),1)
  $(info opd: BENCH=1 (libopd with the comparison-only stream modes))
endif
# torch's dispatcher kernels (client/torch), in libopd with TORCH=1
TORCH_SRC   := $(sort $(wildcard client/torch/*.c))
UNIT_SRC    := $(sort $(wildcard tests/unit/*.c))
OPS_SRC     := $(sort $(wildcard tests/ops/*.c))
INTEG_SRC   := $(sort $(wildcard tests/integration/*.c))
CUDA_SRC    := $(sort $(wildcard kernels/*/*.cu daemon/*.cu daemon/backend/cuda/*.cu))

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))
COMMON_OBJ := $(call obj,$(COMMON_SRC))
KERNEL_OBJ := $(call obj,$(KERNEL_SRC))
DAEMON_OBJ := $(call obj,$(DAEMON_SRC))
TORCH_OBJ  := $(call obj,$(TORCH_SRC))
CLIENT_OBJ := $(call obj,$(CLIENT_SRC))
$(CLIENT_OBJ) $(TORCH_OBJ): $(BENCH_STAMP)
ifeq ($(BENCH),1)
$(CLIENT_OBJ) $(TORCH_OBJ): CPPFLAGS += -DOPD_BENCH
endif
CLIENT_OBJ += $(if $(filter 1,$(TORCH_ON)),$(TORCH_OBJ))
UNIT_OBJ   := $(call obj,$(UNIT_SRC))
OPS_OBJ    := $(call obj,$(OPS_SRC))
INTEG_OBJ  := $(call obj,$(INTEG_SRC))
CUDA_OBJ   := $(patsubst %.cu,$(B)/obj/%.cu.o,$(CUDA_SRC))
ifneq ($(CUDA_ON),1)
  CUDA_OBJ :=
endif

BINS := $(B)/opd $(B)/libopd.so $(B)/libopd.a $(B)/opctl
EXAMPLES := $(B)/examples/softmax_conv $(B)/examples/hft_server/publisher \
            $(B)/examples/hft_server/client
BENCHES := $(patsubst bench/%.c,$(B)/bench/%,$(sort $(wildcard bench/*.c)))

.PHONY: all deps check-deps test test-c run bench install clean cuda python-lib plugins
all: check-deps $(BINS) $(EXAMPLES) cuda

# ---- dependencies --------------------------------------------------------
DEB_PKGS := build-essential pkg-config libuv1-dev libmsgpack-dev \
            libopenblas-pthread-dev libcriterion-dev \
            python3 python3-numpy python3-pytest python3-torch python3-venv clang libclang-rt-14-dev \
            python3-dask python3-distributed python3-matplotlib \
            libinih-dev libsystemd-dev libmicrohttpd-dev scdoc \
            python3-prometheus-client debhelper systemd
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

deps:
	$(SUDO) apt-get update
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y --no-install-recommends $(DEB_PKGS)

# Installs the packages only when a header or library is missing, so that
# `make run` and `make test` work alone on a fresh machine.
check-deps:
	@missing=""; \
	 [ -f /usr/include/uv.h ] || missing=1; \
	 [ -f /usr/include/msgpack.h ] || missing=1; \
	 [ -f $(OPENBLAS_INC)/cblas.h ] || missing=1; \
	 [ -f /usr/include/criterion/criterion.h ] || missing=1; \
	 [ -f /usr/include/ini.h ] || missing=1; \
	 [ -f /usr/include/systemd/sd-daemon.h ] || missing=1; \
	 [ -f /usr/include/microhttpd.h ] || missing=1; \
	 command -v scdoc >/dev/null 2>&1 || missing=1; \
	 /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null || missing=1; \
	 /usr/bin/python3 -c 'import numpy, pytest, torch' 2>/dev/null || missing=1; \
	 command -v clang >/dev/null 2>&1 || missing=1; \
	 ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || missing=1; \
	 if [ -n "$$missing" ]; then echo "opd: installing missing packages"; $(MAKE) --no-print-directory deps; fi

# ---- build ---------------------------------------------------------------
# torch calls the C kernels of client/torch and they throw through their frames
$(TORCH_OBJ): CFLAGS += -fexceptions
$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(B)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

cuda: $(CUDA_OBJ)

$(B)/opd: $(B)/obj/daemon/main.o $(DAEMON_OBJ) $(KERNEL_OBJ) $(CUDA_OBJ) $(COMMON_OBJ) $(TRACE_OBJ)
	$(CC) $(LDFLAGS) $^ -o $@ $(DAEMON_LIBS) $(CUDA_LIBS) $(if $(CUDA_OBJ),-lstdc++)

$(B)/libopd.so: $(CLIENT_OBJ) $(COMMON_OBJ) $(TRACE_OBJ)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libopd.so.0 $^ -o $@ $(SO_MSGPACK_LIB) -ldl

$(B)/libopd.a: $(CLIENT_OBJ) $(COMMON_OBJ)
	rm -f $@ && ar rcs $@ $^

$(B)/opctl: $(B)/obj/client/opctl.o $(B)/obj/client/jread.o $(B)/libopd.a
	$(CC) $(LDFLAGS) $^ -o $@ $(CLIENT_LIBS) -lm

$(B)/examples/%: examples/%.c $(B)/libopd.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< -o $@ $(LDFLAGS) $(B)/libopd.a $(CLIENT_LIBS) -lm

# Benchmarks link the client library and the kernels (for in-process
# baselines); none of them needs the daemon's objects.
$(B)/bench/%: bench/%.c $(B)/libopd.a $(KERNEL_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< -o $@ $(LDFLAGS) $(B)/libopd.a $(KERNEL_OBJ) $(DAEMON_LIBS)

# ---- operator plugins (docs/operators.md) ---------------------------------
# opd.pc for plugins built against this tree (includedir: its include/);
# `make install` writes the installed one. Each example plugin is built by
# its own Makefile, as a user builds a copy of it, through pkg-config.
OPD_PC_VERSION := $(shell sed -n 's/^\#define OPD_VERSION "\(.*\)"/\1/p' include/opd/protocol.h)
define opd_pc
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(1)|' -e 's|@INCLUDEDIR@|$(2)|' -e 's|@LIBDIR@|$(3)|' \
	  -e 's|@VERSION@|$(OPD_PC_VERSION)|' packaging/opd.pc.in > $@
endef
$(B)/pkgconfig/opd.pc: packaging/opd.pc.in include/opd/protocol.h
	$(call opd_pc,$(abspath .),$(abspath include),$(abspath $(B)))

PLUGIN_EXAMPLES := hello conv3x3_bias_relu
PLUGIN_SOS := $(patsubst %,$(B)/plugins/%.so,$(PLUGIN_EXAMPLES))
# tests/plugins/testplugin.c, one variant per -DVARIANT_<name>: the ops the
# integration tests misuse (testops) and plugins the daemon must refuse
TEST_PLUGINS := testops bad_abi no_init dup bad_schema bad_attr
TEST_PLUGIN_SOS := $(patsubst %,$(B)/plugins/test/%.so,$(TEST_PLUGINS))
.PHONY: FORCE
# (without pkg-config, as on the GPU machine: the include dir directly)
PLUGIN_CFLAGS := $(if $(shell command -v pkg-config 2>/dev/null),,OPD_CFLAGS=-I$(abspath include))
$(PLUGIN_SOS): $(B)/plugins/%.so: $(B)/pkgconfig/opd.pc FORCE
	@PKG_CONFIG_PATH=$(abspath $(B)/pkgconfig) $(MAKE) --no-print-directory \
	  -C examples/plugins/$* O=$(abspath $(B)/plugins) CUDA=$(CUDA_ON) $(PLUGIN_CFLAGS)
$(B)/plugins/test/%.so: tests/plugins/testplugin.c include/opd/op.h include/opd/protocol.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -Wall -Wextra -fPIC -shared -Iinclude -DVARIANT_$* $< -o $@
plugins: $(PLUGIN_SOS) $(TEST_PLUGIN_SOS)

# ---- tests ---------------------------------------------------------------
$(B)/tests/unit: $(UNIT_OBJ) $(DAEMON_OBJ) $(KERNEL_OBJ) $(CUDA_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ -lcriterion $(DAEMON_LIBS) $(CUDA_LIBS) $(if $(CUDA_OBJ),-lstdc++)

# Operator tests need only the kernels: they build while the daemon changes.
$(B)/tests/ops: $(OPS_OBJ) $(KERNEL_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ -lcriterion $(BLAS_LIBS) -lm

# The CUDA kernels against the CPU reference, and their benchmark: a plain
# program (no criterion), linked by nvcc with the kernels' objects and the
# shared cudart and cuBLASLt. Build it with CUDA=1 BLAS=0 on the GPU machine.
GPU_KOBJ := $(patsubst %.cu,$(B)/obj/%.cu.o,$(sort $(wildcard kernels/*/*.cu)))
$(B)/tests/gpu_kernels: $(B)/obj/tests/gpu/gpu_kernels.cu.o $(KERNEL_OBJ) $(GPU_KOBJ)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_ARCH) -cudart shared $^ -o $@ -L$(CUDA_HOME)/lib64 \
	  -Xlinker -rpath,$(CUDA_HOME)/lib64 -lcublasLt $(BLAS_LIBS) -lm -Xcompiler -pthread

# GPU machine: the CUDA backend through libopd (plain C, no criterion)
$(B)/tests/%_gpu: tests/gpu/%_gpu.c $(B)/libopd.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< -o $@ $(LDFLAGS) $(B)/libopd.a $(CLIENT_LIBS) -lm

# GPU machine: a tiny kernel launched in-process, the latency floor
$(B)/bench/bench_launch: bench/bench_launch.cu $(KERNEL_OBJ) $(CUDA_OBJ)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $< $(filter %.o,$^) -o $@ -lcublasLt $(BLAS_LIBS)

# GPU machine: another MPS process's queued work against a client's own
# kernels (a probe kept with its record, docs/records/2026-12-01-stream-ordered-cost;
# sm_90: dependent launches)
$(B)/bench/probe_queue: docs/records/2026-12-01-stream-ordered-cost/probe_queue.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -Iinclude -I. -gencode arch=compute_90,code=sm_90 $< -o $@

# GPU machine: an opd-ordered forward in C, both processes (a diagnosis
# probe kept with its record; sm_90: dependent launches)
$(B)/bench/probe_stretch: docs/records/2026-12-01-stream-ordered-cost/probe_stretch.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -Iinclude -I. -gencode arch=compute_90,code=sm_90 $< -o $@

# GPU machine: a CUDA client importing its own memory (needs nvcc)
$(B)/tests/ipc_gpu: tests/gpu/ipc_gpu.cu $(B)/libopd.a
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(if $(DEPS),-I$(DEPS)/include) $< -o $@ $(B)/libopd.a $(CLIENT_LIBS) -lcuda

# GPU machine: where a stream-ordered run's time goes, from a CUDA client
$(B)/bench/bench_stream: bench/bench_stream.cu $(B)/libopd.a
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(if $(DEPS),-I$(DEPS)/include) $< -o $@ $(B)/libopd.a $(CLIENT_LIBS) -ldl

# GPU machine: libopd's choices for an enqueued run, side by side
$(B)/bench/bench_enqueue: bench/bench_enqueue.cu $(B)/libopd.a
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(if $(DEPS),-I$(DEPS)/include) $< -o $@ $(B)/libopd.a $(CLIENT_LIBS) -ldl

# GPU machine: GPU time of handing work between two processes' streams
$(B)/bench/bench_handoff: bench/bench_handoff.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $< -o $@ -lcuda

# GPU machine: a CUDA client's asynchronous, stream-ordered runs
$(B)/tests/async_gpu: tests/gpu/async_gpu.cu $(B)/libopd.a
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(if $(DEPS),-I$(DEPS)/include) $< -o $@ $(B)/libopd.a $(CLIENT_LIBS) -ldl

$(B)/tests/integration: $(INTEG_OBJ) $(B)/libopd.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ -lcriterion $(CLIENT_LIBS) -lm

# Chaos and exhaustion tests (tests/chaos): killed clients, floods, unread
# replies, a low fd limit, measured from the daemon's /proc. Their own
# binary, with the integration harness; run once by tests/run.sh.
CHAOS_OBJ := $(call obj,$(sort $(wildcard tests/chaos/*.c)))
$(B)/tests/chaos: $(CHAOS_OBJ) $(B)/obj/tests/integration/harness.o $(B)/libopd.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ -lcriterion $(CLIENT_LIBS) -lm

# the C kernels for torch's dispatcher (client/torch, linked here whatever
# TORCH says) against toy shims of torch's stable C ABI
# (tests/torch/fake_torch.c; run by tests/python): -rdynamic so that their
# dlsym finds the shims in the program itself
$(B)/tests/fake_torch: tests/torch/fake_torch.c $(TORCH_OBJ) $(B)/libopd.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -rdynamic $< -o $@ $(TORCH_OBJ) $(B)/libopd.a $(CLIENT_LIBS) -ldl

test: all plugins $(B)/tests/unit $(B)/tests/ops $(B)/tests/integration $(B)/tests/chaos \
      $(B)/bench/bench_graph \
      $(B)/tests/fake_torch
	@OPD_BIN=$(abspath $(B)/opd) OPD_BUILD=$(abspath $(B)) \
	  OPD_DAEMON_OBJ="$(B)/obj/daemon/main.o $(DAEMON_OBJ) $(KERNEL_OBJ) $(CUDA_OBJ) $(COMMON_OBJ)" \
	  OPD_CLIENT_OBJ="$(CLIENT_OBJ) $(COMMON_OBJ)" bash tests/run.sh

# The unit, integration (once per transport) and chaos suites with the
# daemon, libopd and the tests built with ASAN=1 (address + undefined) in
# ASAN_B. CPU only (CUDA=0): the sanitizers check the daemon's own code.
# A leak, a memory error or undefined behaviour fails the run: the daemon
# aborts (its exit status fails the test that stops it) and so does a test
# binary; leaks inside libcriterion itself (not ours) are suppressed.
# fake_torch (libopd's C kernels for torch, toy shims) runs too, against
# an ASAN daemon, where no CUDA driver is installed.
# TEST_ASAN_WAITS: the transports of the integration suite.
ASAN_B ?= $(B)/asan
TEST_ASAN_WAITS ?= adaptive socket spin
.PHONY: test-asan
test-asan: check-deps
	@$(MAKE) --no-print-directory ASAN=1 CUDA=0 B=$(ASAN_B) $(ASAN_B)/opd \
	  $(ASAN_B)/opctl $(ASAN_B)/tests/unit $(ASAN_B)/tests/integration \
	  $(ASAN_B)/tests/chaos $(ASAN_B)/tests/fake_torch plugins
	@echo 'leak:libcriterion.so' > $(ASAN_B)/lsan.supp
	@export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	   UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	   LSAN_OPTIONS=suppressions=$(abspath $(ASAN_B)/lsan.supp):print_suppressions=0 \
	   OPD_BIN=$(abspath $(ASAN_B)/opd) OPD_BUILD=$(abspath $(ASAN_B)); \
	 status=0; t0=$$(date +%s); \
	 echo "== asan: unit"; $(ASAN_B)/tests/unit --jobs 2 || status=1; \
	 for w in $(TEST_ASAN_WAITS); do \
	   echo "== asan: integration over $$w"; \
	   OPD_WAIT=$$w $(ASAN_B)/tests/integration --jobs 2 || status=1; \
	 done; \
	 echo "== asan: chaos"; $(ASAN_B)/tests/chaos --jobs 2 || status=1; \
	 if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then \
	   echo "== asan: fake_torch skipped (a CUDA driver is here: its toy stream would reach it)"; \
	 else \
	   echo "== asan: torch's C kernels against toy shims (fake_torch)"; \
	   s=$$(mktemp -u /tmp/opd-asan-ft.XXXXXX.sock); \
	   $(ASAN_B)/opd --socket $$s >$(ASAN_B)/fake_torch-opd.log 2>&1 & dp=$$!; \
	   for i in $$(seq 1 100); do [ -S $$s ] && break; sleep 0.1; done; \
	   $(ASAN_B)/tests/fake_torch $$s cpu >$(ASAN_B)/fake_torch.txt 2>&1 || \
	     { status=1; cat $(ASAN_B)/fake_torch.txt; }; \
	   tail -n 1 $(ASAN_B)/fake_torch.txt; \
	   kill -TERM $$dp; wait $$dp || { status=1; tail -n 20 $(ASAN_B)/fake_torch-opd.log; }; \
	 fi; \
	 [ $$status = 0 ] && r=passed || r=FAILED; \
	 echo "test-asan: $$r ($$(( $$(date +%s) - t0 )) s of tests)"; \
	 exit $$status

# ---- fuzzing (tests/fuzz/README.md) --------------------------------------
#   make fuzz FUZZ_SECONDS=N   builds the libFuzzer targets and runs each for
#                              N seconds (default 60) on a copy of its seed
#                              corpus; prints execs, exec/s, cov and ft
#   make fuzz-build            only builds them ($(B)/fuzz/fuzz_<target>)
# Needs clang and its libFuzzer runtime (Debian: clang libclang-rt-14-dev).
# The code under test is compiled by clang into $(B)/fuzz/obj (never mixed
# with the gcc objects of $(B)/obj), with the CPU-only CUDA stand-in and no
# BLAS, and archived, so that each target links only what it calls.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := wire desc session graph
FUZZ_SAN     := address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS  := -std=c11 -g -O1 -fno-omit-frame-pointer -pthread -Wall -Wno-unknown-attributes \
                -Iinclude -I. -D_GNU_SOURCE -DOPD_NO_BLAS $(filter -DOPD_HAVE_%,$(CPPFLAGS)) \
                $(if $(DEPS),-I$(DEPS)/include)
FUZZ_SRC     := $(COMMON_SRC) $(KERNEL_SRC) \
                $(filter-out daemon/main.c,$(sort $(wildcard daemon/*.c daemon/run/*.c daemon/mem/*.c daemon/graph/*.c))) \
                daemon/backend/cpu.c daemon/backend/none.c
FUZZ_OBJ     := $(patsubst %.c,$(B)/fuzz/obj/%.o,$(FUZZ_SRC))
FUZZ_BINS    := $(patsubst %,$(B)/fuzz/fuzz_%,$(FUZZ_TARGETS))
.PHONY: fuzz fuzz-build fuzz-check

fuzz-check:
	@command -v $(FUZZ_CC) >/dev/null 2>&1 || { echo "fuzz: $(FUZZ_CC) not \
	found; fuzzing needs clang and libFuzzer (Debian: apt-get install clang \
	libclang-rt-14-dev, or make deps)"; exit 1; }
	@echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; return (int)(n & 0); }' | \
	 $(FUZZ_CC) -fsanitize=fuzzer,address,undefined -x c - -o /dev/null 2>/dev/null || \
	 { echo "fuzz: $(FUZZ_CC) cannot link -fsanitize=fuzzer,address,undefined; \
	the libFuzzer runtime is missing (Debian: apt-get install libclang-rt-14-dev)"; exit 1; }

$(B)/fuzz/obj/%.o: %.c | fuzz-check
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,$(FUZZ_SAN) -MMD -MP -c $< -o $@

$(B)/fuzz/libopd-fuzz.a: $(FUZZ_OBJ)
	rm -f $@ && ar rcs $@ $^

$(B)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(B)/fuzz/libopd-fuzz.a | fuzz-check
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer,$(FUZZ_SAN) -MMD -MP $< -o $@ \
	  $(B)/fuzz/libopd-fuzz.a $(UV_LIB) $(MSGPACK_LIB) $(SVC_LIBS) -lm

fuzz-build: fuzz-check $(FUZZ_BINS)

fuzz: fuzz-build
	@bash tests/fuzz/run.sh $(B)/fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# ---- run, bench, install -------------------------------------------------
run: all
	@bash examples/run.sh $(B)

bench: all $(BENCHES)
	@bash bench/run.sh $(B)

# ---- install ---------------------------------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=] installs what a package would:
# the binaries, libopd (.so.0, .so, .a), the headers, opd.pc, the Python
# package, the systemd unit and SysV script with $(BINDIR) written into
# them, /etc/default/opd, an example /etc/opd/opd.conf (never over an
# existing one), the man pages (rendered by scdoc), and runs ldconfig
# (not under DESTDIR). A build without libsystemd gets Type=simple.
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR     ?= $(PREFIX)/share/man
DOCDIR     ?= $(PREFIX)/share/doc/opd
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
# Debian's python3 looks in /usr/lib/python3/dist-packages and, for local
# installs, /usr/local/lib/python3.N/dist-packages
PYVER      := $(shell /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHONDIR  ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python$(PYVER)/dist-packages)
SCDOC      ?= scdoc
MANS := $(B)/man/opd.8 $(B)/man/opd.conf.5 $(B)/man/opctl.1
.PHONY: man
man: $(MANS)
$(B)/man/%: docs/man/%.scd
	@mkdir -p $(dir $@)
	@command -v $(SCDOC) >/dev/null 2>&1 || { echo "man: $(SCDOC) not found (Debian: apt-get install scdoc, or make deps)"; exit 1; }
	$(SCDOC) < $< > $@

SVC_TYPE := $(if $(filter 1,$(SYSTEMD_ON)),notify,simple)
SVC_WATCHDOG := $(if $(filter 1,$(SYSTEMD_ON)),WatchdogSec=10s,\# WatchdogSec: opd was built without libsystemd)
$(B)/packaging/opd.service: packaging/opd.service.in $(SVC_STAMP)
	@mkdir -p $(dir $@)
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@TYPE@|$(SVC_TYPE)|' \
	    -e 's|@WATCHDOG@|$(SVC_WATCHDOG)|' $< > $@
$(B)/packaging/opd.init: packaging/opd.init.in
	@mkdir -p $(dir $@)
	sed -e 's|@BINDIR@|$(BINDIR)|g' $< > $@
$(B)/packaging/opd.pc: packaging/opd.pc.in include/opd/protocol.h
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e "s|@VERSION@|$$(sed -n 's/^#define OPD_VERSION \"\(.*\)\"/\1/p' include/opd/protocol.h)|" $< > $@
PKG_FILES := $(B)/packaging/opd.service $(B)/packaging/opd.init $(B)/packaging/opd.pc
# (phony: the generated files depend on BINDIR etc., which make cannot see)
.PHONY: $(PKG_FILES)

install: all install-files
	if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ]; then ldconfig; fi

# the files alone (what the .deb's rules call; its maintainer scripts run
# ldconfig)
.PHONY: install-files
install-files: $(BINS) $(MANS) $(PKG_FILES)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig \
	  $(DESTDIR)$(INCLUDEDIR)/opd $(DESTDIR)$(MANDIR)/man1 \
	  $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(DOCDIR) \
	  $(DESTDIR)$(SYSCONFDIR)/opd $(DESTDIR)$(SYSCONFDIR)/default \
	  $(DESTDIR)$(SYSCONFDIR)/init.d $(DESTDIR)$(SYSCONFDIR)/logrotate.d $(DESTDIR)$(UNITDIR) \
	  $(DESTDIR)$(PYTHONDIR)/opd
	install -m 755 $(B)/opd $(B)/opctl $(DESTDIR)$(BINDIR)/
	install -m 644 $(B)/libopd.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(B)/libopd.so $(DESTDIR)$(LIBDIR)/libopd.so.0
	ln -sf libopd.so.0 $(DESTDIR)$(LIBDIR)/libopd.so
	install -m 644 include/opd/opd.h include/opd/graph.h include/opd/protocol.h include/opd/op.h \
	  $(DESTDIR)$(INCLUDEDIR)/opd/
	install -m 644 $(B)/packaging/opd.pc $(DESTDIR)$(LIBDIR)/pkgconfig/
	install -m 644 python/opd/*.py $(DESTDIR)$(PYTHONDIR)/opd/
	install -m 644 $(B)/man/opctl.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(B)/man/opd.conf.5 $(DESTDIR)$(MANDIR)/man5/
	install -m 644 $(B)/man/opd.8 $(DESTDIR)$(MANDIR)/man8/
	install -m 644 docs/operations.md $(DESTDIR)$(DOCDIR)/
	install -m 644 $(B)/packaging/opd.service $(DESTDIR)$(UNITDIR)/
	install -m 755 $(B)/packaging/opd.init $(DESTDIR)$(SYSCONFDIR)/init.d/opd
	install -m 644 packaging/opd.logrotate $(DESTDIR)$(SYSCONFDIR)/logrotate.d/opd
	[ -e $(DESTDIR)$(SYSCONFDIR)/default/opd ] || \
	  install -m 644 packaging/opd.default $(DESTDIR)$(SYSCONFDIR)/default/opd
	[ -e $(DESTDIR)$(SYSCONFDIR)/opd/opd.conf ] || \
	  install -m 644 packaging/opd.conf $(DESTDIR)$(SYSCONFDIR)/opd/opd.conf

# make deb: a Debian package (debhelper; packaging/debian) built from a
# copy of the tree in $(B)/deb, so that nothing lands outside it:
# $(B)/deb/opd_<version>_<arch>.deb. It installs everything `make install`
# does under /usr, creates the opd user and group and enables the service.
OPD_VERSION_STR = $(shell sed -n 's/^\#define OPD_VERSION "\(.*\)"/\1/p' include/opd/protocol.h)
.PHONY: deb
deb:
	@command -v dpkg-buildpackage >/dev/null 2>&1 || { echo "deb: dpkg-buildpackage not found (Debian: apt-get install debhelper dpkg-dev)"; exit 1; }
	rm -rf $(B)/deb && mkdir -p $(B)/deb/opd-$(OPD_VERSION_STR)
	git ls-files -z --cached --others --exclude-standard | \
	  tar --null -T - -cf - | tar -xf - -C $(B)/deb/opd-$(OPD_VERSION_STR)
	cp -a packaging/debian $(B)/deb/opd-$(OPD_VERSION_STR)/debian
	cd $(B)/deb/opd-$(OPD_VERSION_STR) && env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS \
	  dpkg-buildpackage -us -uc -b
	@ls $(B)/deb/*.deb

# Python: copies libopd.so into the package so that a wheel (or
# `pip install ./python`) carries it; `make install` also works (the
# package looks in /usr/local/lib). See docs/python.md.
python-lib: $(B)/libopd.so
	install -m 755 $(B)/libopd.so python/opd/libopd.so

# The path of one CPU run from Python to the kernel and back, file by file,
# over both transports (tests/arch/request_path.py): a TRACE=1 build of its
# own in $(B)/trace (CUDA=0), run by make test.
.PHONY: trace
trace:
	@$(MAKE) --no-print-directory TRACE=1 CUDA=0 B=$(B)/trace $(B)/trace/opd $(B)/trace/libopd.so
	@for w in socket adaptive; do echo "-- over $$w"; \
	  OPD_WAIT=$$w /usr/bin/python3 tests/arch/request_path.py $(B)/trace || exit 1; done

clean:
	rm -rf $(B)

-include $(shell find $(B) -path $(B)/deb -prune -o -name '*.d' -print 2>/dev/null)
