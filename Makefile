# linuxfp: make build | make test | make bench | make generate
GO      ?= go
BIN     := bin/linuxfp
BENCH   := bin/linuxfp-bench
PKGS    := ./...
# What `linuxfp version` says: git describe and the commit, "dev" outside a git checkout.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/linuxfp/linuxfp/internal/cli.version=$(VERSION) -X github.com/linuxfp/linuxfp/internal/cli.commit=$(COMMIT)

.PHONY: all build test bench generate deps clean vet

all: build

deps:
	@scripts/deps.sh

# The daemon and, apart, the benchmarks (which run the daemon beside them in their namespaces).
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/linuxfp
	$(GO) build -o $(BENCH) ./cmd/linuxfp-bench

vet:
	$(GO) vet $(PKGS)

# Tests need root: they create network namespaces and load BPF programs.
test: deps vet
	$(GO) test -count=1 -timeout 12m $(PKGS)

# The embedded default: the paper's virtual-router experiment, Linux vs linuxfp vs ceiling.
bench: deps build
	./$(BENCH) router

# Rebuild the committed BPF objects (needs clang, llvm, libbpf-dev).
generate:
	@scripts/deps.sh generate
	$(GO) generate $(PKGS)

clean:
	rm -rf bin
