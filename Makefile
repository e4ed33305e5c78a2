# One entry point for developers and CI: `make demo` runs the main job, `make test` the suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: venv demo test bench clean

$(BIN)/agentreplay: pyproject.toml collector/pyproject.toml replay/pyproject.toml dev/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]' -e ./collector -e ./replay -e ./dev  # dev: test servers, the demo
	touch $@

venv: $(BIN)/agentreplay

demo: venv
	$(BIN)/python -m agentreplay_dev.demo

test: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q

# The official OpenAI instrumentor is installed beside, not into, the venv: its entry point
# would otherwise double-instrument every agent run under opentelemetry-instrument.
bench: venv
	test -d bench/.deps || $(BIN)/pip install -q --no-deps --target bench/.deps \
		opentelemetry-instrumentation-genai-openai opentelemetry-util-genai
	$(BIN)/python bench/instrumentation_bench.py

clean:
	rm -rf $(VENV) .agentreplay
