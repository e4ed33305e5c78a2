"""Agents that call the model from a thread pool or from asyncio tasks replay identically (issue 33, item 3).

Two programs, written here, in the corpus' world: the real openai client against the development model
server, under the real launcher, recorded into a real collector (auth on), verified, then replayed with
`agentreplay replay` (the model server stopped) several times: every replay matches, with zero live calls
and the recorded output, whichever order the calls begin in. On this 2-core machine a replay through the
CLI takes seconds, so each program is replayed REPLAYS times here; the 50 replays of the issue run in
process (tests/replay/test_concurrent_match.py, with the calls' order shuffled each time).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from corpuskit import CorpusWorld, Program, corpus_world

from agentreplay_dev.llm_server import Request, ScriptedReply

pytestmark = pytest.mark.e2e
REPLAYS = 6
RECIPES = ["risotto", "paella", "ramen", "goulash", "tagine", "borscht", "pierogi", "laksa"]

THREAD_POOL = '''
"""Eight recipes' cooking times asked at once from a thread pool; the answers printed in order."""
from concurrent.futures import ThreadPoolExecutor

from openai import OpenAI

client = OpenAI()
RECIPES = {recipes!r}


def cooking_time(recipe):
    completion = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            {{"role": "system", "content": f"You are a chef. Say how long {{recipe}} takes to cook."}},
            {{"role": "user", "content": f"How long does {{recipe}} take?"}},
        ],
    )
    return completion.choices[0].message.content


with ThreadPoolExecutor(max_workers=8) as pool:
    futures = [pool.submit(cooking_time, recipe) for recipe in RECIPES]
    for recipe, future in zip(RECIPES, futures):
        print(f"{{recipe}}: {{future.result()}}")
'''

ASYNC_GATHER = '''
"""Eight recipes read from disk (each in a worker thread) and asked about at once with asyncio.gather."""
import asyncio
import os
from pathlib import Path

from openai import AsyncOpenAI

client = AsyncOpenAI()
RECIPES = {recipes!r}
NOTES = Path(os.environ["TOOL_LOG"]).with_suffix(".notes")


async def cooking_time(recipe):
    note = await asyncio.to_thread(lambda: (NOTES / recipe).read_text() if (NOTES / recipe).exists() else "")
    completion = await client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            {{"role": "system", "content": f"You are a chef. Say how long {{recipe}} takes to cook.{{note}}"}},
            {{"role": "user", "content": f"How long does {{recipe}} take?"}},
        ],
    )
    return completion.choices[0].message.content


async def main():
    answers = await asyncio.gather(*(cooking_time(recipe) for recipe in RECIPES))
    for recipe, answer in zip(RECIPES, answers):
        print(f"{{recipe}}: {{answer}}")


asyncio.run(main())
'''


def chef(request: Request) -> ScriptedReply:
    """Answers by the recipe asked about, so concurrent requests get their own answers in any order."""
    system = str((request.body.get("messages") or [{}])[0].get("content", ""))
    recipe = next((r for r in RECIPES if r in system), "?")
    minutes = 10 + 5 * RECIPES.index(recipe) if recipe in RECIPES else 0
    return ScriptedReply(text=f"{recipe.capitalize()} takes {minutes} minutes.")


@dataclass(frozen=True, kw_only=True)
class Written(Program):
    """A program whose source this test writes (in the world's folder)."""

    folder: Path

    @property
    def path(self) -> Path:
        return self.folder / f"{self.name}.py"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CorpusWorld]:
    with corpus_world(Path(tmp_path_factory.mktemp("concurrent"))) as world:
        yield world


@pytest.mark.parametrize("name, source", [("recipes_thread_pool", THREAD_POOL), ("recipes_gather", ASYNC_GATHER)])
def test_concurrent_calls_replay_identically_with_zero_live_calls(world: CorpusWorld, name: str, source: str) -> None:
    program = Written(name=name, script=chef, expect="laksa: Laksa takes 45 minutes.", folder=world.root)
    program.path.write_text(textwrap.dedent(source).format(recipes=RECIPES))
    recorded = world.record(program)
    assert recorded.model_requests == len(RECIPES)
    lines = recorded.stdout.splitlines()
    assert lines == [f"{r}: {r.capitalize()} takes {10 + 5 * i} minutes." for i, r in enumerate(RECIPES)]
    chain = world.verify(recorded)
    assert chain["intact"] and chain["seal"] == "valid", chain
    for n in range(REPLAYS):
        replayed = world.replay(recorded)
        report = replayed.report
        assert replayed.exit_code == 0 and report.get("outcome") == "matched", (n, replayed.explain())
        assert report["live_calls"] == 0 and report["steps_matched"] == report["steps_recorded"] == len(RECIPES)
        # the agent's stdout passes through on the CLI's stderr (stdout holds the JSON)
        assert all(line in replayed.stderr for line in lines), (n, replayed.stderr[-2000:])
