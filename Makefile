# One entry point for developers and CI: `make demo` runs the main job, `make test` the suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: venv demo test bench bench-deps bench-instructions clean

$(BIN)/agentreplay: pyproject.toml client/pyproject.toml analysis/pyproject.toml incident/pyproject.toml \
		collector/pyproject.toml \
		replay/pyproject.toml dev/pyproject.toml \
		setup.py src/agentreplay_otel/_linkhash.pyx src/agentreplay_otel/_content.pyx collector/setup.py collector/src/agentreplay_collector/_otlpwire.pyx  # the compiled modules
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]' -e ./client -e ./analysis -e ./incident -e ./collector -e ./replay -e ./dev  # dev: test servers, the demo
	touch $@

venv: $(BIN)/agentreplay

demo: venv
	$(BIN)/python -m agentreplay_dev.demo

test: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q

# The peers' OpenAI instrumentors are installed beside, not into, the venv (each in its own folder:
# two need different versions of one package): their entry points would otherwise double-instrument
# every agent run under opentelemetry-instrument.
PEER = $(BIN)/pip install -q --no-deps --target
bench-deps: venv
	test -d bench/.deps/official || $(PEER) bench/.deps/official \
		opentelemetry-instrumentation-genai-openai opentelemetry-util-genai
	test -d bench/.deps/openai-v2 || $(PEER) bench/.deps/openai-v2 \
		opentelemetry-instrumentation-openai-v2 'opentelemetry-util-genai==1.1b0'
	test -d bench/.deps/openinference || $(PEER) bench/.deps/openinference \
		openinference-instrumentation-openai openinference-instrumentation openinference-semantic-conventions
	test -d bench/.deps/openllmetry || $(PEER) bench/.deps/openllmetry \
		opentelemetry-instrumentation-openai opentelemetry-semantic-conventions-ai

bench: bench-deps
	$(BIN)/python bench/instrumentation_bench.py

# The same comparison in instructions on the calling thread (valgrind): steady on a busy machine.
bench-instructions: bench-deps
	$(BIN)/python bench/instrumentation_bench.py --instructions

clean:
	rm -rf $(VENV) .agentreplay
