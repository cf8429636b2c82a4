# arbor — the two commands (`make test`, `make run`) and the sanitizer suites.
# Each target installs what is missing (scripts/install-deps.sh), configures and builds a
# CMake preset under build/<preset>, then runs it.
.PHONY: deps build release test debug-test tsan-test asan-test fallback-test clang-test windows-test \
	darwin-check kqueue-test kqueue-tsan-test fuzz model run soak perf format clean audit

deps:
	@scripts/install-deps.sh

# build: the libraries, the examples and the tests in build/release (what test, run and soak
# need); release: the same and the benchmarks in perf/ (their scripts run from it).
build: deps
	cmake --preset release >/dev/null
	cmake --build --preset release

release: build
	cmake --build --preset release --target arbor_perf

test: build
	ctest --preset release

# The coroutine shape GCC 12 miscompiles (docs/guide.md, compiler note, case 4), found lexically.
audit: deps
	scripts/gcc12-coroutine-audit

# Other presets: debug, tsan, asan (ASan + UBSan, built with clang at -O0, the examples at -O1), fallback (mutex
# futex), clang (clang at -O0, no sanitizer).
PRESETS := debug tsan asan fallback clang
$(addsuffix -test,$(PRESETS)): %-test: deps
	cmake --preset $* >/dev/null
	cmake --build --preset $*
	ctest --preset $*

# Windows: the libraries and examples cross-built with mingw-w64, the tests built for Windows
# (the IOCP engine's included) run under wine64, then the end-to-end suites of the HTTP server
# and the examples (Linux test binaries) against their .exe under wine (scripts/wine-e2e,
# docs/platforms.md); a failure in either fails the target. The wine prefix lives in
# build/wine-prefix; the wineserver that scripts/wine-run keeps warm is stopped at the end, also
# when a test fails.
WINE64 ?= /usr/lib/wine/wine64
windows-test:
	@scripts/install-deps.sh windows
	cmake --preset windows >/dev/null
	cmake --build --preset windows
	scripts/wine-run $(WINE64)
	ctest --preset windows && scripts/wine-e2e $(WINE64); status=$$?; \
	  scripts/wine-run $(WINE64) --stop; exit $$status

# kqueue on Linux, over libkqueue built from source (LIBKQUEUE=<its install prefix>): the
# kqueue variants of every parameterised suite and the examples on kqueue, both io modes, in
# build/kqueue (release) or build/kqueue-tsan. Without libkqueue: one line on how to get it, exit 0.
kqueue-test kqueue-tsan-test: %-test: deps
	scripts/kqueue-test $*

# macOS and FreeBSD: a syntax-only compile of what their builds compile of sync, sched, io (the
# kqueue engine), log, runtime, http and tls, for x86_64 and arm64 macOS and x86_64 FreeBSD 14,
# against stand-in headers (no SDK or sysroot on Debian; tests/stand-in, docs/platforms.md).
darwin-check:
	@scripts/install-deps.sh darwin
	scripts/darwin-check

# The HTTP example server on 127.0.0.1:8080; flags pass through: make run ARGS="--workers 2".
ARGS ?=
run: build
	build/release/examples/http_server $(ARGS)

# The example HTTP server soaked for SOAK_SECONDS (default 600; CI: 60) by tests/soak (http_soak):
# keep-alive GETs, 200 idle connections, slowloris, bursts reset mid-request and mid-response,
# uploads echoed byte for byte, SIGHUP/SIGUSR1 half-way, SIGTERM at the end. Fails on any client
# error, descriptors not back to baseline, RSS past the warm-up's + 32 MiB or a non-zero exit;
# a row every 10 s goes to build/soak/soak.csv. Built in build/release, the tree `make test`
# builds. Server flags pass through: make soak SOAK_ARGS="--engine epoll" (or ARBOR_ENGINE).
SOAK_SECONDS ?= 600
SOAK_ARGS ?=
soak: build
	mkdir -p build/soak
	build/release/tests/http_soak --server build/release/examples/http_server \
	  --seconds $(SOAK_SECONDS) --csv build/soak/soak.csv -- $(SOAK_ARGS)

# libFuzzer on the HTTP request parser, for FUZZ_SECONDS (default 60), from the seeds in
# tests/http/fuzz_seeds. Built in the asan preset's tree (build/asan, clang, the one asan-test
# builds: CI runs asan-test first, so the fuzzer costs its own two files only). New inputs it
# finds go to build/asan/fuzz-corpus.
FUZZ_SECONDS ?= 60
fuzz: deps
	cmake --preset asan >/dev/null
	cmake --build --preset asan --target request_parser_fuzz
	mkdir -p build/asan/fuzz-corpus
	build/asan/tests/request_parser_fuzz -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	  build/asan/fuzz-corpus tests/http/fuzz_seeds

# Model-check the scheduler's park/notify handshake with spin (sched/model/park_notify.pml), the
# ordering of the poll right's release (poll_right_release.pml), per-worker parking
# (worker_drivers.pml) and a spare's start against an outside submit (spare_start.pml).
model: deps
	sched/model/check.sh

perf: release
	perf/compare-roundtrip
	perf/compare-spawn
	perf/compare-runtime-lifecycle
	perf/compare-echo
	perf/compare-lines
	perf/compare-resolve
	perf/http/compare

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

clean:
	rm -rf build
