"""An agent that calls its models with plain httpx, as a client nobody named would (an Ollama-shaped
/api/chat, twice, first of all; later an OpenAI-shaped chat completion), and once through the openai
client: every call is recorded, the httpx ones from their exchanges. ``MODEL`` picks the model the
httpx calls ask for (one the manifest does not list is refused there, as any call would be)."""

import os

import httpx
import openai

base = os.environ["OPENAI_BASE_URL"].rstrip("/")  # http://HOST:PORT/v1
model = os.environ.get("MODEL", "gpt-4o-mini")
ask = [{"role": "user", "content": "Find me the cheapest flight to Lisbon on Saturday"}]
with httpx.Client(timeout=30) as http:
    for _ in range(2):
        answer = http.post(base.removesuffix("/v1") + "/api/chat", json={"model": model, "messages": ask, "stream": False})
        if answer.status_code != 200:
            raise SystemExit(f"refused: {answer.json()['error']['message']}")
        print("ollama-shaped:", answer.json()["message"]["content"] is not None)
    first = openai.OpenAI(api_key="test").chat.completions.create(model="gpt-4o-mini", messages=ask)
    http.post(base + "/chat/completions", json={"model": "gpt-4o-mini", "messages": ask}).raise_for_status()
print("done", first.choices[0].message.content is not None)
