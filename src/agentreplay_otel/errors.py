"""The SDK's errors, in one place.

    AgentReplayError
     +-- ConfigurationError   bad environment or settings; raised at start-up only
     +-- IdentityError        a key, token or signature that does not verify
     |    +-- ManifestError   a scope manifest that is malformed or not signed by the org
     +-- ScopeViolation       the manifest forbids this action (raised into agent code on purpose)
     +-- RunHalted            the run or agent was halted (raised into agent code on purpose)

Recording problems are never raised into agent code; they are logged. Only enforcement
decisions (ScopeViolation, RunHalted) interrupt the agent, deliberately.
"""


class AgentReplayError(Exception):
    """Base of every AgentReplay error."""


class ConfigurationError(AgentReplayError):
    """The SDK is configured with something it cannot use."""


class IdentityError(AgentReplayError):
    """A key, identity token or signature failed verification."""


class ManifestError(IdentityError):
    """A scope manifest is malformed, or its signature does not verify."""


class ScopeViolation(AgentReplayError):
    """An action outside the agent's signed scope manifest; the action did not run."""


class RunHalted(AgentReplayError):
    """The run (or the agent) was halted by the control plane; no further calls run."""
