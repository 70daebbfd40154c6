# linuxfp: make build | make test | make bench | make generate
GO      ?= go
BIN     := bin/linuxfp
PKGS    := ./...

.PHONY: all build test bench generate deps clean vet

all: build

deps:
	@scripts/deps.sh

build:
	$(GO) build -o $(BIN) ./cmd/linuxfp

vet:
	$(GO) vet $(PKGS)

# Tests need root: they create network namespaces and load BPF programs.
test: deps vet
	$(GO) test -count=1 -timeout 12m $(PKGS)

# The embedded default: the paper's virtual-router experiment, Linux vs linuxfp vs ceiling.
bench: deps build
	./$(BIN) bench router

# Rebuild the committed BPF objects (needs clang, llvm, libbpf-dev).
generate:
	@scripts/deps.sh generate
	$(GO) generate $(PKGS)

clean:
	rm -rf bin
