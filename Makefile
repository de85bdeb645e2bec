# tracebed — see README.md.
GO      ?= go
COMMIT  := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS := -X main.commit=$(COMMIT)
BIN     := bin/tracebed

.PHONY: all build run test bench lint fuzz clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/tracebed

# The main job: every default experiment on the simulation substrate, then
# one report of all of them (tables, figures, command, seed, machine).
run: build
	./$(BIN) run --out results
	./$(BIN) report --out results/REPORT.md results

test:
	$(GO) test -timeout 9m ./...

# Performance benchmarks (event rate, pipelines, Go switch when root, suite
# run times): every Go benchmark of the module, found and run by
# tracebed bench, written to $(BENCH_OUT). Compare two with
# ./bin/tracebed compare --tolerance 20% OLD.json NEW.json.
BENCHTIME ?= 1s
BENCH_OUT ?= results/bench.json
bench: build
	@mkdir -p $(dir $(BENCH_OUT))
	./$(BIN) bench --go $(GO) --benchtime $(BENCHTIME) --out $(BENCH_OUT)

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
