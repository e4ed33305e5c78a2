"""The pytest plugin: regression tests over recorded cases, short to generate and easy to write by hand.

    @pytest.fixture(scope="module")
    def regression(agentreplay):
        return agentreplay.regress(Path(__file__).with_name("flight-booker_3f2a9c1b.case.json"))

    @pytest.mark.mast("FM-1.1")
    def test_books_the_day_asked_for(regression):
        assert regression.arguments("book_flight", "day") == ["Friday"]

``agentreplay.regress`` loads the case (refused unless it checks against the org public key),
runs the current agent code on the recorded input in regression mode (recorded answers until
the first divergence, then the model endpoint given for tests; tools always sandboxed) and
returns a :class:`Regression`: the regression run's tool calls by name with their arguments,
its halts, its scope violations (the manifest in force, evaluated again on what it did), the
uncaught exception, the divergence, and the analysis of the run.

Options (each also an environment variable, for CI):

    --agentreplay-agent "python agent.py"   the agent's program; the recorded arguments follow it
    --agentreplay-recorded-command          without --agentreplay-agent: run the command the case
                                            recorded (printed first; the case must check against
                                            the org key, as every case must here)
    --agentreplay-model-url URL             where live OpenAI-compatible calls go after a divergence
    --agentreplay-anthropic-url URL         where live Anthropic calls go after a divergence
    --agentreplay-org-key FILE              the org public key cases are checked against
    --agentreplay-collector URL             a collector to export the regression run to (run kind
                                            regression: it counts in the agent's trust score)

With no collector the run is read back from the replay's spool; nothing else is needed.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_analysis import Verdict, detect, run_view
from agentreplay_analysis.constraints import argument_values, mentions
from agentreplay_analysis.detectors.task_spec import conflict_with
from agentreplay_analysis.expected import check as check_expected
from agentreplay_analysis.taxonomy import BY_ID
from agentreplay_analysis.transcript import leaves
from agentreplay_incident import case as casefile
from agentreplay_otel.core import (
    KIND_TOOL,
    Decision,
    IdentityError,
    RecordedStep,
    SpanRecord,
    Usage,
    evaluate_tool,
    json_or,
    load_public_key,
    recording_from_spans,
    semconv,
)
from agentreplay_otel.replay import Divergence, Mode, OnDivergence, Plan, Report
from agentreplay_replay import grants, isolation, replayer

ENV_AGENT = "AGENTREPLAY_TEST_AGENT"
ENV_MODEL_URL = "AGENTREPLAY_TEST_MODEL_URL"
ENV_ANTHROPIC_URL = "AGENTREPLAY_TEST_ANTHROPIC_URL"
ENV_TEST_COLLECTOR = "AGENTREPLAY_TEST_COLLECTOR"
ENV_RECORDED_COMMAND = "AGENTREPLAY_TEST_RECORDED_COMMAND"  # "1": --agentreplay-recorded-command
MARKER = "mast"
TIMEOUT_S = 300.0


class CaseRefused(Exception):
    """The case does not check against the org public key (tampered, or another org's): nothing is run."""


class RegressionError(Exception):
    """The regression run could not be made (not the same as a run that regressed)."""


class AgentDidNotStart(RegressionError):
    """The agent's process ended before it replayed anything: its command, exit code and stderr's tail
    say why (a script not found, an import that failed). Not a regression of the agent's behaviour."""


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """One tool call of the regression run, as its span recorded it."""

    step: int
    name: str
    arguments: Mapping[str, Any]
    result: Any = None
    error_type: str = ""  # the exception's class name when the call failed (ScopeViolation, RunHalted, ...)
    error: str = ""
    cost_usd: float | None = None

    @property
    def failed(self) -> bool:
        return bool(self.error_type or self.error)

    def argument(self, path: str) -> Any:
        """An argument by its path (``day``, ``passengers[0].name``); None when absent."""
        return dict(leaves(dict(self.arguments))).get(path)


@dataclass(frozen=True, kw_only=True)
class Regression:
    """What the current agent did on a recorded case, with helpers for the assertions."""

    case: casefile.Case
    outcome: replayer.ReplayOutcome
    spans: tuple[SpanRecord, ...] = field(default=())  # the regression run's own spans

    @property
    def report(self) -> Report:
        assert self.outcome.report is not None
        return self.outcome.report

    @property
    def run_id(self) -> str:
        return self.report.replay_run_id

    @property
    def divergence(self) -> Divergence | None:
        """Where the agent first did something else than the recording (then it went live)."""
        return self.report.divergence

    @property
    def exception(self) -> replayer.RunEnd | None:
        """The uncaught exception the agent's process ended in, if any."""
        return self.outcome.exception

    @cached_property
    def steps(self) -> tuple[RecordedStep, ...]:
        return tuple(recording_from_spans(list(self.spans)).steps) if self.spans else ()

    @cached_property
    def _costs(self) -> dict[str, float]:
        costs = {}
        for span in self.spans:
            raw = span.attributes.get(semconv.COST_USD)
            try:
                costs[span.span_id] = float(raw) if raw is not None else None
            except ValueError:
                continue
        return {k: v for k, v in costs.items() if v is not None}

    def tool_calls(self, name: str | None = None) -> list[ToolCall]:
        """Every tool call, in order; only those of tool ``name`` when given."""
        return [ToolCall(step=s.step, name=s.name, arguments=dict(s.request), result=json_or(s.result, s.result),
                         error_type=s.error_type, error=s.error if s.failed else "",
                         cost_usd=self._costs.get(s.span_id))
                for s in self.steps if s.kind == KIND_TOOL and (name is None or s.name == name)]

    def arguments(self, tool: str, path: str) -> list[Any]:
        """The value of one argument in each call of ``tool``, in order."""
        return [call.argument(path) for call in self.tool_calls(tool)]

    def count(self, tool: str) -> int:
        return len(self.tool_calls(tool))

    def tool_names(self) -> set[str]:
        return {call.name for call in self.tool_calls()}

    @property
    def halts(self) -> list[ToolCall]:
        """The calls refused because the run or the agent was halted."""
        return [c for c in self.tool_calls() if c.error_type == "RunHalted"]

    def denials(self) -> list[tuple[ToolCall, Decision]]:
        """The tool calls the case's manifest would refuse, judged in order as the guard judges them
        (arguments, per-run counts, cost, run spend): the regression replay itself enforces nothing."""
        manifest = self.case.manifest_obj
        if manifest is None:
            return []
        counts: dict[str, int] = {}
        spent = 0.0
        refused = []
        for call in self.tool_calls():
            decision = evaluate_tool(manifest, tool=call.name, arguments=dict(call.arguments),
                                     usage=Usage(tool_calls=dict(counts), run_spend_usd=spent, day_spend_usd=None),
                                     cost_usd=call.cost_usd)
            if not decision.allowed:
                refused.append((call, decision))
            if not call.failed:  # a refused call did not run: it counts towards nothing
                counts[call.name] = counts.get(call.name, 0) + 1
                spent += call.cost_usd or 0.0
        return refused

    @property
    def violations(self) -> list[str]:
        """Scope violations: calls refused as the run went (recorded ones replayed), and calls the
        manifest in force refuses when judged again; each as one line."""
        refused = [c for c in self.tool_calls() if c.error_type == "ScopeViolation"]
        steps = {c.step for c in refused}
        return [f"step {c.step}: {c.name}: {c.error}" for c in refused] + [
            f"step {c.step}: {c.name}: {d.rule}: {d.detail}" for c, d in self.denials() if c.step not in steps]

    @cached_property
    def request(self) -> str:
        """What the recorded run was asked (the first user message its model saw)."""
        quote = run_view(self.case.spans).request
        return quote.text if quote else ""

    def breaks_request(self, path: str, value: Any) -> str | None:
        """What in the recorded request ``value`` (of argument ``path``) contradicts, for a person, or None.
        The same rule as the analysis (FM-1.1): a day, date, amount, count or place the request states."""
        stated = mentions(self.request)
        for got in argument_values(path, value):
            conflict = conflict_with(got, stated)
            if conflict is not None:
                return f"the request says {', '.join(m.quote for m in conflict.stated)}: {path} should be " \
                       f"{conflict.want}, not {value!r}"
        return None

    @cached_property
    def verdict(self) -> Verdict:
        """The deterministic analysis of the regression run (the detectors, offline)."""
        return detect(list(self.spans))

    def modes(self) -> tuple[str, ...]:
        """The MAST modes the analysis finds in the regression run."""
        return self.verdict.mode_ids

    def misses(self, expected: Any) -> str | None:
        """What of ``expected`` (what the run should produce: text, a number, a list, an object of key
        fields) the regression run's outcome does not hold, for a person; None when it meets it. The same
        comparison as the analysis's (:func:`agentreplay_analysis.expected.check`)."""
        view = run_view(list(self.spans))
        if not view.finished:
            view = replace(view, finished=True)  # the regression run is over: hold what it did to it
        hit = check_expected(view, expected)
        return None if hit is None else hit.explanation

    def describe(self) -> str:
        """One paragraph for a failing assertion: what ran, where it diverged, what it did."""
        calls = ", ".join(f"{c.name}({_args(c.arguments)})" + (f" -> {c.error_type}" if c.error_type else "")
                          for c in self.tool_calls())
        where = self.divergence.summary() if self.divergence else "no divergence"
        return f"regression run {self.run_id or '?'} of {self.case.run_id}: {where}; tool calls: {calls or 'none'}"


def _args(arguments: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in arguments.items())


def mode_label(mode_id: str) -> str:
    """``FM-1.1 disobey task specification``: how assertions and reports name a mode."""
    found = BY_ID.get(mode_id)
    return found.label if found else mode_id


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The plugin's options, as given on the command line or in the environment."""

    agent: tuple[str, ...] = ()  # the agent's program; () runs the recorded command line if asked
    recorded_command: bool = False  # the case's recorded command may run (none given)
    model_url: str | None = None
    anthropic_url: str | None = None
    org_key: Path | None = None  # --agentreplay-org-key, else $AGENTREPLAY_ORG_PUBLIC_KEY (read here alone)
    collector: str | None = None
    timeout_s: float = TIMEOUT_S


class AgentReplay:
    """The ``agentreplay`` fixture: loads cases and runs the current agent on them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def load(self, path: str | Path) -> casefile.Case:
        """The case in ``path``, refused (:class:`CaseRefused`) unless it checks against the org key."""
        try:
            case = casefile.read(Path(path))
        except casefile.CaseError as exc:
            raise CaseRefused(f"{path}: {exc}") from exc
        found = casefile.check(case, self._org_key())
        if not found.ok:
            raise CaseRefused(f"{path} does not check against the org public key: {'; '.join(found.problems)}")
        return case

    @cached_property
    def org_public_key(self) -> Ed25519PublicKey | None:
        """The org public key of the settings (:func:`settings_from`: ``--agentreplay-org-key``, else
        ``$AGENTREPLAY_ORG_PUBLIC_KEY``), read once; None when neither is given. Every case check and
        replay here uses it: nothing below reads the environment for it. :class:`CaseRefused` when it
        cannot be read."""
        path = self.settings.org_key
        if path is None:
            return None
        try:
            return load_public_key(path)
        except IdentityError as exc:
            raise CaseRefused(f"the org public key {path}: {exc}") from exc

    def _org_key(self) -> Ed25519PublicKey:
        """The org public key a case is checked against; :class:`CaseRefused` when none is given."""
        key = self.org_public_key
        if key is None:
            raise CaseRefused(f"no org public key to check the case against: give --agentreplay-org-key or "
                              f"${semconv.ENV_ORG_PUBLIC_KEY}")
        return key

    def regress(self, case: casefile.Case | str | Path, *, agent: str | Sequence[str] | None = None) -> Regression:
        """Run the current agent on the case's recorded input in regression mode; tools sandboxed.

        The agent's program comes from ``agent`` or ``--agentreplay-agent`` (the recorded arguments
        follow it); the case's own recorded command runs only with ``--agentreplay-recorded-command``,
        and only for a case that checks against the org key. :class:`AgentDidNotStart` when the agent
        never got to replay (a missing script, a failed import): not a regression."""
        loaded = case if isinstance(case, casefile.Case) else self.load(case)
        program = shlex.split(agent) if isinstance(agent, str) else tuple(agent or self.settings.agent)
        command = [*program, *loaded.recording.entrypoint[1:]] if program else self._recorded(loaded)
        plan = Plan(mode=Mode.REGRESSION, on_divergence=OnDivergence.LIVE)
        env = self._env()
        granter = grants.Granter.from_environment(env, collector=self.settings.collector)  # the operator's, if set
        try:
            outcome = replayer.run(casefile.CaseReader(loaded), loaded.run_id, plan, org_key=self.org_public_key,
                                   command=command, otlp=self._otlp(), timeout_s=self.settings.timeout_s,
                                   stdout=sys.stdout, stderr=sys.stderr, env=env, granter=granter)
        except replayer.DidNotStart as exc:
            raise AgentDidNotStart("\n".join([str(exc), *exc.stderr_tail])) from exc
        except replayer.CannotStart as exc:
            raise AgentDidNotStart(f"the agent did not start: {exc.problem}: the recorded command `{exc.recorded}` "
                                   f"cannot run here; give --agentreplay-agent") from exc
        except replayer.CannotReplay as exc:
            raise RegressionError(str(exc)) from exc
        run_id = outcome.report.replay_run_id if outcome.report is not None else ""
        spans = tuple(s for s in outcome.spans if not run_id or s.trace_id == run_id)
        return Regression(case=loaded, outcome=outcome, spans=spans)

    def _recorded(self, case: casefile.Case) -> list[str]:
        """No program given: the case's recorded command (``[]``), when asked for and the case checks
        against the org key; printed before it runs. A case anyone may have edited never runs its own
        command unasked."""
        recorded = replayer.recorded_command(case.recording)
        if not self.settings.recorded_command:
            raise RegressionError(f"no agent to run: give --agentreplay-agent (or ${ENV_AGENT}); the case's "
                                  f"recorded command ({recorded}) runs only with --agentreplay-recorded-command")
        found = casefile.check(case, self._org_key())
        if not found.ok:
            raise CaseRefused(f"the case's recorded command runs only for a case that checks against the org public "
                              f"key, and this one does not ({'; '.join(found.problems)}): give --agentreplay-agent")
        sys.stderr.write(f"agentreplay: running the case's recorded command: {recorded}\n")
        return []

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.settings.model_url:
            env["OPENAI_BASE_URL"] = self.settings.model_url
        if self.settings.anthropic_url:
            env["ANTHROPIC_BASE_URL"] = self.settings.anthropic_url
        return env

    def _otlp(self) -> str | None:
        """The collector's OTLP endpoint when one answers (the run is exported there too), else None."""
        if not self.settings.collector:
            return None
        # the CLI's one client, only when asked for
        from agentreplay_replay.cli._client import RemoteCollector

        return RemoteCollector(self.settings.collector).otlp_endpoint()


# --- pytest hooks and fixtures --------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentreplay", "regression tests over recorded agent runs")
    group.addoption("--agentreplay-agent", default=os.environ.get(ENV_AGENT),
                    help="the agent's program, e.g. 'python agent.py'; the recorded arguments follow it "
                         f"(${ENV_AGENT})")
    group.addoption("--agentreplay-recorded-command", action="store_true",
                    default=os.environ.get(ENV_RECORDED_COMMAND, "") in ("1", "true"),
                    help="with no --agentreplay-agent: run the command the case recorded (printed first; the "
                         f"case must check against the org key; ${ENV_RECORDED_COMMAND}=1)")
    group.addoption("--agentreplay-model-url", default=os.environ.get(ENV_MODEL_URL),
                    help="where live OpenAI-compatible calls go after a divergence (OPENAI_BASE_URL of the "
                         f"agent; ${ENV_MODEL_URL})")
    group.addoption("--agentreplay-anthropic-url", default=os.environ.get(ENV_ANTHROPIC_URL),
                    help=f"where live Anthropic calls go after a divergence (${ENV_ANTHROPIC_URL})")
    group.addoption("--agentreplay-org-key", default=None,  # the variable is read late: a re-executed pytest
                    # receives the operator's settings after its options are registered (_isolate)
                    help=f"the org public key (PEM) cases are checked against (default: ${semconv.ENV_ORG_PUBLIC_KEY})")
    group.addoption("--agentreplay-collector", default=os.environ.get(ENV_TEST_COLLECTOR),
                    help="a collector's control URL: the regression runs are exported to it and count in the "
                         f"agent's trust score (${ENV_TEST_COLLECTOR})")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}(mode): the MAST failure mode the test guards against (FM-1.1 ...)")
    _isolate()


def _isolate() -> None:
    """The agents a regression test starts cannot read the operator's settings from this process: a pytest
    started as a command with them in its environment re-executes itself without them, before it collects
    anything (:func:`agentreplay_replay.isolation.shed`). A pytest run inside another program
    (``pytest.main``) is never re-executed: it is marked not dumpable only."""
    if semconv.ENV_OPERATOR_FD in os.environ:
        isolation.receive()
    if not isolation.operator_settings():
        return
    main = sys.modules.get("__main__")
    started_as_pytest = (getattr(getattr(main, "__spec__", None), "name", "") in ("pytest", "pytest.__main__")
                         or Path(getattr(main, "__file__", "") or "").name in ("pytest", "py.test"))
    if started_as_pytest:
        isolation.shed()
    isolation.undumpable()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test's MAST mode goes into its report (junit: a property), so CI shows what regressed."""
    for marker in item.iter_markers(MARKER):
        for mode_id in marker.args:
            item.user_properties.append(("mast", mode_label(str(mode_id))))


def settings_from(config: pytest.Config) -> Settings:
    agent = config.getoption("--agentreplay-agent")
    org_key = config.getoption("--agentreplay-org-key") or os.environ.get(semconv.ENV_ORG_PUBLIC_KEY)
    return Settings(agent=tuple(shlex.split(agent)) if agent else (),
                    recorded_command=bool(config.getoption("--agentreplay-recorded-command")),
                    model_url=config.getoption("--agentreplay-model-url") or None,
                    anthropic_url=config.getoption("--agentreplay-anthropic-url") or None,
                    org_key=Path(org_key) if org_key else None,
                    collector=config.getoption("--agentreplay-collector") or None)


@pytest.fixture(scope="session")
def agentreplay(pytestconfig: pytest.Config) -> Iterator[AgentReplay]:
    """Loads cases (checked against the org key) and runs the current agent on them."""
    yield AgentReplay(settings_from(pytestconfig))
