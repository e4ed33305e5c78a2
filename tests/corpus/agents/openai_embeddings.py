"""Semantic search with `embeddings.create`, as in OpenAI's embeddings guide: embed the documents
and the query, rank by cosine similarity.
"""

import math

from openai import OpenAI

client = OpenAI()

documents = [
    "The cat sat on the mat.",
    "Quarterly revenue grew by twelve percent.",
    "A kitten is sleeping on the rug.",
    "Interest rates were left unchanged.",
]
query = "Where is the cat sleeping?"


def embed(texts: list[str]) -> list[list[float]]:
    response = client.embeddings.create(model="text-embedding-3-small", input=texts)
    return [item.embedding for item in response.data]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (
        math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    )


doc_vectors = embed(documents)
(query_vector,) = embed([query])
ranked = sorted(
    zip(documents, doc_vectors, strict=True), key=lambda pair: cosine(query_vector, pair[1]), reverse=True
)
for text, vector in ranked:
    print(f"{cosine(query_vector, vector):.3f}  {text}")
