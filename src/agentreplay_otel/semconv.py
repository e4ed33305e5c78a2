"""Every span, attribute, event and resource name AgentReplay writes or reads.

Names follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``); what the
conventions lack lives under ``agentreplay.*``. Nothing else in the project spells
these strings: import them from here.

The GenAI, OpenAI, server, error and service names are the ``opentelemetry-semantic-conventions``
package's, under the package's own constant names (``METRIC_X`` is its ``GEN_AI_CLIENT_X``). They
are spelled out rather than imported because this module belongs to the core, which imports
nothing from ``opentelemetry`` (a reader verifies a chain without the tracing SDK);
``tests/test_semconv.py`` holds each one to the package's constant, and none may be a name the
package marks as replaced or removed.
"""

from typing import Final

# --- GenAI semantic conventions -------------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"
GEN_AI_AGENT_VERSION: Final = "gen_ai.agent.version"
GEN_AI_WORKFLOW_NAME: Final = "gen_ai.workflow.name"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"
GEN_AI_REQUEST_STREAM: Final = "gen_ai.request.stream"  # set only on streaming calls (true)
GEN_AI_REQUEST_STOP_SEQUENCES: Final = "gen_ai.request.stop_sequences"
GEN_AI_REQUEST_SEED: Final = "gen_ai.request.seed"
GEN_AI_REQUEST_FREQUENCY_PENALTY: Final = "gen_ai.request.frequency_penalty"
GEN_AI_REQUEST_PRESENCE_PENALTY: Final = "gen_ai.request.presence_penalty"
GEN_AI_REQUEST_TOP_K: Final = "gen_ai.request.top_k"
GEN_AI_REQUEST_CHOICE_COUNT: Final = "gen_ai.request.choice.count"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"  # seconds, streams only
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_TOOL_DESCRIPTION: Final = "gen_ai.tool.description"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
GEN_AI_TOKEN_TYPE: Final = "gen_ai.token.type"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
OPENAI_API_TYPE: Final = "openai.api.type"
OPENAI_REQUEST_SERVICE_TIER: Final = "openai.request.service_tier"
OPENAI_RESPONSE_SERVICE_TIER: Final = "openai.response.service_tier"
OPENAI_RESPONSE_SYSTEM_FINGERPRINT: Final = "openai.response.system_fingerprint"
ERROR_TYPE: Final = "error.type"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"

# gen_ai.operation.name values
OP_CHAT: Final = "chat"
OP_TEXT_COMPLETION: Final = "text_completion"
OP_EMBEDDINGS: Final = "embeddings"
OP_INVOKE_AGENT: Final = "invoke_agent"
OP_EXECUTE_TOOL: Final = "execute_tool"
OP_INVOKE_WORKFLOW: Final = "invoke_workflow"
OP_CREATE_AGENT: Final = "create_agent"
OP_GENERATE_CONTENT: Final = "generate_content"

# gen_ai.provider.name values
PROVIDER_OPENAI: Final = "openai"
PROVIDER_ANTHROPIC: Final = "anthropic"
PROVIDER_GCP_GEMINI: Final = "gcp.gemini"  # the Gemini Developer API (google-genai)
PROVIDER_GCP_VERTEX_AI: Final = "gcp.vertex_ai"  # google-genai's client with vertexai=True
PROVIDER_AWS_BEDROCK: Final = "aws.bedrock"
# Clients recorded from their HTTP exchanges (instrumentation/_wire.py)
PROVIDER_MISTRAL_AI: Final = "mistral_ai"
PROVIDER_COHERE: Final = "cohere"
PROVIDER_GROQ: Final = "groq"
UNLISTED_PROVIDER_OLLAMA: Final = "ollama"  # the conventions list no name for Ollama: an instrumentation names it

# gen_ai.token.type values
TOKEN_TYPE_INPUT: Final = "input"
TOKEN_TYPE_OUTPUT: Final = "output"

# gen_ai.tool.type values
TOOL_TYPE_FUNCTION: Final = "function"

# openai.api.type values
OPENAI_API_CHAT_COMPLETIONS: Final = "chat_completions"
OPENAI_API_RESPONSES: Final = "responses"

# GenAI client metrics
METRIC_OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
METRIC_TOKEN_USAGE: Final = "gen_ai.client.token.usage"
METRIC_OPERATION_TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.operation.time_to_first_chunk"
METRIC_OPERATION_TIME_PER_OUTPUT_CHUNK: Final = "gen_ai.client.operation.time_per_output_chunk"

# --- Other instrumentations' names: read in foreign traces, never written ---------------
# A trace another instrumentation sent (AutoGen's, CrewAI's, OpenLLMetry, OpenInference, an OpenAI Agents
# SDK bridge) is a run too (docs/collector.md, "Foreign traces"). These are the names those instrumentations
# write that the conventions above do not hold: some the GenAI conventions retired (``LEGACY_*``: the package
# marks them removed, which is why AgentReplay never writes them), others of OpenLLMetry (``TRACELOOP_*``,
# ``LLM_REQUEST_TYPE``) and of OpenInference (``OI_*``). Read by the collector to recognise a GenAI trace and
# by the analysis to read it; nothing that records writes them (tests/test_semconv.py).
LEGACY_GEN_AI_SYSTEM: Final = "gen_ai.system"  # the provider, or the framework (AutoGen writes "autogen")
LEGACY_GEN_AI_PROMPT: Final = "gen_ai.prompt"  # OpenLLMetry: gen_ai.prompt.{i}.role / .content / .tool_calls.{j}.*
LEGACY_GEN_AI_COMPLETION: Final = "gen_ai.completion"  # OpenLLMetry: gen_ai.completion.{i}.*
LEGACY_GEN_AI_EVENT_CONTENT: Final = "gen_ai.event.content"  # a message event's body as JSON (Semantic Kernel)
# Message events on a span (the body in the event's attributes), as the GenAI conventions had them:
LEGACY_EVENT_SYSTEM_MESSAGE: Final = "gen_ai.system.message"
LEGACY_EVENT_USER_MESSAGE: Final = "gen_ai.user.message"
LEGACY_EVENT_ASSISTANT_MESSAGE: Final = "gen_ai.assistant.message"
LEGACY_EVENT_TOOL_MESSAGE: Final = "gen_ai.tool.message"
LEGACY_EVENT_CHOICE: Final = "gen_ai.choice"
LEGACY_EVENT_CONTENT_PROMPT: Final = "gen_ai.content.prompt"  # its gen_ai.prompt attribute: the messages, JSON
LEGACY_EVENT_CONTENT_COMPLETION: Final = "gen_ai.content.completion"  # its gen_ai.completion attribute
# The conventions' event that carries gen_ai.input.messages / gen_ai.output.messages as its attributes:
LEGACY_EVENT_INFERENCE_DETAILS: Final = "gen_ai.client.inference.operation.details"
# OpenLLMetry (traceloop)
TRACELOOP_SPAN_KIND: Final = "traceloop.span.kind"  # workflow | task | agent | tool
TRACELOOP_ENTITY_NAME: Final = "traceloop.entity.name"
TRACELOOP_ENTITY_INPUT: Final = "traceloop.entity.input"  # JSON: {"args": [...], "kwargs": {...}}
TRACELOOP_ENTITY_OUTPUT: Final = "traceloop.entity.output"
TRACELOOP_KIND_AGENT: Final = "agent"
TRACELOOP_KIND_TOOL: Final = "tool"
LLM_REQUEST_TYPE: Final = "llm.request.type"  # chat | completion | embedding
# OpenInference (Arize): flattened messages, llm.input_messages.{i}.message.role and so on
OI_SPAN_KIND: Final = "openinference.span.kind"  # LLM | TOOL | AGENT | CHAIN | EMBEDDING | RETRIEVER ...
OI_KIND_LLM: Final = "LLM"
OI_KIND_TOOL: Final = "TOOL"
OI_KIND_AGENT: Final = "AGENT"
OI_INPUT_MESSAGES: Final = "llm.input_messages"
OI_OUTPUT_MESSAGES: Final = "llm.output_messages"
OI_MODEL_NAME: Final = "llm.model_name"
OI_PROVIDER: Final = "llm.provider"
OI_SYSTEM: Final = "llm.system"
OI_INPUT_VALUE: Final = "input.value"
OI_OUTPUT_VALUE: Final = "output.value"
OI_TOOL_NAME: Final = "tool.name"
OI_TOOL_DESCRIPTION: Final = "tool.description"
OI_AGENT_NAME: Final = "agent.name"
OI_GRAPH_NODE_ID: Final = "graph.node.id"
OI_MESSAGE_ROLE: Final = "message.role"
OI_MESSAGE_CONTENT: Final = "message.content"
OI_MESSAGE_CONTENTS: Final = "message.contents"  # .{k}.message_content.type / .text
OI_MESSAGE_CONTENT_TEXT: Final = "message_content.text"
OI_MESSAGE_TOOL_CALLS: Final = "message.tool_calls"  # .{j}.tool_call.id / .function.name / .function.arguments
OI_MESSAGE_TOOL_CALL_ID: Final = "message.tool_call_id"
OI_TOOL_CALL_ID: Final = "tool_call.id"
OI_TOOL_CALL_NAME: Final = "tool_call.function.name"
OI_TOOL_CALL_ARGUMENTS: Final = "tool_call.function.arguments"
# An exception recorded on a span (the OpenTelemetry API's record_exception)
EVENT_EXCEPTION: Final = "exception"
EXCEPTION_TYPE: Final = "exception.type"
EXCEPTION_MESSAGE: Final = "exception.message"

FOREIGN_GENAI_KEY_PREFIX: Final = "gen_ai."
"""A span with an attribute under this prefix, or one of :data:`FOREIGN_GENAI_KEYS`, or an event whose name
starts with it, is a GenAI span: a trace holding one (and no span claiming a chain) is a foreign run."""
FOREIGN_GENAI_KEYS: Final = frozenset({OI_SPAN_KIND, TRACELOOP_SPAN_KIND})

# --- AgentReplay -----------------------------------------------------------------
RUN_KIND: Final = "agentreplay.run.kind"
RUN_INPUT: Final = "agentreplay.run.input"
RUN_OUTPUT: Final = "agentreplay.run.output"
# What the run should produce (run(expected=...)): text as given, any other value as JSON. Analysis, blame and
# generated regression tests hold the run to it.
RUN_EXPECTED: Final = "agentreplay.run.expected"
RUN_ENTRYPOINT: Final = "agentreplay.run.entrypoint"
# Where and with what the agent started (replay starts it the same way): os.getcwd(), sys.executable.
RUN_WORKING_DIRECTORY: Final = "agentreplay.run.working_directory"
RUN_INTERPRETER: Final = "agentreplay.run.interpreter"
RUN_AUTO: Final = "agentreplay.run.auto"
# Why the run cannot be replayed (one line), set when it starts: recorded without content, say.
RUN_NOT_REPLAYABLE: Final = "agentreplay.run.not_replayable"
REPLAY_OF: Final = "agentreplay.replay.of"
REPLAY_OF_HASH: Final = "agentreplay.replay.of_hash"  # the replayed run's last chain hash
REPLAY_SOURCE: Final = "agentreplay.replay.source"  # where a replayed answer came from
# The operator's grant for this replay (a signed token naming the run, the agent, a fork's step, an
# expiry): without it the collector judges the run as live. On a replay's run span.
REPLAY_GRANT: Final = "agentreplay.replay.grant"
REPLAY_FORK_AT: Final = "agentreplay.replay.fork_at"  # the step a fork forks at (its run span)
MANIFEST_SHA256: Final = "agentreplay.manifest.sha256"

STEP: Final = "agentreplay.step"
REQUEST: Final = "agentreplay.request"
RESPONSE: Final = "agentreplay.response"
RESPONSE_STREAM: Final = "agentreplay.response.stream"
RESPONSE_HTTP: Final = "agentreplay.response.http"  # {"status", "headers"} of the response, for replay
# The replay bodies whose long strings are references into the GenAI view (content.store_once), a JSON list.
CONTENT_REFS: Final = "agentreplay.content.refs"
NONDETERMINISM: Final = "agentreplay.nondeterminism"  # the run's clock, uuid and random draws, in order
COST_USD: Final = "agentreplay.cost.usd"
# A tool's declared charge in its own currency: the amount and its ISO 4217 code (``@tool(cost=..., currency=...)``).
# COST_USD holds US dollars only: a charge in another currency has no COST_USD (it counts toward the manifest's caps
# in its currency, or at the manifest's rate toward its USD caps: manifest.count_charge), and amounts of two
# currencies are never summed on the record.
COST_AMOUNT: Final = "agentreplay.cost.amount"
COST_CURRENCY: Final = "agentreplay.cost.currency"
CURRENCY_USD: Final = "USD"
TOOL_SIDE_EFFECT: Final = "agentreplay.tool.side_effect"
TOOL_FUNCTION: Final = "agentreplay.tool.function"
# What a tool call ran on, by type, never by value (JSON {parameter: "module:Class"}): a method's self or
# cls and the objects a framework injects (a run context, a kernel); they are not its arguments.
TOOL_OWNER: Final = "agentreplay.tool.owner"
# The result's type tag (codec.typed, JSON): what a replay rebuilds the result as from its JSON.
TOOL_RESULT_TYPE: Final = "agentreplay.tool.result.type"
GRAPH_NODE: Final = "agentreplay.graph.node"
# The graph's name, as runs recorded before gen_ai.workflow.name carry it (workflow and node spans).
GRAPH_NAME: Final = "agentreplay.graph.name"
GRAPH_STEP: Final = "agentreplay.graph.step"  # LangGraph's superstep, not an agentreplay.step
GRAPH_TASK_ID: Final = "agentreplay.graph.task.id"
GRAPH_NEXT: Final = "agentreplay.graph.next"  # nodes a node's edges or Command/Send routed to
GRAPH_INTERRUPTED: Final = "agentreplay.graph.interrupted"
# A graph node's span is "graph_node {node}"; its graph's is "invoke_workflow {graph}".
SPAN_GRAPH_NODE: Final = "graph_node"

EVENT_POLICY_DECISION: Final = "agentreplay.policy.decision"
# attributes of the policy decision event
POLICY_DECISION: Final = "agentreplay.policy.outcome"  # allow | deny
POLICY_RULE: Final = "agentreplay.policy.rule"
POLICY_DETAIL: Final = "agentreplay.policy.detail"
POLICY_SOURCE: Final = "agentreplay.policy.source"  # local | authorize | fail_open | fail_closed
HALTED: Final = "agentreplay.halted"  # on a span refused because its run or agent was halted
EVENT_STATE: Final = "agentreplay.state"
STATE_UPDATE: Final = "agentreplay.state.update"

CHAIN_PREFIX: Final = "agentreplay.chain."
CHAIN_SEQ: Final = "agentreplay.chain.seq"
CHAIN_PREV: Final = "agentreplay.chain.prev"
CHAIN_HASH: Final = "agentreplay.chain.hash"
CHAIN_SEAL: Final = "agentreplay.chain.seal"
IDENTITY_KID: Final = "agentreplay.identity.kid"
# Written after a span is hashed, so never part of its hash.
CHAIN_ATTRIBUTES: Final = frozenset({CHAIN_SEQ, CHAIN_PREV, CHAIN_HASH, CHAIN_SEAL, IDENTITY_KID})

# run kinds
RUN_KIND_RECORD: Final = "record"
RUN_KIND_REPLAY: Final = "replay"
RUN_KIND_REGRESSION: Final = "regression"
RUN_KIND_FORK: Final = "fork"

# --- resource --------------------------------------------------------------------
SERVICE_NAME: Final = "service.name"
AGENT_ID: Final = "agentreplay.agent.id"
AGENT_VERSION: Final = "agentreplay.agent.version"
# Why the agent runs without (part of) its enforcement configuration: set only when it started
# fail-open (AGENTREPLAY_START_FAIL_MODE=open) after that configuration failed to verify.
START_ERROR: Final = "agentreplay.start.error"

# Attributes whose values are content (prompts, completions, tool I/O): the redactor sees these.
CONTENT_ATTRIBUTES: Final = frozenset(
    {
        GEN_AI_INPUT_MESSAGES,
        GEN_AI_OUTPUT_MESSAGES,
        GEN_AI_SYSTEM_INSTRUCTIONS,
        GEN_AI_TOOL_CALL_ARGUMENTS,
        GEN_AI_TOOL_CALL_RESULT,
        REQUEST,
        RESPONSE,
        RESPONSE_STREAM,
        RUN_INPUT,
        RUN_OUTPUT,
        RUN_EXPECTED,
        STATE_UPDATE,
    }
)

# --- environment variables -----------------------------------------------------
ENV_AGENT_KEY: Final = "AGENTREPLAY_AGENT_KEY"
ENV_AGENT_ID: Final = "AGENTREPLAY_AGENT_ID"
ENV_AGENT_VERSION: Final = "AGENTREPLAY_AGENT_VERSION"
ENV_IDENTITY: Final = "AGENTREPLAY_IDENTITY"
ENV_MANIFEST: Final = "AGENTREPLAY_MANIFEST"
ENV_LIBRARY_CACHES: Final = "AGENTREPLAY_LIBRARY_CACHES"  # "off" (default) or "keep": the libraries' response caches (caches.py)
ENV_ORG_PUBLIC_KEY: Final = "AGENTREPLAY_ORG_PUBLIC_KEY"
ENV_REQUIRE_LOG_PROOF: Final = "AGENTREPLAY_REQUIRE_LOG_PROOF"  # true: verify fails a case with no log proof
ENV_REDACTOR: Final = "AGENTREPLAY_REDACTOR"
ENV_CAPTURE_CONTENT: Final = "AGENTREPLAY_CAPTURE_CONTENT"  # true/false; wins over the standard variable
# The standard one: true/false, or NO_CONTENT / SPAN_ONLY / EVENT_ONLY / SPAN_AND_EVENT.
ENV_GENAI_CAPTURE_MESSAGE_CONTENT: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
ENV_QUEUE_SIZE: Final = "AGENTREPLAY_QUEUE_SIZE"
ENV_PRICES: Final = "AGENTREPLAY_PRICES"
ENV_STORE: Final = "AGENTREPLAY_STORE"
ENV_COLLECTOR: Final = "AGENTREPLAY_COLLECTOR"  # the collector's control endpoint (CLI, guard)
ENV_DETERMINISM: Final = "AGENTREPLAY_DETERMINISM"  # "off": do not record the agent's clock/uuid/random
ENV_OTHER_INSTRUMENTORS: Final = "AGENTREPLAY_OTHER_INSTRUMENTORS"  # "keep": load other GenAI instrumentors too
ENV_GUARD: Final = "AGENTREPLAY_GUARD"  # "off": record but enforce nothing in this process
# "closed" (default): an agent whose key, token or manifest does not verify does not start;
# "open": it starts, recorded, without what did not verify, and says why (START_ERROR).
ENV_START_FAIL_MODE: Final = "AGENTREPLAY_START_FAIL_MODE"
ENV_AUTHORIZE_DEADLINE_MS: Final = "AGENTREPLAY_AUTHORIZE_DEADLINE_MS"
ENV_ADMIN_TOKEN: Final = "AGENTREPLAY_ADMIN_TOKEN"
ENV_ORG_KEY: Final = "AGENTREPLAY_ORG_KEY"  # the org's private key file (CLI only)
ENV_ADMIN_TOKEN_FILE: Final = "AGENTREPLAY_ADMIN_TOKEN_FILE"  # a file holding the admin token (CLI only)
# The pipe a CLI that re-executed itself reads its operator settings from (never an agent's).
ENV_OPERATOR_FD: Final = "AGENTREPLAY_OPERATOR_FD"
# TLS to the control endpoint (SDK and CLI): the CA file the collector's certificate is checked against
# (only it: a pinned CA), else OTEL_EXPORTER_OTLP_CERTIFICATE's; a client certificate and key for mTLS,
# else OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE's and _CLIENT_KEY's.
ENV_CONTROL_CERTIFICATE: Final = "AGENTREPLAY_CONTROL_CERTIFICATE"
ENV_CONTROL_CLIENT_CERTIFICATE: Final = "AGENTREPLAY_CONTROL_CLIENT_CERTIFICATE"
ENV_CONTROL_CLIENT_KEY: Final = "AGENTREPLAY_CONTROL_CLIENT_KEY"
ENV_OTLP_CERTIFICATE: Final = "OTEL_EXPORTER_OTLP_CERTIFICATE"
ENV_OTLP_CLIENT_CERTIFICATE: Final = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
ENV_OTLP_CLIENT_KEY: Final = "OTEL_EXPORTER_OTLP_CLIENT_KEY"
# The collector the CLI was set up with (CLI only): its log key's certificate (log/log.cert.json); the CLI
# sends a token only to a collector that signs a fresh challenge with that key.
ENV_COLLECTOR_IDENTITY: Final = "AGENTREPLAY_COLLECTOR_IDENTITY"
ENV_REPLAY_GRANT: Final = "AGENTREPLAY_REPLAY_GRANT"  # the replay grant the CLI hands a replayed agent
ENV_ANALYSIS_BASE_URL: Final = "AGENTREPLAY_ANALYSIS_BASE_URL"  # the LLM judge's endpoint (OpenAI-compatible or Anthropic)
ENV_ANALYSIS_API_KEY: Final = "AGENTREPLAY_ANALYSIS_API_KEY"
ENV_ANALYSIS_MODEL: Final = "AGENTREPLAY_ANALYSIS_MODEL"
ENV_ANALYSIS_PROVIDER: Final = "AGENTREPLAY_ANALYSIS_PROVIDER"  # openai (any OpenAI-compatible API) or anthropic
ENV_ANALYSIS_METHOD: Final = "AGENTREPLAY_ANALYSIS_METHOD"  # all_at_once, step_by_step or binary_search
ENV_ANALYSIS_BUDGET_TOKENS: Final = "AGENTREPLAY_ANALYSIS_BUDGET_TOKENS"  # the judge's tokens per run
ENV_ANALYSIS_BUDGET_S: Final = "AGENTREPLAY_ANALYSIS_BUDGET_S"  # the judge's seconds per run

# entry point groups
EP_REDACTOR: Final = "agentreplay_redactor"
