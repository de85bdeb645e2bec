# tracebed — see README.md.
GO      ?= go
COMMIT  := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS := -X main.commit=$(COMMIT)
BIN     := bin/tracebed

.PHONY: all build run test bench lint fuzz clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/tracebed

# The main job: every default experiment on the simulation substrate.
run: build
	./$(BIN) run --out results

test:
	$(GO) test -timeout 9m ./...

# Performance benchmarks (event rate, incast, pipelines, suites).
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 3x ./...

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

clean:
	rm -rf bin results
