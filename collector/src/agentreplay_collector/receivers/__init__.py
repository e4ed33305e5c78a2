"""OTLP receivers: gRPC and HTTP, both feeding one :class:`~agentreplay_collector.pipeline.Pipeline`."""
