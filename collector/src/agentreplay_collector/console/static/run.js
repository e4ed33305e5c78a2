/* AgentReplay console: a run's page (summary, verdict, commands, timeline, steps, decisions). */
(function () {
  'use strict';
  var C = window.AgentReplayConsole, M = window.AgentReplayMoney;
  var el = C.el, clear = C.clear, tokenAgent = C.tokenAgent, api = C.api, ns = C.ns,
      duration = C.duration, when = C.when, usd = C.usd, parsed = C.parsed, pretty = C.pretty,
      quote = C.quote, manifestOf = C.manifestOf, multipliers = C.multipliers,
      isLive = C.isLive, fail = C.fail, hideLogin = C.hideLogin, ask = C.ask,
      section = C.section, kv = C.kv, current = C.current;

  // --- Run -------------------------------------------------------------------------------------
  function attr(span, name) { return span.attributes ? span.attributes[name] : undefined; }

  function stepOf(span) {
    var s = attr(span, 'agentreplay.step');
    return s === undefined || s === '' ? null : Number(s);
  }

  function kindOf(span) {
    var op = attr(span, 'gen_ai.operation.name') || '';
    if (op === 'execute_tool' || attr(span, 'gen_ai.tool.name') !== undefined) { return 'tool'; }
    if (op === 'invoke_agent') { return 'agent'; }
    if (op === 'chat' || op === 'text_completion' || op === 'generate_content' || op === 'embeddings' ||
        attr(span, 'gen_ai.request.model') !== undefined) { return 'llm'; }
    return 'other';
  }

  var RELOAD_MS = 1000;
  var RUN_ALERTS = 100;  // the newest alerts the run page looks through for its own  // a live run's page reads it again at most this often, when the feed says it changed

  function runPage(main, runId, gen) {
    var id = encodeURIComponent(runId);
    var agentId = null;
    var loading = false;
    var again = false;
    var following = false;
    var loadedAt = 0;

    function reload() {  // the feed said the run changed: read it again, one read at a time
      if (loading) { again = true; return; }
      loading = true;
      window.setTimeout(function () { load(false); }, Math.max(0, loadedAt + RELOAD_MS - Date.now()));
    }

    var pushed = [];  // the run's alerts the feed brought (shown at once, whether or not stored yet)

    function onEvent(kind, doc) {
      if (!current(gen)) { return; }
      if (kind === 'snapshot' || kind === 'alert') {
        var docs = (kind === 'alert' ? [doc] : doc.alerts || []).filter(function (a) {
          return a.run_id === runId && !pushed.some(function (p) { return p.alert_id === a.alert_id; });
        });
        if (!docs.length) { return; }
        pushed = docs.map(function (a) {
          return {time: when(a.time_ns), alert_id: a.alert_id, severity: a.severity, kind: a.kind,
            agent_id: a.agent_id, run_id: a.run_id, message: a.message};
        }).concat(pushed);
        reload();
        return;
      }
      var halts = kind === 'halt' || kind === 'resume';
      if ((kind === 'run' && doc.run_id === runId) ||
          (halts && ((doc.scope === 'run' && doc.target === runId) || (doc.scope === 'agent' && doc.target === agentId)))) {
        reload();
      }
    }

    function load(first) {
      loading = true;
      Promise.all([
        api('/v1/runs/' + id),
        api('/v1/runs/' + id + '/spans'),
        api('/v1/runs/' + id + '/classifications').catch(function () { return {classifications: []}; }),
        api('/v1/decisions?run=' + id).catch(function () { return {decisions: []}; }),
        api('/v1/halts').catch(function () { return {halts: []}; }),
        api('/v1/runs/' + id + '/model-trials').catch(function () { return {trials: []}; }),
        api('/v1/alerts?limit=' + RUN_ALERTS).catch(function () { return {alerts: []}; }),
        api('/v1/runs/' + id + '/incident').catch(function () { return null; }),
        api('/v1/runs/' + id + '/expected').catch(function () { return null; })
      ]).then(function (got) {
        var agent = got[0].agent_id;  // one agent's score, not every agent's, each time a live run is read
        return Promise.all([manifestOf(got[0].manifest_sha256), agent ? multipliers(agent) : {}]).then(function (more) {
          return got.concat(more);
        });
      }).then(function (got) {
        if (!current(gen)) { return; }
        hideLogin();
        agentId = got[0].agent_id;
        var focused = document.activeElement && document.activeElement.id;
        var stored = (got[6].alerts || []).filter(function (a) { return a.run_id === runId; });
        var alerts = pushed.filter(function (a) {
          return !stored.some(function (s) { return s.alert_id === a.alert_id; });
        }).concat(stored);
        drawRun(main, got[0], got[1].spans || [], got[2].classifications || [], got[3].decisions || [],
          got[4].halts || [], got[9], got[10][got[0].agent_id], got[5].trials || [], alerts, got[7], got[8]);
        if (focused && document.getElementById(focused)) { document.getElementById(focused).focus(); }
        document.body.setAttribute('data-state', 'ready');
        if (first) {
          showCulprit(main);
          // how long the page took to be usable (read by the bench): drawn, then painted at the next frame
          window.performance.mark('agentreplay-run-drawn');
          window.requestAnimationFrame(function () { window.performance.mark('agentreplay-run-painted'); });
        }
        if (!following && isLive(got[0])) {  // follow the run as the collector pushes what happens to it
          following = true;
          C.live(onEvent, runId);
        }
      }).catch(function (err) { if (current(gen)) { fail(main, err); } }).then(function () {
        loadedAt = Date.now();
        loading = false;
        if (again && current(gen)) { again = false; reload(); }
      });
    }
    clear(main);
    main.appendChild(el('p', {'class': 'muted', text: 'Loading run ' + runId + '…'}));
    load(true);
  }

  function showCulprit(main) {
    var culprit = main.querySelector('section.step.culprit');
    if (culprit) { culprit.scrollIntoView({block: 'center'}); }
  }

  function drawRun(main, run, spans, classifications, decisions, halts, manifest, multiplier, trials, alerts,
                   incident, expectedDoc) {
    clear(main);
    var runId = run.run_id;
    var halt = halts.filter(function (h) {
      return (h.scope === 'run' && h.target === runId) || (h.scope === 'agent' && h.target === run.agent_id);
    })[0];
    var failed = classifications.filter(function (c) { return c.verdict === 'failed'; });
    var chosen = failed[0] || classifications[0] || null;
    var verdictDoc = chosen ? parsed(chosen.verdict_json) : null;
    var culpritStep = chosen && chosen.culprit_step !== null && chosen.culprit_step !== undefined ?
      Number(chosen.culprit_step) : null;
    document.body.setAttribute('data-run', runId);
    document.body.setAttribute('data-culprit', culpritStep === null ? '' : String(culpritStep));

    var title = el('h1', {}, ['Run ', el('code', {id: 'run-id', text: runId})]);
    if (isLive(run)) { title.appendChild(el('span', {'class': 'badge live', id: 'live-badge', text: 'live'})); }
    if (halt || run.halted) { title.appendChild(el('span', {'class': 'badge halted', id: 'halted-badge', text: 'halted'})); }
    main.appendChild(el('p', {}, [el('a', {href: '#/runs', text: '← Runs'})]));
    main.appendChild(title);

    // summary and the kill switch
    var chain = run.chain || {};
    var spent = M.spentBy(spans, run.cost_usd);  // by currency: never two currencies added up
    main.appendChild(section('Summary', 'summary', [kv([
      ['Agent', run.agent_id || run.service_name],
      ['Name', run.name],
      ['Kind', run.run_kind + (run.replay_of ? ' of ' + run.replay_of : '')],
      ['Started', when(run.start_ns)],
      ['Duration', duration(run.start_ns, run.end_ns)],
      ['Spans', String(run.span_count)],
      ['Cost', M.totalsText(spent), 'cost'],
      ['Spend cap', M.capText(spent, manifest, multiplier), 'cap'],
      ['Outcome', M.outcome(run), 'outcome'],
      ['Chain', chain.status + (chain.seal ? ', seal ' + chain.seal : '') +
        (chain.problem ? ', ' + chain.problem + (chain.seq !== null && chain.seq !== undefined ? ' at seq ' + chain.seq : '') : '') +
        (chain.detail ? ': ' + chain.detail : ''), 'chain'],
      ['Manifest', run.manifest_sha256 ? run.manifest_sha256.slice(0, 16) : ''],
      ['Halted', halt ? 'by ' + halt.actor + ': ' + halt.reason : (run.halted ? 'yes' : ''), 'halt']
    ]), controls(run, halt)]));
    if (manifest) {
      main.appendChild(section('Manifest', 'manifest', [el('details', {}, [
        el('summary', {text: 'What the agent may do: its tools, arguments and limits (' +
          run.manifest_sha256.slice(0, 12) + ')'}),
        el('pre', {'class': 'manifest', text: JSON.stringify(manifest, null, 2)})])]));
    }

    if (alerts.length) { main.appendChild(drawAlerts(alerts)); }
    if (incident && incident.files && incident.files.length) { main.appendChild(drawIncident(runId, incident.files)); }

    // the verdict
    main.appendChild(drawVerdict(classifications, verdictDoc, culpritStep, expectedOf(spans, expectedDoc)));

    // commands to copy
    main.appendChild(drawCommands(runId, spans, verdictDoc, culpritStep));
    if (trials.length) { main.appendChild(drawTrials(run, trials)); }
    main.appendChild(compareForm(run));

    // the timeline, then each step
    var ordered = spans.slice().sort(function (a, b) { return ns(a.start_ns) - ns(b.start_ns); });
    main.appendChild(drawWaterfall(run, ordered, culpritStep));
    main.appendChild(drawSteps(ordered, decisions, culpritStep));
    main.appendChild(drawDecisions(decisions, spans));
  }

  function drawAlerts(alerts) {
    var list = el('ul', {'class': 'alert-list'});
    alerts.forEach(function (a) {
      list.appendChild(el('li', {'class': 'alert ' + (a.severity || ''), 'data-alert': a.alert_id, 'data-kind': a.kind}, [
        el('span', {'class': 'muted', text: (a.time || '') + ' '}),
        el('strong', {text: (a.severity || '') + ' ' + (a.kind || '')}), ': ' + (a.message || '')]));
    });
    return section('Alerts', 'run-alerts', [list]);
  }

  var INCIDENT_FILES = {  // what each file of an incident is for (others are listed by name)
    'walkthrough.html': 'the narrated walkthrough (arrow keys step)',
    'root-cause.json': 'the root cause: failure modes, culprit, evidence',
    'dispute.html': 'the dispute packet, for the counterparty', 'dispute.json': 'the dispute packet (JSON)',
    'claim.html': 'the insurance-claim packet', 'claim.json': 'the insurance-claim packet (JSON)'
  };

  function drawIncident(runId, files) {
    // Each file is fetched with the token (a plain link could not send it) and saved: a page of the incident
    // runs its own script only where it is opened as a file, never inside the console's origin.
    var list = el('ul', {'class': 'incident-files'});
    files.forEach(function (f) {
      var link = el('a', {href: '#', 'class': 'incident-file', 'data-file': f.name, text: f.name});
      link.addEventListener('click', function (e) {
        e.preventDefault();
        link.setAttribute('data-fetched', 'loading');
        var headers = {};
        if (C.token()) { headers.Authorization = 'Bearer ' + C.token(); }
        window.fetch('/v1/runs/' + encodeURIComponent(runId) + '/incident/' + f.name.split('/').map(encodeURIComponent).join('/'),
          {headers: headers, credentials: 'omit', cache: 'no-store'}).then(function (answer) {
          if (!answer.ok) { throw new Error(answer.status + ' ' + answer.statusText); }
          return answer.blob();
        }).then(function (blob) {
          var url = window.URL.createObjectURL(new window.Blob([blob], {type: 'application/octet-stream'}));
          var save = el('a', {href: url, download: runId.slice(0, 12) + '-' + f.name.replace(/\//g, '-')});
          document.body.appendChild(save);
          save.click();
          document.body.removeChild(save);
          window.setTimeout(function () { window.URL.revokeObjectURL(url); }, 10000);
          link.setAttribute('data-fetched', String(blob.size));
        }).catch(function (err) {
          link.setAttribute('data-fetched', 'error');
          link.setAttribute('title', err.message || String(err));
        });
      });
      list.appendChild(el('li', {}, [link, el('span', {'class': 'muted',
        text: ' ' + (INCIDENT_FILES[f.name] || (/\.py$/.test(f.name) ? 'the regression test' : 'its case file')) +
          ' (' + Math.max(1, Math.round(f.bytes / 1024)) + ' KiB)'})]));
    });
    return section('Incident', 'incident', [
      el('p', {'class': 'muted', text: 'Written by the collector for this halted run; each file is saved when clicked.'}),
      list]);
  }

  function controls(run, halt) {
    var box = el('div', {'class': 'controls'});
    if (tokenAgent() !== null) {
      box.appendChild(el('span', {'class': 'muted', id: 'control-note',
        text: 'This tab holds an agent\'s token, which the console refuses: Kill and Resume take the admin token.'}));
    } else if (halt) {
      var whole = halt.scope === 'agent';
      var resume = el('button', {type: 'button', id: 'resume', text: whole ? 'Resume agent' : 'Resume run'});
      resume.addEventListener('click', function () {
        ask(whole ? 'Resume agent ' + halt.target + ' (halted as a whole)?' : 'Resume run ' + run.run_id + '?',
          (whole ? 'Every run of the agent may continue.' : 'The run may continue (a halt of its whole agent stays).') +
          ' Needs the admin token.', 'Resume', false,
          function (reason) {
            return api('/v1/resume', {method: 'POST', body: {scope: halt.scope, target: halt.target, reason: reason}});
          });
      });
      box.appendChild(resume);
    } else {
      var kill = el('button', {type: 'button', id: 'kill', 'class': 'danger', text: 'Kill run'});
      kill.addEventListener('click', function () {
        ask('Kill run ' + run.run_id + '?',
          'The run is halted: its next LLM or tool call raises RunHalted. Needs the admin token.', 'Kill', true,
          function (reason) {
            return api('/v1/halts', {method: 'POST', body: {scope: 'run', target: run.run_id, reason: reason}});
          });
      });
      box.appendChild(kill);
    }
    box.appendChild(el('span', {id: 'control-result', 'class': 'muted', role: 'status'}));
    return box;
  }

  // What the run should produce: the value set after it (agentreplay expect), which wins, else the one its
  // run span recorded; null when neither. Recorded text: shown as text, never as markup.
  function expectedOf(spans, expectedDoc) {
    if (expectedDoc && expectedDoc.expected !== null && expectedDoc.expected !== undefined) {
      var value = expectedDoc.expected;
      return {text: typeof value === 'string' ? value : JSON.stringify(value), source: 'set with agentreplay expect'};
    }
    var root = spans.filter(function (s) { return !s.parent_span_id && attr(s, 'agentreplay.run.expected'); })[0];
    return root ? {text: attr(root, 'agentreplay.run.expected'), source: 'recorded by the run'} : null;
  }

  function metText(doc) {
    if (!doc.expected) { return 'not held to it'; }
    return doc.expected_met === true ? 'met' : doc.expected_met === false ? 'not met' : 'not judged yet';
  }

  function drawVerdict(classifications, verdictDoc, culpritStep, expected) {
    var children = [];
    if (expected) {
      children.push(el('p', {id: 'expected', 'data-source': expected.source}, [
        el('strong', {text: 'Expected outcome'}), ' (' + expected.source + '): ',
        el('code', {'class': 'expected-value', text: expected.text})]));
    }
    if (!classifications.length) {
      children.push(el('p', {'class': 'muted', text: 'No verdict stored (the collector\'s analysis has not judged this run, or is off).'}));
    }
    classifications.forEach(function (c) {
      var doc = parsed(c.verdict_json) || {};
      var modes = (doc.modes || []).map(function (m) {
        return el('li', {'data-mode': m.mode}, [el('strong', {text: m.mode + ' ' + (m.name || '')}),
          ' (' + (m.detector || c.classifier) + '): ', m.explanation || '']);
      });
      if (!modes.length) {
        (c.failure_modes || []).forEach(function (m) { modes.push(el('li', {'data-mode': m, text: m})); });
      }
      children.push(el('div', {'class': 'verdict-box ' + c.verdict, 'data-verdict': c.verdict}, [
        el('p', {}, [el('strong', {text: c.verdict}), ' by ' + c.classifier + (c.model ? ' (' + c.model + ')' : '') +
          (c.verified ? '' : ' — judged although the chain did not verify')]),
        modes.length ? el('ul', {'class': 'modes'}, modes) : null,
        c.culprit_step !== null && c.culprit_step !== undefined ?
          el('p', {}, ['Culprit: ', el('a', {href: '#step-' + c.culprit_step, 'class': 'culprit-link',
            'data-step': String(c.culprit_step), text: 'step ' + c.culprit_step})]) : null,
        doc.root_cause ? el('p', {text: 'Root cause: ' + doc.root_cause}) : null,
        expected || doc.expected ? el('p', {'class': 'expected-met', 'data-met': doc.expected ?
          String(doc.expected_met) : ''}, [doc.expected && expected && doc.expected !== expected.text ?
          'Held to an earlier expected outcome: ' + metText(doc) : 'Expected outcome: ' + metText(doc)]) : null
      ]));
    });
    var box = section('Verdict', 'verdict', children);
    box.querySelectorAll('a.culprit-link').forEach(function (a) {
      a.addEventListener('click', function (e) {
        e.preventDefault();
        var target = document.getElementById('step-' + a.getAttribute('data-step'));
        if (target) { target.scrollIntoView({block: 'center'}); target.focus(); }
      });
    });
    return box;
  }

  function drawTrials(run, trials) {
    var body = el('tbody');
    trials.forEach(function (t) {
      body.appendChild(el('tr', {'data-model': t.model, 'data-outcome': t.outcome}, [
        el('td', {text: (t.provider ? t.provider + ':' : '') + t.model}),
        el('td', {text: String(t.step)}),
        el('td', {'class': 'trial ' + t.outcome, text: t.outcome}),
        el('td', {text: (t.failure_modes || []).join(', ')}),
        el('td', {text: t.detail}),
        el('td', {}, [t.fork_run_id ? el('a', {href: '#/diff/' + encodeURIComponent(run.run_id) + '/' +
          encodeURIComponent(t.fork_run_id), 'class': 'trial-diff', text: 'side by side'}) : null])
      ]));
    });
    return section('Model trials', 'trials', [el('table', {'class': 'trials'}, [el('thead', {}, [el('tr', {},
      ['Model', 'Forked at', 'Outcome', 'Modes', 'Why', 'Fork'].map(function (h) {
        return el('th', {scope: 'col', text: h});
      }))]), body])]);
  }

  function compareForm(run) {
    var other = el('input', {id: 'compare-with', type: 'text', size: '34', spellcheck: 'false',
      placeholder: 'another run id', value: run.replay_of || ''});
    var form = el('form', {id: 'compare', 'class': 'filters'}, [
      el('label', {'for': 'compare-with', text: 'Compare with'}), other,
      el('button', {type: 'submit', text: 'Side by side'})]);
    form.addEventListener('submit', function (e) {
      e.preventDefault();
      var id = other.value.trim().toLowerCase();
      if (id) { window.location.hash = '#/diff/' + encodeURIComponent(run.replay_of === id ? id : run.run_id) + '/' +
        encodeURIComponent(run.replay_of === id ? run.run_id : id); }
    });
    return section('Compare', 'compare-section', [form]);
  }

  function drawCommands(runId, spans, verdictDoc, culpritStep) {
    var llmSteps = spans.filter(function (s) { return kindOf(s) === 'llm' && stepOf(s) !== null; })
      .map(stepOf).sort(function (a, b) { return a - b; });
    var at = null;
    if (verdictDoc && verdictDoc.fix && verdictDoc.fix.at !== undefined) { at = Number(verdictDoc.fix.at); }
    else if (culpritStep !== null) {
      llmSteps.forEach(function (s) { if (s <= culpritStep) { at = s; } });
    }
    if (at === null && llmSteps.length) { at = llmSteps[0]; }
    var lines = [['replay', 'agentreplay replay ' + quote(runId)]];
    if (at !== null) { lines.push(['fork', 'agentreplay fork ' + quote(runId) + ' --at ' + at]); }
    var fix = verdictDoc && verdictDoc.fix;
    if (fix && fix.at !== undefined && (typeof fix.system === 'string' || typeof fix.message === 'string')) {
      // quoted here from the fix's fields: a command line stored with the verdict is never shown as given
      lines.push(['fork-fix', 'agentreplay fork ' + quote(runId) + ' --at ' + Number(fix.at) +
        (typeof fix.system === 'string' ? ' --system ' + quote(fix.system) : '') +
        (typeof fix.message === 'string' ? ' --message ' + quote(fix.message) : '')]);
    }
    lines.push(['export', 'agentreplay export ' + quote(runId) + ' -o ' + quote(runId.slice(0, 12) + '.case.json')]);
    var list = el('ul', {'class': 'commands'});
    lines.forEach(function (pair) {
      var code = el('code', {id: 'cmd-' + pair[0], text: pair[1]});
      var copy = el('button', {type: 'button', 'class': 'copy', text: 'Copy'});
      copy.addEventListener('click', function () {
        var done = function () { copy.textContent = 'Copied'; };
        if (navigator.clipboard && navigator.clipboard.writeText) {
          navigator.clipboard.writeText(pair[1]).then(done, function () { selectText(code); });
        } else { selectText(code); }
      });
      list.appendChild(el('li', {}, [code, copy]));
    });
    return section('Commands', 'commands', [list]);
  }

  function selectText(node) {
    var range = document.createRange();
    range.selectNodeContents(node);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  function drawWaterfall(run, spans, culpritStep) {
    var start = ns(run.start_ns);
    var end = ns(run.end_ns);
    spans.forEach(function (s) {
      start = Math.min(start || ns(s.start_ns), ns(s.start_ns));
      end = Math.max(end, ns(s.end_ns));
    });
    var total = Math.max(1, end - start);
    var depth = {};
    var byId = {};
    spans.forEach(function (s) { byId[s.span_id] = s; });
    function level(s) {
      if (depth[s.span_id] !== undefined) { return depth[s.span_id]; }
      depth[s.span_id] = 0;
      var parent = byId[s.parent_span_id];
      depth[s.span_id] = parent ? Math.min(8, level(parent) + 1) : 0;
      return depth[s.span_id];
    }
    var rows = el('ol', {'class': 'waterfall', id: 'waterfall'});
    spans.forEach(function (s) {
      var step = stepOf(s);
      var left = (ns(s.start_ns) - start) / total * 100;
      var width = Math.max(0.3, (ns(s.end_ns) - ns(s.start_ns)) / total * 100);
      var foreign = attr(s, 'agentreplay.chain.seq') === undefined;
      var bar = el('span', {'class': 'bar ' + kindOf(s)});
      bar.style.marginLeft = left.toFixed(3) + '%';
      bar.style.width = Math.min(width, 100 - left).toFixed(3) + '%';
      var label = el('span', {'class': 'label'}, [
        step !== null ? el('span', {'class': 'stepno', text: String(step)}) : null,
        s.name,
        foreign ? el('span', {'class': 'badge foreign', text: 'attached'}) : null,
        s.status_code === 'Error' ? el('span', {'class': 'badge halted', text: 'error'}) : null
      ]);
      label.style.paddingLeft = (level(s) * 0.8).toFixed(1) + 'em';
      var row = el('li', {'class': 'wf-row' + (step !== null && step === culpritStep ? ' culprit' : ''),
        'data-span': s.span_id, 'data-step': step === null ? null : String(step), tabindex: '0'}, [
        label, el('span', {'class': 'track'}, [bar]), el('span', {'class': 'dur', text: duration(s.start_ns, s.end_ns)})
      ]);
      function go() {
        var target = document.getElementById('span-' + s.span_id);
        if (target) { target.scrollIntoView({block: 'center'}); target.focus(); }
      }
      row.addEventListener('click', go);
      row.addEventListener('keydown', function (e) {
        if (e.key === 'Enter') { e.preventDefault(); go(); }
        else if (e.key === 'ArrowDown' && row.nextElementSibling) { e.preventDefault(); row.nextElementSibling.focus(); }
        else if (e.key === 'ArrowUp' && row.previousElementSibling) { e.preventDefault(); row.previousElementSibling.focus(); }
      });
      rows.appendChild(row);
    });
    return section('Timeline', 'timeline', [rows]);
  }

  function messageList(raw, cls) {
    var messages = parsed(raw);
    if (!Array.isArray(messages)) {
      return el('pre', {'class': cls, text: pretty(raw)});
    }
    var list = el('ol', {'class': 'messages ' + cls});
    var lastAnswer = -1;  // what an input repeats from earlier calls (up to the model's last answer) is folded
    if (cls === 'input') {
      messages.forEach(function (m, n) { if (m && m.role === 'assistant') { lastAnswer = n; } });
    }
    var earlier = lastAnswer >= 0 ? el('ol', {'class': 'messages earlier'}) : null;
    if (earlier) {
      list.appendChild(el('li', {}, [el('details', {}, [
        el('summary', {text: (lastAnswer + 1) + ' earlier message' + (lastAnswer ? 's' : '') +
          ' (up to the model\'s last answer)'}), earlier])]));
    }
    messages.forEach(function (m, n) {
      if (!m || typeof m !== 'object') { m = {role: '?', parts: [{type: 'text', content: pretty(m)}]}; }
      var parts = Array.isArray(m.parts) ? m.parts : [{type: 'text', content: m.content}];
      var item = el('li', {'class': 'message', 'data-role': m.role || ''}, [el('span', {'class': 'role', text: m.role || '?'})]);
      parts.forEach(function (p) {
        if (p && p.type === 'text') {
          item.appendChild(el('pre', {'class': 'part text', text: typeof p.content === 'string' ? p.content : pretty(p.content)}));
        } else if (p && p.type === 'tool_call') {
          item.appendChild(el('div', {'class': 'part tool-call'}, [
            el('span', {'class': 'muted', text: 'calls '}), el('strong', {text: String(p.name || '')}),
            el('pre', {text: pretty(p.arguments)})]));
        } else if (p && p.type === 'tool_call_response') {
          item.appendChild(el('div', {'class': 'part tool-response'}, [
            el('span', {'class': 'muted', text: 'tool answered'}), el('pre', {text: pretty(p.response !== undefined ? p.response : p.result)})]));
        } else {
          item.appendChild(el('pre', {'class': 'part other', text: pretty(p)}));
        }
      });
      (earlier && n <= lastAnswer ? earlier : list).appendChild(item);
    });
    return list;
  }

  // A step's charge in the currency it was charged in ("89.00 EUR"), as the packets write it (money.js).
  function chargeText(s) {
    var currency = attr(s, 'agentreplay.cost.currency');
    var amount = attr(s, 'agentreplay.cost.amount');
    if (currency && currency !== M.USD && amount !== undefined && !isNaN(Number(amount))) {
      return ' · ' + M.money(amount, currency);
    }
    return attr(s, 'agentreplay.cost.usd') ? ' · ' + usd(attr(s, 'agentreplay.cost.usd')) : '';
  }

  function drawSteps(spans, decisions, culpritStep) {
    var children = [];
    spans.forEach(function (s) {
      var kind = kindOf(s);
      var step = stepOf(s);
      if (kind === 'agent') { return; }
      var isCulprit = step !== null && step === culpritStep;
      var heading = el('h3', {}, [step !== null ? 'Step ' + step + ': ' : '', s.name,
        isCulprit ? el('span', {'class': 'badge culprit-badge', text: 'culprit'}) : null,
        attr(s, 'agentreplay.chain.seq') === undefined ? el('span', {'class': 'badge foreign', text: 'attached, not in the chain'}) : null]);
      var body = [heading, el('p', {'class': 'muted', text: duration(s.start_ns, s.end_ns) +
        chargeText(s) +
        (s.status_code === 'Error' ? ' · error ' + (attr(s, 'error.type') || s.status_message || '') : '')})];
      if (kind === 'llm') {
        body.push(kv([
          ['Model', attr(s, 'gen_ai.request.model') || attr(s, 'gen_ai.response.model')],
          ['Provider', attr(s, 'gen_ai.provider.name')],
          ['Tokens', (attr(s, 'gen_ai.usage.input_tokens') || '0') + ' in, ' + (attr(s, 'gen_ai.usage.output_tokens') || '0') + ' out'],
          ['Finish', attr(s, 'gen_ai.response.finish_reasons')]
        ]));
        if (attr(s, 'gen_ai.input.messages') !== undefined) {
          body.push(el('h4', {text: 'Messages in'}), messageList(attr(s, 'gen_ai.input.messages'), 'input'));
        }
        if (attr(s, 'gen_ai.output.messages') !== undefined) {
          body.push(el('h4', {text: 'Answer'}), messageList(attr(s, 'gen_ai.output.messages'), 'output'));
        }
      } else if (kind === 'tool') {
        body.push(kv([['Tool', attr(s, 'gen_ai.tool.name')],
          ['Side effect', attr(s, 'agentreplay.tool.side_effect') === 'true' ? 'yes (acts on the world)' : '']]));
        body.push(el('h4', {text: 'Arguments'}), el('pre', {'class': 'arguments', text: pretty(attr(s, 'gen_ai.tool.call.arguments'))}));
        if (attr(s, 'gen_ai.tool.call.result') !== undefined) {
          body.push(el('h4', {text: 'Result'}), el('pre', {'class': 'result', text: pretty(attr(s, 'gen_ai.tool.call.result'))}));
        }
      }
      var mine = decisions.filter(function (d) { return d.span_id === s.span_id; });
      (s.events || []).forEach(function (e) {
        if (e.name === 'agentreplay.policy.decision' && !mine.length) {
          mine.push({decision: e.attributes['agentreplay.policy.outcome'], rule: e.attributes['agentreplay.policy.rule'],
            detail: e.attributes['agentreplay.policy.detail'], source: e.attributes['agentreplay.policy.source']});
        }
      });
      mine.forEach(function (d) {
        body.push(el('p', {'class': 'decision ' + d.decision, 'data-decision': d.decision}, [
          el('strong', {text: d.decision === 'deny' ? 'Denied' : 'Allowed'}), ' by ' + (d.rule || '?') +
          ' (' + (d.source || '') + ')' + (d.detail ? ': ' + d.detail : '')]));
      });
      (s.events || []).forEach(function (e) {
        if (e.name === 'exception') {
          body.push(el('p', {'class': 'error', text: (e.attributes['exception.type'] || 'exception') + ': ' +
            (e.attributes['exception.message'] || '')}));
        }
      });
      children.push(el('section', {'class': 'step ' + kind + (isCulprit ? ' culprit' : ''), id: 'span-' + s.span_id,
        'data-step': step === null ? null : String(step), 'data-tool': kind === 'tool' ? attr(s, 'gen_ai.tool.name') : null,
        tabindex: '-1'}, body));
    });
    var box = section('Steps', 'steps', children);
    box.querySelectorAll('section.step[data-step]').forEach(function (s) {
      var alias = el('span', {id: 'step-' + s.getAttribute('data-step'), 'class': 'anchor', tabindex: '-1'});
      s.insertBefore(alias, s.firstChild);
    });
    return box;
  }

  function drawDecisions(decisions, spans) {
    var steps = {};
    spans.forEach(function (s) { steps[s.span_id] = stepOf(s); });
    if (!decisions.length) {
      return section('Decisions', 'decisions', [el('p', {'class': 'muted', text: 'No policy decisions stored for this run.'})]);
    }
    var table = el('table', {'class': 'decisions'}, [el('thead', {}, [el('tr', {}, ['Step', 'Tool', 'Decision', 'Rule',
      'Why', 'Source'].map(function (h) { return el('th', {scope: 'col', text: h}); }))])]);
    var body = el('tbody');
    decisions.forEach(function (d) {
      var step = steps[d.span_id];
      body.appendChild(el('tr', {'class': d.decision, 'data-decision': d.decision}, [
        el('td', {text: step === null || step === undefined ? '' : String(step)}),
        el('td', {text: d.tool}),
        el('td', {text: d.decision === 'deny' ? 'denied' : 'allowed'}),
        el('td', {text: d.rule}),
        el('td', {text: d.detail}),
        el('td', {text: d.source + (d.replayed ? ' (replayed)' : '')})
      ]));
    });
    table.appendChild(body);
    return section('Decisions', 'decisions', [table]);
  }

  C.runPage = runPage;
}());
