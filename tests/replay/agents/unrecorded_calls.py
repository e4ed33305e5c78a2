"""An agent that calls its models with plain httpx, as a client AgentReplay does not record would (an
Ollama-shaped /api/chat, twice, first of all; later an OpenAI-shaped chat completion), and once
through the openai client (recorded): the httpx exchanges pass unrecorded, and the recorder says so."""

import os

import httpx
import openai

base = os.environ["OPENAI_BASE_URL"].rstrip("/")  # http://HOST:PORT/v1
ask = [{"role": "user", "content": "Find me the cheapest flight to Lisbon on Saturday"}]
with httpx.Client(timeout=30) as http:
    for _ in range(2):  # the model server has no Ollama API: its answer (a 404) is read, as it comes
        http.post(base.removesuffix("/v1") + "/api/chat", json={"model": "llama3.2", "messages": ask, "stream": False})
    first = openai.OpenAI(api_key="test").chat.completions.create(model="gpt-4o-mini", messages=ask)
    http.post(base + "/chat/completions", json={"model": "gpt-4o-mini", "messages": ask}).raise_for_status()
print("done", first.choices[0].message.content is not None)
