"""What the LLM judge is asked (the MAST definitions, the answers' schemas, the run as a numbered log
whose every step is whole): kept in :mod:`agentreplay_analysis.judging.prompts`, named here too."""

from __future__ import annotations

from agentreplay_analysis.judging.log import CHARS_PER_TOKEN
from agentreplay_analysis.judging.prompts import (
    HALF_SCHEMA,
    RESPONSE_FORMAT,
    SCHEMA,
    STEP_SCHEMA,
    VERDICTS,
    WINDOW_SCHEMA,
    Prompt,
    build,
    log_of,
    system_prompt,
)

__all__ = ["CHARS_PER_TOKEN", "HALF_SCHEMA", "RESPONSE_FORMAT", "SCHEMA", "STEP_SCHEMA", "VERDICTS", "WINDOW_SCHEMA",
           "Prompt", "build", "log_of", "system_prompt"]
