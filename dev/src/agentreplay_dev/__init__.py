"""Development support, in no runtime wheel: a local model server speaking the OpenAI and Anthropic
HTTP APIs (``llm_server``), a collector run as a subprocess for tests (``collector``), the flight
world (``scenario``) and the demo (``python -m agentreplay_dev.demo``). The files the demo runs (the
flight agent, its manifest) are this package's data, so it needs no checkout.
"""
