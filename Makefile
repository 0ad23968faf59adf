# Spillway: the two commands users need are `make demo` and `make test` (`make soak` for
# the long scenarios).
# Every target sets up what it needs itself (virtualenv, package, Kafka jars).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Debian's chromium for the browser test of `spillway ui` (apt-get, as root), when missing.
INSTALL_CHROMIUM := command -v chromium >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium)

.PHONY: demo test soak soak-long docs ui-test compose-test lint typecheck unit chaos chaos-long bench bench-columnar bench-channels bench-checkpoints bench-codecs bench-windows bench-windows-peers bench-restart bench-brokerloss bench-statesweep bench-rescale bench-budget bench-suite coverage broker-start broker-stop clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

## demo: run the main job (starts its own local Kafka broker, stops it at the end)
demo: $(STAMP)
	$(BIN)/spillway demo

## test: lint, type-check, build the docs, then the fast tier (pytest -m "not soak and not extended"):
## unit, channel and broker tests, one Spark job on a real broker per capability, and the
## bad-input, record-size, status, security, operator-stop and file-sink tests
test: $(STAMP) lint typecheck docs
	$(BIN)/python -m pytest tests -m "not soak and not extended" --durations=15

## soak: the further Spark tests (pytest -m extended: more variants of each capability, the
## status page's JSON, metrics, ...) and the long scenarios (pytest -m soak): the
## chaos runs and their at-least-once control,
## cluster changes, node failure, broker loss, the standalone cluster, Kafka 3.9, packaging, the rescale
## family but the one in `make test`; then the UI in headless Chromium (browser_ui.py,
## installing chromium as ui-test does, without writing docs/ui.png)
soak: $(STAMP)
	$(BIN)/python -m pytest tests -m "soak or extended" --durations=15
	$(INSTALL_CHROMIUM)
	$(BIN)/python -m pytest tests/integration/browser_ui.py -m soak -q

## ui-test: spillway ui in headless Chromium during a job with a SIGKILLed subtask; installs
## Debian's chromium when missing (apt-get, as root) and writes the screenshot docs/ui.png
ui-test: $(STAMP)
	$(INSTALL_CHROMIUM)
	UI_SCREENSHOT=docs/ui.png $(BIN)/python -m pytest tests/integration/browser_ui.py -q

## compose-test: docker/compose.yaml for real on a private Docker engine: the example job
## with a worker and a broker killed, output checked exactly (needs root, or DOCKER_HOST
## pointing at a running engine; about 11 min the first time, 3-5 min after)
compose-test: $(STAMP)
	$(BIN)/python -m composetest

## lint: ruff, and import-linter's contracts of the layers and rooms (pyproject.toml)
lint: $(STAMP)
	$(BIN)/ruff check spillway channels offsets recovery spark_jobs bench chaos composetest tests
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

## docs: the docs site (docs/, mkdocs.yml) with its API reference into build/site; --strict
## fails on a broken link, anchor or reference
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d build/site

## unit: the unit tests alone (no broker, no Spark; under a minute)
unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

# Every bench target runs in .venv-bench: it has the plotting package (matplotlib) and
# the peers, so each target draws its plots on a fresh clone (the test venv has neither).
# The peer benchmarks need the `bench` extra (Quix Streams, matplotlib) in a venv of their
# own: quixstreams pins confluent-kafka < 2.13, which must not downgrade the venv that
# `make test` / `make typecheck` use. In .venv-bench every engine runs on the same
# confluent-kafka/librdkafka (recorded in the result).
BENCH_VENV  := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed

$(BENCH_STAMP): pyproject.toml
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install -q -e '.[bench]'
	touch $(BENCH_STAMP)

## bench: B0 ceiling, B1 throughput vs peers, B4 restore, B2 latency (about 16 min; docs/benchmarks.md)
bench: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.suite

## chaos: seeded chaos run, short profile (200k records, 16 subtask kills at every crash
## point, broker/driver/zombie/stop faults), output checked exactly; also part of `make soak`
chaos: $(STAMP)
	$(BIN)/python -m chaos --profile short --seeds 1

## soak-long: the chaos job at a steady 1000 records/s for MINUTES (default 60), a subtask's
## Python worker SIGKILLed every 3 min; samples RSS and open fds per process kind and the
## checkpoint/changelog/channel topic sizes every 5 s, checks the output exactly, writes
## bench/results/soak-<UTC>.json. tests/integration/soak_five.py runs the same code for 5 min
## (by path; not yet in `make soak`)
MINUTES ?= 60
soak-long: $(STAMP)
	$(BIN)/python -m chaos.soak --minutes $(MINUTES)

## chaos-long: the long profile over 5 seeds, 400k records each (2M in all); in no test tier
chaos-long: $(STAMP)
	$(BIN)/python -m chaos --profile long --seeds 1,2,3,4,5

## bench-columnar: the columnar parts (JSON decode, parse, key routing, channel codec, keyed
## count) beside the record path, CPU µs per record, no broker (about 1 min)
bench-columnar: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.columnar

bench-channels: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.channels

bench-checkpoints: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.checkpoints

## bench-codecs: channel codecs per record, Avro (fastavro) vs Arrow IPC, and JSON input (no broker)
bench-codecs: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.codecs

## bench-windows: watermark advance cost vs open keys (10k/100k/1M), full scan vs timer index
bench-windows: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.windows

## bench-windows-peers: hopping and sliding windows and an interval join, Spillway (spillway run,
## Spark local mode) beside Quix Streams on the same pre-loaded topics, output checked exactly
## (about 20 min)
bench-windows-peers: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.windowpeers

## bench-budget: where a record's CPU goes in `spillway run` (B1, 1M records): per process role
## and, from py-spy samples, per stage of the subtasks (about 3 min)
bench-budget: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.budget

## bench-restart: kill → new attempt processing, phase by phase, over 12 SIGKILLs of one
## subtask of a 15-subtask job (own broker, Spark local mode; about 4 min)
bench-restart: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.restart

## bench-brokerloss: 10 broker kills (round robin, every 15-20 s, each down 5 s) under the
## keyed clicks job on a local three-node quorum (replication 3, min ISR 2): restarts (must
## be 0), redos within an attempt, the stall per kill (median, max), output checked exactly;
## bench/results/brokerloss-<UTC>.json (about 9 min). The test venv: it needs no peer.
bench-brokerloss: $(STAMP)
	$(BIN)/python -m bench.brokerloss

## bench-statesweep: restore time of a SIGKILLed keyed count holding 10^3..10^6 keys,
## 3 kills per size (own broker, Spark local mode; about 6 min)
bench-statesweep: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.statesweep

## bench-rescale: 20 live rescales of a keyed count (100k keys), 2 → 4 and 4 → 2 in turn,
## phase by phase, with the pause and the output dip of the operators not rescaled (own
## broker, Spark local mode; about 9 min). The live rescale beside a whole-job restart
## from the savepoint: python -m bench.rescale (the suite's B6)
bench-rescale: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.rescaleseries

## bench-suite: time `make test`, `make soak` and `make compose-test` (wall seconds, exit code,
## load average, commit) into bench/results/suitetime-<UTC time>.json; a benchmark, not a
## test (about 1 h). SUITE=... picks the tiers, e.g. `make bench-suite SUITE="test soak"`
SUITE ?= test soak compose-test
bench-suite: $(STAMP)
	$(BIN)/python -m bench.suitetime $(SUITE)

## coverage: line coverage of the product code by `make test` and `make soak` (COVERAGE_SUITE="test"
## for one), measured in every Python process they start (the Spark driver and PySpark's
## workers included), per module into bench/results/coverage-<UTC time>.json; ~1 h for both
COVERAGE_SUITE ?= test soak
coverage: $(STAMP)
	$(BIN)/python -m bench.suitecover $(COVERAGE_SUITE)

broker-start: $(STAMP)
	$(BIN)/spillway broker start

broker-stop: $(STAMP)
	$(BIN)/spillway broker stop

clean:
	rm -rf $(VENV) $(BENCH_VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
