"""Test support: a local scripted model server that speaks the OpenAI and Anthropic HTTP APIs."""
