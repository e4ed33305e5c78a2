"""The SDK's errors, in one place.

    AgentReplayError
     +-- ConfigurationError   bad environment or settings; raised at start-up only
     +-- IdentityError        a key, token or signature that does not verify
     |    +-- ManifestError   a scope manifest that is malformed or not signed by the org
     +-- ScopeViolation       the manifest forbids this action (raised into agent code on purpose)
     +-- RunHalted            the run or agent was halted (raised into agent code on purpose)
 +-- ReplayError          raised into a replayed agent (replay mode only)
      +-- ReplayDivergence      the agent's call differs from the recording at this step
      +-- ReplayNetworkBlocked  a live connection a replay does not allow
      +-- ReplayedToolError     a tool call that failed when recorded fails again
      +-- ForkComplete          a fork made the live steps it was asked for

Recording problems are never raised into agent code; they are logged. Only enforcement
decisions (ScopeViolation, RunHalted) interrupt the agent, deliberately.
"""

from typing import Any


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


class ReplayError(AgentReplayError):
    """Base of the errors a replay raises into the replayed agent."""


class ReplayDivergence(ReplayError):
    """The agent asked for something the recording does not have at this step."""

    def __init__(self, divergence: Any) -> None:  # a replay.Divergence (kept out of this module's imports)
        super().__init__(divergence.summary())
        self.divergence = divergence


class ReplayNetworkBlocked(ReplayError):
    """A network connection the replay does not allow (replays make no live calls)."""


class ReplayedToolError(ReplayError):
    """A tool call that failed in the recording fails again, with the recorded message."""


class ForkComplete(ReplayError):
    """The fork made the live steps it was asked for; the agent stops here."""
