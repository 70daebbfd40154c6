# linuxfp: make build | make test | make bench | make generate | make image | make release
GO      ?= go
BIN     := bin/linuxfp
BENCH   := bin/linuxfp-bench
PKGS    := ./...
# What `linuxfp version` says: git describe and the commit, "dev" outside a git checkout.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/linuxfp/linuxfp/internal/cli.version=$(VERSION) -X github.com/linuxfp/linuxfp/internal/cli.commit=$(COMMIT)
# Release binaries and the image: static, no local paths, and the commit's time as the one
# timestamp the image records, so the same commit gives the same bytes.
STATIC  := CGO_ENABLED=0 GOOS=linux
RFLAGS  := -trimpath -buildvcs=false -ldflags "$(LDFLAGS)"
export SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
ARCH    ?= $(shell $(GO) env GOARCH)
IMAGE   := bin/linuxfp-image.tar
IMAGE_REF ?= linuxfp:$(VERSION)
BPF_SUMS := bpf/generated-from.sha256

.PHONY: all build test bench generate deps clean vet image release

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
	$(GO) test -count=1 -timeout 14m $(PKGS)

# The embedded default: the paper's virtual-router experiment, Linux vs linuxfp vs ceiling.
bench: deps build
	./$(BENCH) router

# Rebuild the committed BPF objects (needs clang, llvm, libbpf-dev), and record the sources they
# were built from: `make test` fails while a source under bpf/ differs (internal/bpfsrc).
generate:
	@scripts/deps.sh generate
	$(GO) generate $(PKGS)
	cd bpf && find . -type f ! -name $(notdir $(BPF_SUMS)) | LC_ALL=C sort | xargs sha256sum > $(notdir $(BPF_SUMS))

# An OCI image archive of the static binary for $(ARCH), built without a container daemon
# (cmd/mkimage); its path is printed last.
image:
	$(STATIC) GOARCH=$(ARCH) $(GO) build $(RFLAGS) -o bin/image/linuxfp ./cmd/linuxfp
	$(GO) run ./cmd/mkimage -binary bin/image/linuxfp -arch $(ARCH) -ref $(IMAGE_REF) -version $(VERSION) -out $(IMAGE)
	@echo $(IMAGE)

# Static linux/amd64 and linux/arm64 binaries and their SHA256SUMS under bin/release.
release:
	rm -rf bin/release && mkdir -p bin/release
	$(STATIC) GOARCH=amd64 $(GO) build $(RFLAGS) -o bin/release/linuxfp-linux-amd64 ./cmd/linuxfp
	$(STATIC) GOARCH=arm64 $(GO) build $(RFLAGS) -o bin/release/linuxfp-linux-arm64 ./cmd/linuxfp
	cd bin/release && sha256sum linuxfp-linux-amd64 linuxfp-linux-arm64 > SHA256SUMS
	@cat bin/release/SHA256SUMS

clean:
	rm -rf bin
