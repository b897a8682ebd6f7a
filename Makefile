# opd: one entry point for deps, build, test, run, bench, install.
#
#   make            build/opd, build/libopd.so, build/libopd.a, build/opctl
#   make deps       install the Debian packages opd needs (apt-get, as root
#                   or through sudo)
#   make test       build and run every test (installs what is missing)
#   make run        build, start a daemon on a private socket, run the
#                   example workload against it, stop it
#   make bench      run the benchmarks, print their figures
#   make install    install binaries, library, header and init files
#
# Variables: CUDA=auto|0|1 (auto: CUDA sources compile when nvcc is found),
# ASAN=1 (address + undefined sanitizers), DEBUG=1 (-O0 -g3), PREFIX.

CC      ?= cc
CUDA    ?= auto
ASAN    ?= 0
DEBUG   ?= 0
PREFIX  ?= /usr/local
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
B       := build

ifeq ($(CUDA),auto)
  CUDA_ON := $(if $(NVCC),1,0)
else
  CUDA_ON := $(CUDA)
endif

OPENBLAS_INC := /usr/include/x86_64-linux-gnu/openblas-pthread
OPENBLAS_LIB := /usr/lib/x86_64-linux-gnu/openblas-pthread

CPPFLAGS += -Iinclude -I. -I$(OPENBLAS_INC) -D_GNU_SOURCE
CFLAGS   += -std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes -fPIC -pthread -MMD -MP
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
ifeq ($(CUDA_ON),1)
  CPPFLAGS += -DOPD_HAVE_CUDA_BUILD=1
endif

DAEMON_LIBS := -luv -lmsgpackc -L$(OPENBLAS_LIB) -lopenblas -lm
CLIENT_LIBS := -lmsgpackc

$(info opd: CC=$(CC) CUDA=$(CUDA)->$(CUDA_ON)$(if $(NVCC), (nvcc: $(NVCC)),) ASAN=$(ASAN) DEBUG=$(DEBUG))

COMMON_SRC  := $(sort $(wildcard common/*.c))
KERNEL_SRC  := $(sort $(wildcard kernels/*.c kernels/*/*.c))
DAEMON_SRC  := $(filter-out daemon/main.c,$(sort $(wildcard daemon/*.c)))
CLIENT_SRC  := client/libopd.c client/json.c
UNIT_SRC    := $(sort $(wildcard tests/unit/*.c))
OPS_SRC     := $(sort $(wildcard tests/ops/*.c))
INTEG_SRC   := $(sort $(wildcard tests/integration/*.c))
CUDA_SRC    := $(sort $(wildcard kernels/*/*.cu daemon/*.cu))

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))
COMMON_OBJ := $(call obj,$(COMMON_SRC))
KERNEL_OBJ := $(call obj,$(KERNEL_SRC))
DAEMON_OBJ := $(call obj,$(DAEMON_SRC))
CLIENT_OBJ := $(call obj,$(CLIENT_SRC))
UNIT_OBJ   := $(call obj,$(UNIT_SRC))
OPS_OBJ    := $(call obj,$(OPS_SRC))
INTEG_OBJ  := $(call obj,$(INTEG_SRC))
CUDA_OBJ   := $(patsubst %.cu,$(B)/obj/%.cu.o,$(CUDA_SRC))
ifneq ($(CUDA_ON),1)
  CUDA_OBJ :=
endif

BINS := $(B)/opd $(B)/libopd.so $(B)/libopd.a $(B)/opctl
EXAMPLES := $(B)/examples/softmax_conv
BENCHES := $(patsubst bench/%.c,$(B)/bench/%,$(sort $(wildcard bench/*.c)))

.PHONY: all deps check-deps test test-c run bench install clean cuda
all: check-deps $(BINS) $(EXAMPLES) cuda

# ---- dependencies --------------------------------------------------------
DEB_PKGS := build-essential pkg-config libuv1-dev libmsgpack-dev \
            libopenblas-pthread-dev libcriterion-dev libinih-dev \
            python3 python3-numpy python3-pytest
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
	 /usr/bin/python3 -c 'import numpy, pytest' 2>/dev/null || missing=1; \
	 if [ -n "$$missing" ]; then echo "opd: installing missing packages"; $(MAKE) --no-print-directory deps; fi

# ---- build ---------------------------------------------------------------
$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(B)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -O2 -Iinclude -I. -Xcompiler -fPIC,-Wall -c $< -o $@

cuda: $(CUDA_OBJ)

$(B)/opd: $(B)/obj/daemon/main.o $(DAEMON_OBJ) $(KERNEL_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) $^ -o $@ $(DAEMON_LIBS)

$(B)/libopd.so: $(CLIENT_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libopd.so.0 $^ -o $@ $(CLIENT_LIBS)

$(B)/libopd.a: $(CLIENT_OBJ) $(COMMON_OBJ)
	rm -f $@ && ar rcs $@ $^

$(B)/opctl: $(B)/obj/client/opctl.o $(B)/libopd.a
	$(CC) $(LDFLAGS) $^ -o $@ $(CLIENT_LIBS) -lm

$(B)/examples/%: examples/%.c $(B)/libopd.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< -o $@ $(LDFLAGS) $(B)/libopd.a $(CLIENT_LIBS) -lm

# Benchmarks link the client library and the kernels (for in-process
# baselines); none of them needs the daemon's objects.
$(B)/bench/%: bench/%.c $(B)/libopd.a $(KERNEL_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< -o $@ $(LDFLAGS) $(B)/libopd.a $(KERNEL_OBJ) $(DAEMON_LIBS)

# ---- tests ---------------------------------------------------------------
$(B)/tests/unit: $(UNIT_OBJ) $(DAEMON_OBJ) $(KERNEL_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ -lcriterion $(DAEMON_LIBS)

# Operator tests need only the kernels: they build while the daemon changes.
$(B)/tests/ops: $(OPS_OBJ) $(KERNEL_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ -lcriterion -L$(OPENBLAS_LIB) -lopenblas -lm

$(B)/tests/integration: $(INTEG_OBJ) $(B)/libopd.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ -lcriterion $(CLIENT_LIBS) -lm

test: all $(B)/tests/unit $(B)/tests/ops $(B)/tests/integration
	@OPD_BIN=$(abspath $(B)/opd) OPD_BUILD=$(abspath $(B)) bash tests/run.sh

# ---- run, bench, install -------------------------------------------------
run: all
	@bash examples/run.sh $(B)

bench: all $(BENCHES)
	@bash bench/run.sh $(B)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include/opd
	install -m 755 $(B)/opd $(B)/opctl $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(B)/libopd.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(B)/libopd.so $(DESTDIR)$(PREFIX)/lib/libopd.so.0
	ln -sf libopd.so.0 $(DESTDIR)$(PREFIX)/lib/libopd.so
	install -m 644 include/opd/opd.h include/opd/protocol.h $(DESTDIR)$(PREFIX)/include/opd/

clean:
	rm -rf $(B)

-include $(shell find $(B) -name '*.d' 2>/dev/null)
