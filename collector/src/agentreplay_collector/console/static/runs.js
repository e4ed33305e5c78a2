/* AgentReplay console: the Runs page (with the newest alerts) and the Agents page. */
(function () {
  'use strict';
  var C = window.AgentReplayConsole, M = window.AgentReplayMoney;
  var el = C.el, clear = C.clear, tokenAgent = C.tokenAgent, api = C.api,
      duration = C.duration, when = C.when, usd = C.usd, manifestOf = C.manifestOf,
      multipliers = C.multipliers, runCap = C.runCap, isLive = C.isLive,
      fail = C.fail, hideLogin = C.hideLogin, ask = C.ask, current = C.current,
      PAGE_SIZE = C.PAGE_SIZE, ALERTS = C.ALERTS;
  var VIOLATIONS = 500;
  var MAST_MODES = [  // the failure modes a run list can be filtered by (MAST's ids and names)
    ['FM-1.1', 'disobey task specification'], ['FM-1.2', 'disobey role specification'],
    ['FM-1.3', 'step repetition'], ['FM-1.4', 'loss of conversation history'],
    ['FM-1.5', 'unaware of termination conditions'], ['FM-2.1', 'conversation reset'],
    ['FM-2.2', 'fail to ask for clarification'], ['FM-2.3', 'task derailment'],
    ['FM-2.4', 'information withholding'], ['FM-2.5', "ignored other agent's input"],
    ['FM-2.6', 'reasoning-action mismatch'], ['FM-3.1', 'premature termination'],
    ['FM-3.2', 'no or incomplete verification'], ['FM-3.3', 'incorrect verification']];  // the newest alerts the Agents page looks through for each agent's latest violation

  // --- Runs ------------------------------------------------------------------------------------
  function runsQuery(params) {
    var q = new URLSearchParams();
    var size = Number(params.get('limit'));
    q.set('limit', String(size > 0 && size <= 1000 ? Math.floor(size) : PAGE_SIZE));
    ['agent', 'status', 'verdict', 'since', 'until', 'after'].forEach(function (name) {
      if (params.get(name)) { q.set(name, params.get(name)); }
    });
    return q;
  }

  function runsHash(params) {
    var q = new URLSearchParams();
    ['agent', 'status', 'verdict', 'since', 'until', 'limit', 'after', 'back'].forEach(function (name) {
      if (params[name]) { q.set(name, params[name]); }
    });
    var text = q.toString();
    return '#/runs' + (text ? '?' + text : '');
  }

  function filters(params) {
    var agent = el('input', {id: 'filter-agent', type: 'text', value: params.get('agent') || '',
      placeholder: 'any agent', spellcheck: 'false'});
    var status = el('select', {id: 'filter-status'});
    [['', 'any state'], ['pending', 'live (pending)'], ['intact', 'chain intact'], ['unsealed', 'unsealed'],
      ['broken', 'chain broken'], ['incomplete', 'incomplete'], ['unchained', 'unchained (other instrumentation)'],
      ['Ok', 'outcome ok'], ['Error', 'outcome error']]
      .forEach(function (pair) {
        status.appendChild(el('option', {value: pair[0], selected: (params.get('status') || '') === pair[0],
          text: pair[1]}));
      });
    var verdict = el('select', {id: 'filter-verdict'});
    [['', 'any verdict'], ['failed', 'failed'], ['ok', 'ok']].concat(MAST_MODES.map(function (m) {
      return [m[0], m[0] + ' ' + m[1]];
    })).forEach(function (pair) {
      verdict.appendChild(el('option', {value: pair[0], selected: (params.get('verdict') || '') === pair[0],
        text: pair[1]}));
    });
    var times = ['since', 'until'].map(function (name) {
      return el('input', {id: 'filter-' + name, type: 'text', value: params.get(name) || '', size: '20',
        placeholder: 'ISO time, e.g. 2026-12-04T10:00Z', spellcheck: 'false'});
    });
    var form = el('form', {id: 'filters', 'class': 'filters'}, [
      el('label', {'for': 'filter-agent', text: 'Agent'}), agent,
      el('label', {'for': 'filter-status', text: 'State'}), status,
      el('label', {'for': 'filter-verdict', text: 'Verdict'}), verdict,
      el('label', {'for': 'filter-since', text: 'Started from'}), times[0],
      el('label', {'for': 'filter-until', text: 'before'}), times[1],
      el('button', {type: 'submit', text: 'Filter'})
    ]);
    form.addEventListener('submit', function (e) {
      e.preventDefault();
      window.location.hash = runsHash({agent: agent.value.trim(), status: status.value, verdict: verdict.value,
        since: times[0].value.trim(), until: times[1].value.trim()});
    });
    return form;
  }

  function runsPage(main, params, gen) {
    clear(main);
    main.appendChild(el('h1', {text: 'Runs'}));
    main.appendChild(filters(params));
    var alerts = el('section', {id: 'alerts', 'class': 'panel alerts', 'aria-live': 'polite'});
    main.appendChild(alerts);
    var table = el('table', {id: 'runs', 'class': 'runs'});
    var pager = el('nav', {'class': 'pager', id: 'pager'});
    main.appendChild(table);
    main.appendChild(pager);
    var head = el('thead', {}, [el('tr', {}, ['Started', 'Run', 'Agent', 'Outcome', 'Chain', 'Verdict', 'Cost',
      'Duration', 'Spans'].map(function (h) { return el('th', {scope: 'col', text: h}); }))]);
    var body = el('tbody');
    table.appendChild(head);
    table.appendChild(body);

    var spendMultipliers = null;
    var shown = [];  // the runs in the table, as the read API gives them (live ones kept up to date by the feed)
    var caps = {};  // run id -> its per-run caps, each in its currency (null: none)
    var verdicts = [];  // the classifications of the runs shown
    var fired = [];  // the newest alerts, newest first
    var newest = !params.get('after');  // the first page: runs that start are added on top
    var pending = false;

    function redraw() {  // at most once per batch of events
      if (pending) { return; }
      pending = true;
      window.setTimeout(function () {
        pending = false;
        if (!current(gen)) { return; }
        drawAlerts(alerts, fired);
        drawRuns(body, shown, verdicts, shown.map(function (r) { return caps[r.run_id]; }));
        var live = shown.filter(isLive).length;
        document.getElementById('live-note').textContent = live ? live + ' live' : '';
      }, 0);
    }

    function admits(run) {  // would the page's filters list this run (one the feed says started)?
      var status = params.get('status');
      var agent = params.get('agent');
      if (!newest || params.get('until') || params.get('verdict') || (agent && agent !== run.agent_id)) {
        return false;  // a run that just started has no verdict yet
      }
      if (status && status !== run.chain.status && status !== run.status_code) { return false; }
      var since = params.get('since');
      return !since || !/^\d+$/.test(since) || C.ns(run.start_ns) >= Number(since);
    }

    function onRun(doc) {
      var judged = doc.state === 'judged' && doc.chain;
      var found = shown.filter(function (r) { return r.run_id === doc.run_id; })[0];
      if (!found) {
        if (doc.state === 'judged') { return; }  // judged before it was shown: the store lists it
        found = {run_id: doc.run_id, agent_id: doc.agent_id, agent_name: '', service_name: '', run_kind: '',
          name: doc.name, start_ns: doc.start_ns, end_ns: doc.end_ns, span_count: doc.spans, status_code: '',
          cost_usd: doc.cost_usd, chain: {status: 'pending'}, halted: doc.halted, classification: ''};
        if (!admits(found)) { return; }
        shown.unshift(found);
        shown.sort(function (a, b) { return C.ns(b.start_ns) - C.ns(a.start_ns); });
        if (shown.length > Number(params.get('limit') || PAGE_SIZE)) { shown.pop(); }
      }
      found.span_count = Math.max(Number(found.span_count || 0), Number(doc.spans || 0));
      found.cost_usd = Math.max(Number(found.cost_usd || 0), Number(doc.cost_usd || 0));
      found.end_ns = String(Math.max(C.ns(found.end_ns), C.ns(doc.end_ns)));
      found.halted = found.halted || doc.halted;
      if (doc.name) { found.name = doc.name; }
      if (doc.status_code) { found.status_code = doc.status_code; }
      if (judged) { found.chain = doc.chain; found.classification = doc.classification || ''; }
      if (doc.verdict) { found.verdict = doc.verdict; }
      if (doc.cap_usd !== null && doc.cap_usd !== undefined) { caps[doc.run_id] = withUsdCap(caps[doc.run_id], doc.cap_usd); }
      redraw();
    }

    function onHalt(doc, halted) {
      shown.forEach(function (r) {
        if ((doc.scope === 'run' && r.run_id === doc.target) || (doc.scope === 'agent' && r.agent_id === doc.target)) {
          r.halted = halted;
        }
      });
      redraw();
    }

    function onEvent(kind, doc) {
      if (!current(gen)) { return; }
      if (kind === 'snapshot') {
        (doc.runs || []).forEach(onRun);
        (doc.halts || []).forEach(function (h) { onHalt(h, true); });
        onAlerts(doc.alerts || []);
      } else if (kind === 'run') {
        onRun(doc);
      } else if (kind === 'halt') {
        onHalt(doc, true);
      } else if (kind === 'resume') {
        onHalt(doc, false);
      } else if (kind === 'alert') {
        onAlerts([doc]);
      }
    }

    function onAlerts(docs) {  // newest first
      var known = {};
      fired.forEach(function (a) { known[a.alert_id] = true; });
      var added = docs.filter(function (a) { return !known[a.alert_id]; }).map(function (a) {
        return {time: C.when(a.time_ns), time_ns: a.time_ns, alert_id: a.alert_id, severity: a.severity,
          kind: a.kind, agent_id: a.agent_id, run_id: a.run_id, message: a.message};
      });
      if (!added.length) { return; }
      fired = added.concat(fired).slice(0, ALERTS);
      redraw();
    }

    function load() {
      api('/v1/runs?' + runsQuery(params).toString()).then(function (page) {
        if (!current(gen)) { return null; }
        if (spendMultipliers === null) { spendMultipliers = multipliers(); }
        var ids = page.runs.map(function (r) { return r.run_id; });
        var found = ids.length ? api('/v1/classifications?' + ids.map(function (i) {
          return 'run=' + encodeURIComponent(i);
        }).join('&')).catch(function () { return {classifications: []}; }) : Promise.resolve({classifications: []});
        var newestAlerts = api('/v1/alerts?limit=' + ALERTS).catch(function () { return {alerts: []}; });
        var shas = page.runs.map(function (r) { return r.manifest_sha256; });
        var pageCaps = Promise.all([spendMultipliers, Promise.all(shas.map(manifestOf))]).then(function (both) {
          return page.runs.map(function (r, n) { return runCap(both[1][n], both[0][r.agent_id]); });
        });
        return Promise.all([found, newestAlerts, pageCaps]).then(function (got) {
          if (!current(gen)) { return; }
          hideLogin();
          var byId = {};
          shown.forEach(function (r) { byId[r.run_id] = r; });  // what the feed said meanwhile stays
          shown = page.runs.map(function (r) {
            var seen = byId[r.run_id];
            if (seen && isLive(r)) { r.span_count = Math.max(r.span_count, seen.span_count); r.cost_usd = Math.max(r.cost_usd, seen.cost_usd); }
            if (seen && !isLive(seen)) { return seen; }
            return r;
          }).concat(shown.filter(function (r) {
            return !page.runs.some(function (p) { return p.run_id === r.run_id; });
          })).sort(function (a, b) { return C.ns(b.start_ns) - C.ns(a.start_ns); })
            .slice(0, Math.max(page.runs.length, Number(params.get('limit') || PAGE_SIZE)));
          page.runs.forEach(function (r, n) { if (caps[r.run_id] === undefined) { caps[r.run_id] = got[2][n]; } });
          verdicts = got[0].classifications || [];
          var ids2 = {};
          fired.forEach(function (a) { ids2[a.alert_id] = true; });
          fired = fired.concat((got[1].alerts || []).filter(function (a) { return !ids2[a.alert_id]; })).slice(0, ALERTS);
          redraw();
          drawPager(pager, params, page.next);
          document.body.setAttribute('data-state', 'ready');
        });
      }).catch(function (err) { if (current(gen)) { fail(main, err); } });
    }
    if (newest) { C.live(onEvent); }  // the newest page follows what arrives, pushed by the collector
    load();
  }

  function drawAlerts(box, alerts) {
    clear(box);
    box.appendChild(el('h2', {text: 'Alerts'}));
    if (!alerts.length) {
      box.appendChild(el('p', {'class': 'muted', text: 'No alerts.'}));
      return;
    }
    var list = el('ul', {'class': 'alert-list'});
    alerts.forEach(function (a) {
      list.appendChild(el('li', {'class': 'alert ' + (a.severity || ''), 'data-alert': a.alert_id,
        'data-kind': a.kind}, [
        el('span', {'class': 'muted', text: (a.time || '') + ' '}),
        el('strong', {text: (a.severity || '') + ' ' + (a.kind || '')}), ' ',
        a.run_id ? el('a', {href: '#/run/' + encodeURIComponent(a.run_id), text: a.run_id.slice(0, 12)}) : null,
        ' ' + (a.agent_id || '') + ': ' + (a.message || '')
      ]));
    });
    box.appendChild(list);
  }

  function verdictOf(classifications, runId) {
    var mine = classifications.filter(function (c) { return c.run_id === runId; });
    var failed = mine.filter(function (c) { return c.verdict === 'failed'; });
    var pick = failed.length ? failed : mine;
    if (!pick.length) { return null; }
    var modes = [];
    pick.forEach(function (c) { (c.failure_modes || []).forEach(function (m) { if (modes.indexOf(m) < 0) { modes.push(m); } }); });
    return {verdict: pick[0].verdict, modes: modes};
  }

  // The feed's cap in US dollars (the scope's, at the agent's trust now) replaces the manifest's USD cap;
  // caps in other currencies stay.
  function withUsdCap(known, capUsd) {
    var others = (known || []).filter(function (c) { return c.currency !== M.USD; });
    return [{currency: M.USD, cap: Number(capUsd), base: null}].concat(others);
  }

  // The run's US dollar spend (all the list knows of it) and each per-run cap in its own currency: a share
  // only of a USD cap ("$0.12 of $600.00"); a cap in another currency is named ("· cap 600.00 EUR"), its
  // spend is on the run's page.
  function spend(cost, caps) {
    var cell = el('td', {'class': 'num spend'}, [usd(cost)]);
    (caps || []).forEach(function (c) {
      var inUsd = c.currency === M.USD;
      var share = inUsd ? Number(cost || 0) / c.cap : 0;
      cell.appendChild(el('span', {'class': 'cap' + (share >= 0.8 ? ' near' : ''), 'data-cap': String(c.cap),
        'data-currency': c.currency, title: 'the per-run cap: the manifest\'s, times the agent\'s trust multiplier',
        text: inUsd ? ' of ' + M.money(c.cap, M.USD) : ' · cap ' + M.money(c.cap, c.currency)}));
    });
    return cell;
  }

  function drawRuns(body, runs, classifications, caps) {
    clear(body);
    if (!runs.length) {
      body.appendChild(el('tr', {}, [el('td', {colspan: '9', 'class': 'muted', text: 'No runs.'})]));
      return;
    }
    runs.forEach(function (run, n) {
      var verdict = verdictOf(classifications, run.run_id) || run.verdict || null;  // stored, or pushed since
      var link = el('a', {href: '#/run/' + encodeURIComponent(run.run_id), 'class': 'run-link',
        text: run.run_id.slice(0, 12)});
      var marks = el('span', {'class': 'marks'});
      if (isLive(run)) { marks.appendChild(el('span', {'class': 'badge live', text: 'live'})); }
      if (run.halted) { marks.appendChild(el('span', {'class': 'badge halted', text: 'halted'})); }
      if (run.run_kind && run.run_kind !== 'record') { marks.appendChild(el('span', {'class': 'badge', text: run.run_kind})); }
      var row = el('tr', {'data-run': run.run_id, 'class': isLive(run) ? 'live' : null}, [
        el('td', {text: when(run.start_ns)}),
        el('td', {}, [link, marks]),
        el('td', {text: run.agent_id || run.service_name || ''}),
        el('td', {'class': 'outcome ' + (run.status_code === 'Error' ? 'bad' : ''), text: M.outcome(run)}),
        el('td', {'class': 'chain ' + (run.chain ? run.chain.status : ''), text: run.chain ? run.chain.status : ''}),
        el('td', {'class': 'verdict' + (verdict && verdict.verdict === 'failed' ? ' bad' : ''),
          text: verdict ? verdict.verdict + (verdict.modes.length ? ' ' + verdict.modes.join(', ') : '') :
            (run.classification || '')}),
        spend(run.cost_usd, caps[n]),
        el('td', {'class': 'num', text: duration(run.start_ns, run.end_ns)}),
        el('td', {'class': 'num', text: String(run.span_count)})
      ]);
      body.appendChild(row);
    });
  }

  function drawPager(pager, params, next) {
    clear(pager);
    var back = params.get('back') ? params.get('back').split(',') : [];
    if (params.get('after')) {
      var previous = back.slice(0, -1);
      pager.appendChild(el('a', {id: 'newer', href: runsHash({agent: params.get('agent'), status: params.get('status'),
        since: params.get('since'), until: params.get('until'), limit: params.get('limit'),
        after: back.length ? back[back.length - 1] : '', back: previous.join(',')}), text: '← Newer'}));
    }
    if (next) {
      var trail = back.concat([params.get('after') || '']);
      pager.appendChild(el('a', {id: 'older', href: runsHash({agent: params.get('agent'), status: params.get('status'),
        since: params.get('since'), until: params.get('until'), limit: params.get('limit'),
        after: next, back: trail.join(',')}), text: 'Older →'}));
    }
  }

  // --- Agents ----------------------------------------------------------------------------------
  function agentsPage(main, gen) {
    clear(main);
    main.appendChild(el('h1', {text: 'Agents'}));
    var table = el('table', {id: 'agents', 'class': 'agents'});
    main.appendChild(table);
    function load() {
      Promise.all([api('/v1/trust'), api('/v1/halts').catch(function () { return {halts: []}; }),
        api('/v1/alerts?limit=' + VIOLATIONS).catch(function () { return {alerts: []}; })]).then(function (got) {
        if (!current(gen)) { return; }
        hideLogin();
        drawAgents(table, got[0].agents || [], got[1].halts || [], (got[2].alerts || []).filter(function (a) {
          return a.kind === 'scope_violation';
        }));
        document.body.setAttribute('data-state', 'ready');
      }).catch(function (err) { if (current(gen)) { fail(main, err); } });
    }
    load();
  }

  function drawAgents(table, agents, halts, violations) {
    clear(table);
    table.appendChild(el('thead', {}, [el('tr', {}, ['Agent', 'Trust', 'Tier', 'Spend ×', 'Runs', 'Failure rate',
      'Regressions passed', 'Scope violations', 'Latest violation', 'Halted', ''].map(function (h) {
      return el('th', {scope: 'col', text: h});
    }))]));
    var body = el('tbody');
    if (!agents.length) {
      body.appendChild(el('tr', {}, [el('td', {colspan: '11', 'class': 'muted', text: 'No agents.'})]));
    }
    agents.forEach(function (a) {
      var halt = halts.filter(function (h) { return h.scope === 'agent' && h.target === a.agent_id; })[0];
      var action = el('td');
      if (tokenAgent() === null) {
        var button = el('button', {type: 'button', 'class': halt ? 'resume-agent' : 'kill-agent danger',
          text: halt ? 'Resume agent' : 'Kill agent'});
        button.addEventListener('click', function () {
          if (halt) {
            ask('Resume agent ' + a.agent_id + '?', 'Its runs may continue. Needs the admin token.', 'Resume', false,
              function () { return api('/v1/resume', {method: 'POST', body: {scope: 'agent', target: a.agent_id}}); });
          } else {
            ask('Kill agent ' + a.agent_id + '?', 'Every run of the agent is halted, and new ones refused, until it is ' +
              'resumed. Needs the admin token.', 'Kill', true, function (reason) {
              return api('/v1/halts', {method: 'POST', body: {scope: 'agent', target: a.agent_id, reason: reason}});
            });
          }
        });
        action.appendChild(button);
      }
      body.appendChild(el('tr', {'data-agent': a.agent_id}, [
        el('td', {}, [el('a', {href: runsHash({agent: a.agent_id}), text: a.agent_id})]),
        el('td', {'class': 'num', text: Number(a.score).toFixed(2)}),
        el('td', {text: a.tier}),
        el('td', {'class': 'num', text: Number(a.spend_multiplier).toFixed(2)}),
        el('td', {'class': 'num', text: String(a.runs)}),
        el('td', {'class': 'num', text: (100 * Number(a.failure_rate)).toFixed(0) + '%'}),
        el('td', {'class': 'num', text: a.regressions ? (100 * Number(a.regression_pass_rate)).toFixed(0) + '% of ' +
          a.regressions : ''}),
        el('td', {'class': 'num', text: String(a.scope_violations)}),
        latestViolation(violations, a.agent_id),
        el('td', {'class': 'halt', text: halt ? halt.actor + ': ' + halt.reason : ''}),
        action
      ]));
    });
    table.appendChild(body);
  }

  function latestViolation(violations, agentId) {  // the alerts are newest first
    var found = violations.filter(function (v) { return v.agent_id === agentId; })[0];
    if (!found) { return el('td', {'class': 'violation'}); }
    return el('td', {'class': 'violation'}, [
      found.run_id ? el('a', {href: '#/run/' + encodeURIComponent(found.run_id), text: found.run_id.slice(0, 12)}) : null,
      ' ' + (found.time || '') + ': ' + (found.message || '')]);
  }

  // --- Models: how often each model fixed each task's failure (agentreplay models) ---------------
  function modelsPage(main, gen) {
    clear(main);
    main.appendChild(el('h1', {text: 'Models'}));
    main.appendChild(el('p', {'class': 'muted', text: 'Each model tried at a failed run\'s culprit step ' +
      '(agentreplay models RUN --model ...): the run forked there onto it, tools sandboxed, and judged again.'}));
    var table = el('table', {id: 'models', 'class': 'models'});
    main.appendChild(table);
    api('/v1/model-accuracy').then(function (doc) {
      if (!current(gen)) { return; }
      hideLogin();
      table.appendChild(el('thead', {}, [el('tr', {}, ['Task', 'Agent', 'Model', 'Trials', 'Fixed', 'Repeated',
        'Failed otherwise', 'Errored', 'Accuracy'].map(function (h) { return el('th', {scope: 'col', text: h}); }))]));
      var body = el('tbody');
      var rows = doc.accuracy || [];
      if (!rows.length) {
        body.appendChild(el('tr', {}, [el('td', {colspan: '9', 'class': 'muted', text: 'No trials stored.'})]));
      }
      rows.forEach(function (a) {
        body.appendChild(el('tr', {'data-task': a.task, 'data-model': a.model}, [
          el('td', {text: a.task_text || a.task}), el('td', {text: a.agent_id}),
          el('td', {text: (a.provider ? a.provider + ':' : '') + a.model}),
          el('td', {'class': 'num', text: String(a.trials)}), el('td', {'class': 'num', text: String(a.fixed)}),
          el('td', {'class': 'num', text: String(a.repeated)}),
          el('td', {'class': 'num', text: String(a.failed_otherwise)}),
          el('td', {'class': 'num', text: String(a.errored)}),
          el('td', {'class': 'num accuracy', text: a.accuracy === null || a.accuracy === undefined ? '' :
            (100 * Number(a.accuracy)).toFixed(0) + '%'})
        ]));
      });
      table.appendChild(body);
      document.body.setAttribute('data-state', 'ready');
    }).catch(function (err) { if (current(gen)) { fail(main, err); } });
  }

  C.modelsPage = modelsPage;
  C.runsPage = runsPage;
  C.runsHash = runsHash;
  C.agentsPage = agentsPage;
}());
