"""The narrated walkthrough (issue 11, item 5) of the recorded flight story, in headless Chromium.

The page opens on the culprit step, highlighted (a screenshot finds the highlight's colour in the
step panel there, and not on another step); a ``#step-N`` fragment opens that step; ←/→, Home and
End move between steps (pressed by the page from a ``keys=`` fragment, read back from the DOM);
a recorded tool result carrying a script does not run. The packets' HTML opens there too.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from agentreplay_dev.scenario import STORY_REQUEST
from agentreplay_incident.packets import dispute_packet, insurance_packet, render_html
from agentreplay_incident.walkthrough import CULPRIT_CLASS, HIGHLIGHT, walkthrough_html
from agentreplay_otel.core import semconv

pytestmark = pytest.mark.e2e

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--force-device-scale-factor=1")


def chromium() -> str:
    """Debian's chromium (``.ci/run`` installs it); the tests that need it skip, saying so, only without it."""
    found = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    if found is None:
        pytest.skip("headless Chromium not found (looked for chromium, chromium-browser, google-chrome on PATH); "
                    ".ci/run installs Debian's chromium")
    return found


def _browse(args: list[str], url: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    profile = tmp / f"chromium-profile-{len(list(tmp.glob('chromium-profile-*')))}"  # a fresh one each time
    done = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def chromium_dom(url: str, tmp: Path) -> str:
    """The DOM after the page's script ran."""
    return _browse(["--dump-dom"], url, tmp).stdout


def screenshot(url: str, tmp: Path, size: tuple[int, int] = (1200, 1200)) -> Path:
    out = tmp / f"shot-{len(list(tmp.glob('shot-*.png')))}.png"
    _browse([f"--screenshot={out}", f"--window-size={size[0]},{size[1]}"], url, tmp)
    return out


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and rows of RGB(A) pixels of an 8-bit non-interlaced PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        header = chunk if kind == b"IHDR" else header
        idat += chunk if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line[j] for j in range(stride) if bpp == 3 or j % 4 != 3))  # RGB only
        prev = line
    return width, height, rows


def highlighted_rows(path: Path) -> int:
    """Rows of the screenshot that the highlight colour paints across most of the page's content
    width: the step panel's rows when it is highlighted (a step button alone paints no such row)."""
    width, _, rows = png_pixels(path)
    colour = bytes.fromhex(HIGHLIGHT.lstrip("#"))
    return sum(sum(row[i:i + 3] == colour for i in range(0, width * 3, 3)) > 0.4 * width for row in rows)


@pytest.fixture(scope="module")
def page(story, tmp_path_factory) -> Path:
    case, verdict = story
    path = tmp_path_factory.mktemp("walkthrough") / "walkthrough.html"
    path.write_text(walkthrough_html(case, verdict))
    return path


def _active(dom: str) -> str:
    return re.search(r'<body[^>]*data-active="(\d*)"', dom).group(1)


def test_the_page_is_one_self_contained_file(story, page):
    case, verdict = story
    text = page.read_text()
    assert text.count("<script") == 1 and "Content-Security-Policy" in text and "default-src 'none'" in text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//|url\(|@import""", text)  # fetches nothing
    # one step per LLM or tool call, each with its caption
    steps = re.findall(r'<section class="step[^"]*" id="step-(\d+)"', text)
    assert [int(s) for s in steps] == sorted(int(s.attributes[semconv.STEP]) for s in case.spans
                                             if semconv.STEP in s.attributes)
    assert "The agent asked the model (gpt-4o-mini) what to do" in text
    # in the currency it was charged in (the demo's airline charges euros)
    assert re.search(r"The agent booked a flight \(flight TP125, day Saturday[^)]*\) for (\$\d+\.\d\d|\d+\.\d\d [A-Z]{3})",
                     text)
    assert "the manifest refused it" in text and STORY_REQUEST in text


def test_opens_on_the_culprit_step_with_the_contradiction_side_by_side(story, page, tmp_path):
    case, verdict = story
    culprit = verdict.culprit.step
    dom = chromium_dom(page.as_uri(), tmp_path)
    assert _active(dom) == str(culprit)
    shown = re.findall(r'<section class="([^"]*)" id="step-(\d+)"[^>]*?(hidden="")?>', dom)
    assert [(cls, step) for cls, step, hidden in shown if not hidden] == [(f"step {CULPRIT_CLASS} active", str(culprit))]
    contradiction = re.search(r'<div class="vs" id="contradiction" data-mode="FM-1.1">(.*?)</div><p>', dom, re.S)
    sides = re.findall(r'<div class="label">([^<]*)</div><div class="value">([^<]*)</div>', contradiction.group(1))
    assert sides[0] == ("asked", "Friday") and sides[1][1] == "Saturday" and sides[1][0].startswith("booked")


def test_the_highlight_is_on_the_culprit_step_in_a_screenshot(story, page, tmp_path):
    """The step panel (below the contradiction and the step bar) is painted in the highlight colour
    when the culprit step is shown, and not when another step is."""
    case, verdict = story
    culprit = verdict.culprit.step
    at_culprit = screenshot(page.as_uri(), tmp_path)
    at_other = screenshot(f"{page.as_uri()}#step-{culprit + 1}", tmp_path)
    assert highlighted_rows(at_culprit) > 150, at_culprit  # the panel is at least 16rem high
    assert highlighted_rows(at_other) == 0, at_other
    shutil.copy(at_culprit, Path(page).with_suffix(".png"))  # beside the page, for a person to look at


@pytest.mark.parametrize(("fragment", "expected"), [
    ("#step-2", 2),
    ("#step-4&keys=ArrowRight", 5),
    ("#step-4&keys=ArrowRight,ArrowRight,ArrowLeft", 5),
    ("#keys=Home", 0),
    ("#step-0&keys=ArrowLeft", 0),
    ("#step-3&keys=End", None),  # the last step
    ("#step-99", "culprit"),  # no such step: the culprit
])
def test_fragment_and_keyboard_navigation(story, page, tmp_path, fragment, expected):
    case, verdict = story
    last = max(int(s.attributes[semconv.STEP]) for s in case.spans if semconv.STEP in s.attributes)
    want = last if expected is None else verdict.culprit.step if expected == "culprit" else expected
    assert _active(chromium_dom(page.as_uri() + fragment, tmp_path)) == str(want)


def test_a_recorded_script_does_not_run(story, tmp_path):
    """A tool result is whatever the world answered: a script in it is shown as text, never run."""
    case, verdict = story
    hostile = ("</pre></section><script>document.body.setAttribute('data-pwned','script')</script>"
               "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">")
    spans = tuple(s if s.attributes.get(semconv.GEN_AI_TOOL_NAME) != "search_flights" else
                  dataclasses.replace(s, attributes={**s.attributes, semconv.GEN_AI_TOOL_CALL_RESULT: hostile})
                  for s in case.spans)
    path = tmp_path / "hostile.html"
    path.write_text(walkthrough_html(dataclasses.replace(case, spans=spans), verdict))
    assert path.read_text().count("<script") == 1
    dom = chromium_dom(f"{path.as_uri()}#step-1", tmp_path)
    assert "data-pwned" not in dom.split("<main>")[0] and "<img" not in dom
    assert _active(dom) == "1" and "&lt;script&gt;document.body.setAttribute" in dom


def test_a_run_without_failure_opens_on_its_first_step(story, tmp_path):
    case, _ = story
    path = tmp_path / "unjudged.html"
    path.write_text(walkthrough_html(case, None))
    dom = chromium_dom(path.as_uri(), tmp_path)
    assert _active(dom) == "0" and 'id="contradiction"' not in dom and f"step {CULPRIT_CLASS}" not in dom


def test_packet_documents_open_in_the_browser(story, tmp_path):
    case, verdict = story
    for name, packet, heading in (("dispute", dispute_packet(case, verdict), "Every policy decision"),
                                  ("claim", insurance_packet(case, verdict), "Limits in force")):
        path = tmp_path / f"{name}.html"
        path.write_text(render_html(packet))
        dom = chromium_dom(path.as_uri(), tmp_path)
        assert heading in dom and "agentreplay verify CASE.json --org-key ORG.pub" in dom


HOSTILE = ("\"'></pre></td></title></style></textarea>"
           "<script>document.documentElement.setAttribute('data-pwned','script')</script>"
           "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','img')\">"
           "<svg onload=\"document.documentElement.setAttribute('data-pwned','svg')\"></svg>"
           "<iframe srcdoc=\"<script>parent.document.documentElement.setAttribute('data-pwned','iframe')</script>\">"
           "</iframe><meta http-equiv=\"refresh\" content=\"0;url=https://example.invalid/\">"
           "<a href=\"javascript:document.documentElement.setAttribute('data-pwned','link')\" autofocus "
           "onfocus=\"document.documentElement.setAttribute('data-pwned','focus')\">x</a>")
"""Markup a hostile world (a tool's answer, a model's text, a user's request) could put in a run."""


def _hostile(case):
    """The case with every tool result, every tool argument's text, and every message's text made ``HOSTILE``."""
    def text_of(value):
        if isinstance(value, str):
            return HOSTILE
        if isinstance(value, dict):
            return {k: text_of(v) for k, v in value.items()}
        if isinstance(value, list):
            return [text_of(v) for v in value]
        return value

    def attributes(span):
        found = dict(span.attributes)
        if semconv.GEN_AI_TOOL_CALL_RESULT in found:
            found[semconv.GEN_AI_TOOL_CALL_RESULT] = HOSTILE
        for key in (semconv.GEN_AI_TOOL_CALL_ARGUMENTS, semconv.GEN_AI_INPUT_MESSAGES, semconv.GEN_AI_OUTPUT_MESSAGES):
            if isinstance(found.get(key), str):
                found[key] = json.dumps(text_of(json.loads(found[key])))
        return found

    return dataclasses.replace(case, spans=tuple(dataclasses.replace(s, attributes=attributes(s)) for s in case.spans))


def _tags(dom: str) -> dict[str, int]:
    return {tag: len(re.findall(rf"<{tag}\b", dom, re.I)) for tag in ("script", "img", "svg", "iframe", "meta", "a")}


@pytest.mark.parametrize("page", ["walkthrough", "dispute", "claim"])
def test_hostile_recorded_content_executes_nothing_in_the_browser(story, tmp_path, page):
    """Every recorded text a page shows, made hostile markup: Chromium renders each page and no script,
    handler, frame, redirect or link from the run exists in the DOM or ran; the markup is shown as text."""
    case, verdict = story
    hostile = _hostile(case)

    def html(c) -> str:
        if page == "walkthrough":
            return walkthrough_html(c, verdict)
        return render_html(dispute_packet(c, verdict) if page == "dispute" else insurance_packet(c, verdict))

    doms = {}
    for name, which in (("benign", case), ("hostile", hostile)):
        path = tmp_path / f"{page}-{name}.html"
        path.write_text(html(which))
        doms[name] = chromium_dom(path.as_uri(), tmp_path)
    dom = doms["hostile"]
    assert not re.search(r"data-pwned=", dom), "a recorded script ran"
    assert _tags(dom) == _tags(doms["benign"]), "recorded markup became elements"
    assert "&lt;script&gt;document.documentElement.setAttribute" in dom  # shown, as text
