# tracebed — see README.md.
GO      ?= go
COMMIT  := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS := -X main.commit=$(COMMIT)
BIN     := bin/tracebed

.PHONY: all build run test crossval bench lint portable fuzz fuzz-inputs soak soak-ina clean p4 image

all: build

# Static (no cgo): the binary runs on any Linux, in an image without a C
# library too ('bin/tracebed image', docs/scale-out.md).
build:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/tracebed

# The main job: every default experiment on the simulation substrate, then
# one report of all of them (tables, figures, command, seed, machine).
run: build
	./$(BIN) run --out results
	./$(BIN) report --out results/REPORT.md results

test: portable
	$(GO) test -timeout 9m ./...

# The module builds and vets on the laptops researchers use (macOS on Apple
# silicon and Intel, Windows), where the Linux-only code (network
# namespaces, the Go switch, live sockets, bmv2 launcher, SCHED_RR) is
# compiled out; the same code compiled out on Linux (-tags nonetns), the
# commands that need it say so and the sim substrate runs. Intel Macs'
# files are those of Apple silicon's (darwin) and of Windows' (amd64): no
# file is tagged darwin and amd64 together, so PORTABLE_LIST only resolves
# their packages (go list, under a second) instead of a third vet (two
# minutes with a cold build cache, as in CI).
PORTABLE ?= darwin/arm64 windows/amd64
PORTABLE_LIST ?= darwin/amd64
portable:
	@for p in $(PORTABLE); do echo "vet GOOS=$${p%/*} GOARCH=$${p#*/}"; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) vet ./... || exit 1; done
	@for p in $(PORTABLE_LIST); do echo "list GOOS=$${p%/*} GOARCH=$${p#*/}"; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) list -deps -test ./... >/dev/null || exit 1; done
	$(GO) vet -tags nonetns ./...
	$(GO) test -tags nonetns -count=1 -run 'TestLinuxOnlyCommands|TestExitCodes|TestNeedsLinux|TestExport|TestModule' ./cmd/tracebed ./emulator ./emulator/netns/mininet ./internal/layering

# The long cross-validations, as root: Mininet against tracebed's own
# bring-up, and bmv2 against the Go switch (about eight minutes; make test
# skips the bmv2 one, docs/bmv2.md).
crossval:
	TRACEBED_BMV2_CROSSVAL=1 $(GO) test -timeout 40m -count=1 -v -run 'CrossValidation' ./experiments/crossval

# Performance benchmarks (event rate, pipelines, Go switch when root, suite
# run times): every Go benchmark of the module, found and run by
# tracebed bench, written to $(BENCH_OUT). Compare two with
# ./bin/tracebed compare --tolerance 20% OLD.json NEW.json.
BENCHTIME ?= 1s
BENCH_OUT ?= results/bench.json
bench: build
	@mkdir -p $(dir $(BENCH_OUT))
	./$(BIN) bench --go $(GO) --benchtime $(BENCHTIME) --out $(BENCH_OUT)

# An OCI image of tracebed for clusters (docs/scale-out.md): a static Linux
# binary of this commit with the ready specs, topologies and traces, in
# bin/tracebed.tar, tagged tracebed:COMMIT, for docker load, podman load or
# ctr image import. IMAGE_ARCH picks the architecture (default: this Go's).
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
image: build
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -ldflags "$(LDFLAGS)" -o bin/linux-$(IMAGE_ARCH)/tracebed ./cmd/tracebed
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) ./$(BIN) image --binary bin/linux-$(IMAGE_ARCH)/tracebed --out bin/tracebed.tar

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Short runs of every fuzz target (go test -fuzz runs one target at a time).
FUZZTIME ?= 15s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# Mutations of the ready specs, topologies and traces (TestMutants,
# docs/reliability.md): make test validates 150 of them (seed 1) and runs 4
# of those that validate; this tries MUTANTS of them and runs MUTANT_RUNS.
MUTANTS     ?= 5000
MUTANT_RUNS ?= 200
MUTATE_SEED ?= 1
fuzz-inputs:
	$(GO) test ./cmd/tracebed -run '^TestMutants$$' -v -timeout 3h -mutate.n $(MUTANTS) -mutate.runs $(MUTANT_RUNS) -mutate.seed $(MUTATE_SEED)

# Each kind at SOAK_FACTOR times its default size under a memory limit,
# the peak checked against the run's estimate (TestSoak, under an hour).
SOAK_FACTOR ?= 100
soak:
	$(GO) test ./cmd/tracebed -run '^TestSoak$$' -v -timeout 2h -soak -soak.factor $(SOAK_FACTOR)

# The randomized soaks of INA and RoCE (docs/reliability.md §8) at
# SOAK_CASES random cases each (make test runs a few of each); the flow
# model's at ten times as many fabrics.
SOAK_CASES ?= 300
soak-ina:
	$(GO) test ./emulator/roce -run Soak -count=1 -timeout 2h -roce.soak $(SOAK_CASES)
	$(GO) test ./workloads/freeina -run '^TestSoak$$' -count=1 -timeout 2h -freeina.soak $(SOAK_CASES)
	$(GO) test ./workloads/training/flow -run SoakPolicies -count=1 -timeout 2h -flow.soak $$(( $(SOAK_CASES) * 10 ))
	$(GO) test ./workloads/training -run SoakPacketPolicies -count=1 -timeout 2h -training.soak $(SOAK_CASES)

# Compile every P4 program (p4/*/*.p4) for bmv2 with p4c-bm2-ss when it is
# installed: bin/p4/NAME.json and bin/p4/NAME.p4info.txtpb. Without p4c it
# says so and succeeds: the Go twins and their packet vectors run in make test.
P4C ?= p4c-bm2-ss
p4:
	@if ! command -v $(P4C) >/dev/null 2>&1; then \
	  echo "make p4: $(P4C) is not installed (p4lang/p4c), so no P4 program was compiled."; \
	  echo "         Install p4c and behavioral-model to compile them and to run their packet vectors on bmv2."; \
	  exit 0; \
	fi; \
	mkdir -p bin/p4; \
	for src in p4/*/*.p4; do \
	  name=$$(basename $$src .p4); \
	  echo "$(P4C) $$src -> bin/p4/$$name.json, bin/p4/$$name.p4info.txtpb"; \
	  $(P4C) --arch v1model -o bin/p4/$$name.json --p4runtime-files bin/p4/$$name.p4info.txtpb $$src || exit 1; \
	done

clean:
	rm -rf bin results
