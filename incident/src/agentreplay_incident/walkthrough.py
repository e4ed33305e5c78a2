"""A narrated walkthrough of a run: one self-contained HTML file (inline CSS and script, no network)
that steps through the run one LLM or tool call at a time, each with a plain-words caption, the
culprit step highlighted and the contradiction the analysis found shown side by side.

It opens on the culprit step (or the step a ``#step-N`` fragment names); ←/→ step back and forth,
Home and End go to the first and the last. A fragment can also name keys to press once the page
has loaded (``#step-3&keys=ArrowRight,End``), so a link can show a path through the run.

A recorded value is shown clipped, as in the packets (:func:`~agentreplay_incident.packets.clip_value`):
the case file holds it whole. Every recorded string is untrusted (a tool result is whatever the world answered): the page is
built here with each one escaped, the script carries no recorded data, and the page's content
security policy lets only its own script run (by hash) and fetch nothing.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentreplay_analysis import Verdict
from agentreplay_incident.case import UNSIGNED_NOTICE
from agentreplay_incident.narrative import Contradiction, ToldStep, contradictions, request_of, tell, usd
from agentreplay_incident.packets import clip_value

if TYPE_CHECKING:
    from agentreplay_incident.case import Case

CULPRIT_CLASS = "culprit"
ACTIVE_CLASS = "active"
HIGHLIGHT = "#ffd33d"
"""The culprit step's highlight: its class and its colour (a screenshot finds it by that colour)."""

_SCRIPT = """
(function () {
  var steps = Array.prototype.slice.call(document.querySelectorAll('section.step'));
  var dots = Array.prototype.slice.call(document.querySelectorAll('nav a.dot'));
  var at = 0;
  function show(i) {
    if (!steps.length) { return; }
    at = Math.max(0, Math.min(steps.length - 1, i));
    steps.forEach(function (s, n) { s.classList.toggle('active', n === at); s.hidden = n !== at; });
    dots.forEach(function (d, n) { d.classList.toggle('active', n === at); });
    document.body.setAttribute('data-active', steps[at].getAttribute('data-step'));
    document.getElementById('where').textContent = (at + 1) + ' / ' + steps.length;
  }
  function indexOf(step) {
    for (var n = 0; n < steps.length; n++) {
      if (steps[n].getAttribute('data-step') === step) { return n; }
    }
    return -1;
  }
  function press(key) {
    if (key === 'ArrowRight') { show(at + 1); }
    else if (key === 'ArrowLeft') { show(at - 1); }
    else if (key === 'Home') { show(0); }
    else if (key === 'End') { show(steps.length - 1); }
    else { return false; }
    return true;
  }
  document.addEventListener('keydown', function (e) { if (press(e.key)) { e.preventDefault(); } });
  document.getElementById('prev').addEventListener('click', function () { show(at - 1); });
  document.getElementById('next').addEventListener('click', function () { show(at + 1); });
  dots.forEach(function (d, n) {
    d.addEventListener('click', function (e) { e.preventDefault(); show(n); });
  });
  var fragment = window.location.hash.replace(/^#/, '').split('&');
  var start = indexOf(document.body.getAttribute('data-culprit'));
  var keys = [];
  fragment.forEach(function (part) {
    var step = /^step-(\\d+)$/.exec(part);
    if (step && indexOf(step[1]) >= 0) { start = indexOf(step[1]); }
    if (part.indexOf('keys=') === 0) { keys = part.slice(5).split(','); }
  });
  show(start >= 0 ? start : 0);
  keys.forEach(function (key) {
    document.dispatchEvent(new KeyboardEvent('keydown', {key: decodeURIComponent(key), bubbles: true}));
  });
})();
"""

_CSS = """
*{box-sizing:border-box}
body{margin:0;font:16px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif;color:#1b1f24;background:#f6f8fa}
header{padding:1rem 2rem;background:#24292f;color:#fff}header h1{margin:0;font-size:1.2rem}
header p{margin:.3rem 0 0;color:#d0d7de}
main{max-width:64rem;margin:0 auto;padding:1rem 2rem}
.asked{font-size:1.15rem;background:#fff;border-left:4px solid #0969da;padding:.6rem 1rem;margin:1rem 0}
.vs{display:grid;grid-template-columns:1fr 1fr;gap:1rem;margin:1rem 0}
.vs .side{background:#fff;border:2px solid #0969da;border-radius:8px;padding:.8rem 1rem}
.vs .side.right{border-color:#cf222e}
.vs .label{text-transform:uppercase;font-size:.8rem;letter-spacing:.05em;color:#57606a}
.vs .value{font-size:1.6rem;font-weight:700}.vs small{color:#57606a}
nav{display:flex;flex-wrap:wrap;gap:.3rem;align-items:center;margin:1rem 0}
nav a.dot{display:inline-block;min-width:2.2rem;text-align:center;padding:.2rem .4rem;border-radius:6px;
background:#fff;border:1px solid #d0d7de;color:#1b1f24;text-decoration:none}
nav a.dot.active{outline:3px solid #0969da}
nav a.dot.culprit{background:""" + HIGHLIGHT + """;border-color:#9a6700;font-weight:700}
nav a.dot.refused{border-color:#cf222e;color:#cf222e}
button{font:inherit;padding:.3rem .8rem;border-radius:6px;border:1px solid #d0d7de;background:#fff;cursor:pointer}
#where{margin:0 .5rem;color:#57606a}
section.step{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:1rem 1.5rem;min-height:16rem}
section.step.culprit{background:""" + HIGHLIGHT + """;border:3px solid #9a6700}
section.step h2{margin:.2rem 0 .5rem;font-size:1.1rem}
.caption{font-size:1.2rem;margin:.5rem 0 1rem}
.tag{display:inline-block;font-size:.75rem;padding:.05rem .4rem;border-radius:4px;background:#d0d7de;
margin-left:.4rem;vertical-align:middle}
.tag.culprit{background:#cf222e;color:#fff}.tag.refused{background:#cf222e;color:#fff}
.tag.effect{background:#bf8700;color:#fff}.tag.evidence{background:#0969da;color:#fff}
pre{font:13px ui-monospace,monospace;background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;
padding:.5rem;white-space:pre-wrap;word-break:break-word;max-height:14rem;overflow:auto}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;margin:0}dt{color:#57606a}dd{margin:0}
.help{color:#57606a;font-size:.85rem}
.unsigned{background:#fff1e5;border:2px solid #b42318;color:#b42318;font-weight:600;padding:.5rem;border-radius:6px}
"""


def walkthrough_html(case: Case, verdict: Verdict | None) -> str:
    """The walkthrough of ``case`` as one HTML document, judged by ``verdict`` (None: not analysed)."""
    told = tell(case.spans, halted=case.summary.halted)
    asked = request_of(case.spans)
    found = contradictions(verdict, told, asked)
    culprit = verdict.culprit.step if verdict is not None and verdict.culprit is not None else None
    evidence = {e.step for h in (verdict.modes if verdict else ()) for e in h.evidence if e.step is not None}
    title = f"Walkthrough of run {case.run_id}"
    head = _header(case, verdict, culprit)
    unsigned = "" if case.signed else f"<p class=\"unsigned\">{_e(UNSIGNED_NOTICE)}</p>"
    body = "\n".join([
        f"<header>{unsigned}<h1>{_e(title)}</h1>{head}</header>",
        "<main>",
        f"<div class=\"asked\"><b>The user asked:</b> {_e(clip_value(asked)) if asked else '<i>(no request recorded)</i>'}</div>",
        _vs(found[0], anchor="contradiction") if found else "",
        _nav(told, culprit),
        "\n".join(_step(s, culprit, evidence, found) for s in told) or "<p>No LLM or tool call is recorded.</p>",
        "<p class=\"help\">← → step back and forth · Home / End: first and last step · "
        "a link ending in #step-N opens that step.</p>",
        "</main>",
    ])
    script_hash = base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
    policy = f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'"
    culprit_attr = "" if culprit is None else str(culprit)
    first = "<!doctype html>" + ("" if case.signed else f"<!-- {_e(UNSIGNED_NOTICE)} -->")
    return (f"{first}\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{policy}\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(title)}</title><style>{_CSS}</style></head>\n"
            f"<body data-culprit=\"{_e(culprit_attr)}\" data-active=\"\">\n{body}\n"
            f"<script>{_SCRIPT}</script>\n</body></html>\n")


def _header(case: Case, verdict: Verdict | None, culprit: int | None) -> str:
    s = case.summary
    outcome = "halted" if s.halted else ("ended in an error" if s.status_code == "Error" else "completed")
    if verdict is None:
        judged = "Not analysed."
    else:
        at = f" The culprit is step {culprit}." if culprit is not None else ""
        judged = f"Verdict: {verdict.outcome}. {verdict.root_cause}{at}"
    return (f"<p>Agent {_e(s.agent_id)} · {_e(s.agent_name)} · the run {_e(outcome)} · chain {_e(s.chain.status.value)}"
            f"</p><p>{_e(judged)}</p>")


def _vs(c: Contradiction, anchor: str = "") -> str:
    def side(label: str, value: str, where: str, context: str, cls: str) -> str:
        more = f"<div><small>{_e(context)}</small></div>" if context else ""
        return (f"<div class=\"side {cls}\"><div class=\"label\">{_e(label)}</div><div class=\"value\">{_e(value)}"
                f"</div>{more}<small>{_e(where)}</small></div>")

    def where(step: int | None, path: str) -> str:
        return (f"step {step} · " if step is not None else "") + path

    ident = f" id=\"{anchor}\"" if anchor else ""
    return (f"<div class=\"vs\"{ident} data-mode=\"{_e(c.mode)}\">"
            + side(c.left.label, c.left.value, where(c.left.step, c.left.path), c.left.context, "left")
            + side(c.right.label, c.right.value, where(c.right.step, c.right.path), c.right.context, "right")
            + f"</div><p>{_e(c.mode)} {_e(c.mode_name)}: {_e(c.explanation)}</p>")


def _nav(told: Sequence[ToldStep], culprit: int | None) -> str:
    dots = "".join(
        f"<a class=\"dot{' culprit' if s.step == culprit else ''}{' refused' if s.refused else ''}\" "
        f"href=\"#step-{s.step}\" title=\"{_e(s.caption)}\">{s.step}</a>" for s in told)
    return (f"<nav><button id=\"prev\" type=\"button\">← previous</button><span id=\"where\"></span>"
            f"<button id=\"next\" type=\"button\">next →</button>{dots}</nav>")


def _step(s: ToldStep, culprit: int | None, evidence: set[int], found: Sequence[Contradiction]) -> str:
    classes = ["step"] + ([CULPRIT_CLASS] if s.step == culprit else [])
    tags = "".join(f"<span class=\"tag {cls}\">{_e(text)}</span>" for cls, text, on in (
        ("culprit", "the culprit: the decision that went wrong", s.step == culprit),
        ("evidence", "evidence", s.step in evidence and s.step != culprit),
        ("refused", "refused by the manifest", s.refused),
        ("effect", "acts on the world", s.side_effect and not s.refused),
    ) if on)
    kind = "model call" if s.kind == "llm" else "tool call"
    facts = [("when", s.when), ("span", s.span_id)]
    if s.charge is not None:
        facts.append(("charged", str(s.charge)))
    elif s.cost_usd is not None:
        facts.append(("cost", usd(s.cost_usd)))
    facts += [(f"policy: {d.outcome}", f"{d.rule} {d.detail}".strip()) for d in s.decisions]
    if s.failed and s.error:
        facts.append(("error", s.error))
    detail = "".join(f"<dt>{_e(k)}</dt><dd>{_e(clip_value(v))}</dd>" for k, v in facts)
    blocks = []
    if s.kind == "tool":
        blocks.append(("arguments", json.dumps(dict(s.arguments), ensure_ascii=False, indent=1)))
        if s.result:
            blocks.append(("result", s.result))
    else:
        if s.asked_for:
            blocks.append(("the model asked for", "\n".join(s.asked_for)))
        if s.said:
            blocks.append(("the model said", s.said))
    shown = "".join(f"<h3>{_e(label)}</h3><pre>{_e(clip_value(text))}</pre>" for label, text in blocks)
    here = [c for c in found[1:] if s.step in (c.left.step, c.right.step)]  # the first is on top of the page
    sides = "".join(_vs(c) for c in here)
    return (f"<section class=\"{' '.join(classes)}\" id=\"step-{s.step}\" data-step=\"{s.step}\" data-kind=\"{s.kind}\">"
            f"<h2>Step {s.step} · {_e(kind)}: {_e(s.name)}{tags}</h2>"
            f"<p class=\"caption\">{_e(s.caption)}</p>{sides}<dl>{detail}</dl>{shown}</section>")


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)
