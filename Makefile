# One entry point for developers and CI: `make demo` runs the main job, `make test` the suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: venv demo test bench clean

$(BIN)/agentreplay: pyproject.toml collector/pyproject.toml replay/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]' -e ./collector -e ./replay
	touch $@

venv: $(BIN)/agentreplay

demo: venv
	$(BIN)/python -m agentreplay_replay.demo

test: venv
	$(BIN)/python -m pytest -q

bench: venv
	$(BIN)/pip install -q 'opentelemetry-instrumentation-genai-openai'
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .agentreplay
