"""The async client, as in the openai README: several requests in flight at once with
`asyncio.gather`, then a streamed answer read with `async for`.
"""

import asyncio

from openai import AsyncOpenAI

client = AsyncOpenAI()


async def translate(text: str, language: str) -> str:
    completion = await client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            {"role": "system", "content": f"Translate the user's text into {language}."},
            {"role": "user", "content": text},
        ],
    )
    return completion.choices[0].message.content


async def main() -> None:
    languages = ["French", "German", "Portuguese"]
    results = await asyncio.gather(*(translate("Good morning, friends", lang) for lang in languages))
    for language, text in zip(languages, results, strict=True):
        print(f"{language}: {text}")

    stream = await client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Say hello in three languages"}],
        stream=True,
    )
    async for chunk in stream:
        print(chunk.choices[0].delta.content or "", end="")
    print()


asyncio.run(main())
