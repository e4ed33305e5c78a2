"""Session fixtures for the user-environment tests: the wheels, the environments, the world (``userkit``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from userkit import SOURCES, UserEnvs, World, clean_env, copy_sources, tool_round_trip

from agentreplay_dev.collector import CollectorProcess, write_config
from agentreplay_dev.llm_server import LLMServer


@pytest.fixture(scope="session")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """The runtime wheels, built side by side (``pip wheel --no-deps``)."""
    root = tmp_path_factory.mktemp("wheels")
    out = root / "dist"
    builds = {
        name: subprocess.Popen(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
             str(copy_sources(parts, root / name))],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env())
        for name, parts in SOURCES.items()
    }
    for name, build in builds.items():
        output, _ = build.communicate(timeout=300)
        assert build.returncode == 0, f"{name}: pip wheel failed\n{output[-3000:]}"
    return {name: next(out.glob(f"{name}-*.whl")) for name in SOURCES}


@pytest.fixture(scope="session")
def user_envs(wheels, tmp_path_factory) -> Iterator[UserEnvs]:
    envs = UserEnvs(tmp_path_factory.mktemp("userenvs"), wheels["agentreplay_otel"])
    try:
        yield envs
    finally:
        envs.close()


@pytest.fixture(scope="session")
def world(tmp_path_factory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("userworld")
    config = write_config(root / "collector.yaml", store=f"chdb://{root / 'store'}")
    with LLMServer(tool_round_trip) as model, CollectorProcess(config, log=root / "collector.log") as collector:
        yield World(collector=collector, model=model)
