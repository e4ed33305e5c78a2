/* AgentReplay console. Reads only through the read and control APIs of its own origin (/v1/...).
 *
 * Every recorded value (a prompt, a tool's arguments or result, a reason) is hostile: it is put in
 * the page with textContent or as an attribute's value through setAttribute, never parsed as markup.
 * The token the user pastes is kept in this tab's sessionStorage and sent as the Authorization
 * header; no cookie is ever set.
 */
(function () {
  'use strict';

  var TOKEN_KEY = 'agentreplay.console.token';
  var PAGE_SIZE = 50;
  var POLL_MS = 1000;
  var ALERTS = 10;  // the newest alerts shown above the runs
  var timer = null;
  var generation = 0; // bumped on each route, so that a late answer of a left page draws nothing

  // --- small helpers ---------------------------------------------------------------------------
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) {
      var value = attrs[name];
      if (value === null || value === undefined || value === false) { return; }
      if (name === 'text') { node.textContent = String(value); }
      else if (name === 'class') { node.className = String(value); }
      else { node.setAttribute(name, value === true ? '' : String(value)); }
    });
    (children || []).forEach(function (child) {
      if (child === null || child === undefined) { return; }
      node.appendChild(typeof child === 'string' ? document.createTextNode(child) : child);
    });
    return node;
  }

  function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } }

  function token() { return window.sessionStorage.getItem(TOKEN_KEY) || ''; }

  function setToken(value) {
    if (value) { window.sessionStorage.setItem(TOKEN_KEY, value); }
    else { window.sessionStorage.removeItem(TOKEN_KEY); }
    showTokenState();
  }

  function showTokenState() {
    var agent = tokenAgent();
    document.getElementById('token-state').textContent = !token() ? 'no token' :
      agent !== null ? 'agent token: ' + agent : 'token set (this tab)';
  }

  function tokenAgent() {
    // An agent's identity token is a JWT naming its agent (sub); the admin token is not. Only to decide
    // which buttons to show: the collector checks every token itself.
    var parts = token().split('.');
    if (parts.length !== 3) { return null; }
    try {
      var claims = JSON.parse(window.atob(parts[1].replace(/-/g, '+').replace(/_/g, '/')));
      return typeof claims.sub === 'string' ? claims.sub : null;
    } catch (e) { return null; }
  }

  function ApiError(status, message) { this.status = status; this.message = message; }

  function api(path, options) {
    var opts = options || {};
    var headers = {'Accept': 'application/json'};
    if (token()) { headers.Authorization = 'Bearer ' + token(); }
    if (opts.body !== undefined) { headers['Content-Type'] = 'application/json'; }
    return window.fetch(path, {
      method: opts.method || 'GET', headers: headers, credentials: 'omit', cache: 'no-store',
      body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined
    }).then(function (answer) {
      return answer.text().then(function (text) {
        var doc = null;
        try { doc = text ? JSON.parse(text) : null; } catch (e) { doc = null; }
        if (!answer.ok) {
          throw new ApiError(answer.status, (doc && doc.error) || (answer.status + ' ' + answer.statusText));
        }
        return doc;
      });
    });
  }

  function ns(value) { return Number(value || 0); }

  function duration(startNs, endNs) {
    var ms = Math.max(0, (ns(endNs) - ns(startNs)) / 1e6);
    if (ms < 1) { return ms.toFixed(3) + ' ms'; }
    if (ms < 1000) { return ms.toFixed(1) + ' ms'; }
    return (ms / 1000).toFixed(2) + ' s';
  }

  function when(startNs) {
    var d = new Date(ns(startNs) / 1e6);
    return isNaN(d.getTime()) ? '' : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  }

  function usd(value) {
    var n = Number(value || 0);
    return '$' + (n >= 0.01 || n === 0 ? n.toFixed(2) : n.toPrecision(2));
  }

  function parsed(text) {
    if (typeof text !== 'string') { return text; }
    try { return JSON.parse(text); } catch (e) { return text; }
  }

  function pretty(value) {
    var v = parsed(value);
    return typeof v === 'string' ? v : JSON.stringify(v, null, 2);
  }

  function quote(arg) {  // POSIX shell quoting, as shlex.quote
    return /^[A-Za-z0-9_@%+=:,.\/-]+$/.test(arg) ? arg : "'" + arg.replace(/'/g, "'\"'\"'") + "'";
  }

  var manifests = {};  // sha256 -> a promise of the registered manifest's body (null if not registered)

  function manifestOf(sha) {
    if (!sha) { return Promise.resolve(null); }
    if (!manifests[sha]) {
      manifests[sha] = api('/v1/manifests/' + encodeURIComponent(sha)).then(function (doc) {
        var signed = parsed(doc.signed);
        return signed && typeof signed.manifest === 'object' ? signed.manifest : null;
      }).catch(function () { delete manifests[sha]; return null; });
    }
    return manifests[sha];
  }

  function multipliers() {  // agent id -> its trust's spend multiplier (the caps are the manifest's times it)
    return api('/v1/trust').then(function (doc) {
      var found = {};
      (doc.agents || []).forEach(function (a) { found[a.agent_id] = Number(a.spend_multiplier); });
      return found;
    }).catch(function () { return {}; });
  }

  function runCap(manifest, multiplier) {
    var cap = manifest && manifest.spend ? Number(manifest.spend.per_run_usd) : NaN;
    if (!isFinite(cap) || cap <= 0) { return null; }
    return cap * (isFinite(multiplier) ? multiplier : 1);
  }

  function isLive(run) { return run.chain && run.chain.status === 'pending'; }

  function schedule(fn) {
    stopPolling();
    timer = window.setTimeout(fn, POLL_MS);
  }

  function stopPolling() {
    if (timer !== null) { window.clearTimeout(timer); timer = null; }
  }

  function fail(main, err) {
    if (err instanceof ApiError && err.status === 401) {
      showLogin(err.message);
      return;
    }
    clear(main);
    main.appendChild(el('p', {'class': 'error', role: 'alert', id: 'load-error', text: err.message || String(err)}));
    document.body.setAttribute('data-state', 'error');
  }

  // --- token: the login form, always reachable from the header --------------------------------
  function showLogin(message) {
    document.getElementById('login').hidden = false;
    document.getElementById('login-error').textContent = message || '';
    document.body.setAttribute('data-state', 'login');
    document.getElementById('login-token').focus();
  }

  function hideLogin() { document.getElementById('login').hidden = true; }

  // --- routes ----------------------------------------------------------------------------------
  function parseHash() {
    var hash = window.location.hash.replace(/^#\/?/, '');
    var q = hash.indexOf('?');
    var path = q >= 0 ? hash.slice(0, q) : hash;
    var params = new URLSearchParams(q >= 0 ? hash.slice(q + 1) : '');
    var parts = path.split('/').filter(function (p) { return p; });
    return {parts: parts, params: params};
  }

  function route() {
    generation += 1;
    stopPolling();
    var where = parseHash();
    var main = document.getElementById('main');
    document.body.setAttribute('data-state', 'loading');
    if (where.parts[0] === 'agents') {
      document.body.setAttribute('data-view', 'agents');
      agentsPage(main, generation);
    } else if (where.parts[0] === 'run' && where.parts[1]) {
      document.body.setAttribute('data-view', 'run');
      runPage(main, where.parts[1], generation);
    } else {
      document.body.setAttribute('data-view', 'runs');
      runsPage(main, where.params, generation);
    }
  }

  // --- Runs ------------------------------------------------------------------------------------
  function runsQuery(params) {
    var q = new URLSearchParams();
    q.set('limit', String(PAGE_SIZE));
    ['agent', 'status', 'after'].forEach(function (name) {
      if (params.get(name)) { q.set(name, params.get(name)); }
    });
    return q;
  }

  function runsHash(params) {
    var q = new URLSearchParams();
    ['agent', 'status', 'after', 'back'].forEach(function (name) {
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
      ['broken', 'chain broken'], ['incomplete', 'incomplete'], ['Ok', 'outcome Ok'], ['Error', 'outcome Error']]
      .forEach(function (pair) {
        status.appendChild(el('option', {value: pair[0], selected: (params.get('status') || '') === pair[0],
          text: pair[1]}));
      });
    var form = el('form', {id: 'filters', 'class': 'filters'}, [
      el('label', {'for': 'filter-agent', text: 'Agent'}), agent,
      el('label', {'for': 'filter-status', text: 'State'}), status,
      el('button', {type: 'submit', text: 'Filter'})
    ]);
    form.addEventListener('submit', function (e) {
      e.preventDefault();
      window.location.hash = runsHash({agent: agent.value.trim(), status: status.value});
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
    function load() {
      api('/v1/runs?' + runsQuery(params).toString()).then(function (page) {
        if (gen !== generation) { return null; }
        if (spendMultipliers === null) { spendMultipliers = multipliers(); }
        var ids = page.runs.map(function (r) { return r.run_id; });
        var verdicts = ids.length ? api('/v1/classifications?' + ids.map(function (i) {
          return 'run=' + encodeURIComponent(i);
        }).join('&')).catch(function () { return {classifications: []}; }) : Promise.resolve({classifications: []});
        var fired = api('/v1/alerts?limit=' + ALERTS).catch(function () { return {alerts: []}; });
        var shas = page.runs.map(function (r) { return r.manifest_sha256; });
        var caps = Promise.all([spendMultipliers, Promise.all(shas.map(manifestOf))]).then(function (both) {
          return page.runs.map(function (r, n) { return runCap(both[1][n], both[0][r.agent_id]); });
        });
        return Promise.all([verdicts, fired, caps]).then(function (got) {
          var found = got[0];
          if (gen !== generation) { return; }
          hideLogin();
          drawAlerts(alerts, got[1].alerts || []);
          drawRuns(body, page.runs, found.classifications || [], got[2]);
          drawPager(pager, params, page.next);
          var live = page.runs.filter(isLive).length;
          document.getElementById('live-note').textContent = live ? live + ' live' : '';
          document.body.setAttribute('data-state', 'ready');
          if (!params.get('after')) { schedule(load); }  // the newest page follows what arrives
        });
      }).catch(function (err) { if (gen === generation) { fail(main, err); } });
    }
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

  function spend(cost, cap) {
    var cell = el('td', {'class': 'num spend'}, [usd(cost)]);
    if (cap !== null && cap !== undefined) {
      var share = Number(cost || 0) / cap;
      cell.appendChild(el('span', {'class': 'cap' + (share >= 0.8 ? ' near' : ''), 'data-cap': String(cap),
        title: 'the per-run cap: the manifest\'s, times the agent\'s trust multiplier', text: ' of ' + usd(cap)}));
    }
    return cell;
  }

  function drawRuns(body, runs, classifications, caps) {
    clear(body);
    if (!runs.length) {
      body.appendChild(el('tr', {}, [el('td', {colspan: '9', 'class': 'muted', text: 'No runs.'})]));
      return;
    }
    runs.forEach(function (run, n) {
      var verdict = verdictOf(classifications, run.run_id);
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
        el('td', {'class': 'outcome ' + (run.status_code === 'Error' ? 'bad' : ''), text: run.status_code || ''}),
        el('td', {'class': 'chain ' + (run.chain ? run.chain.status : ''), text: run.chain ? run.chain.status : ''}),
        el('td', {'class': 'verdict' + (verdict && verdict.verdict === 'failed' ? ' bad' : ''),
          text: verdict ? verdict.verdict + (verdict.modes.length ? ' ' + verdict.modes.join(', ') : '') : ''}),
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
        after: back.length ? back[back.length - 1] : '', back: previous.join(',')}), text: '← Newer'}));
    }
    if (next) {
      var trail = back.concat([params.get('after') || '']);
      pager.appendChild(el('a', {id: 'older', href: runsHash({agent: params.get('agent'), status: params.get('status'),
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
      Promise.all([api('/v1/trust'), api('/v1/halts').catch(function () { return {halts: []}; })]).then(function (got) {
        if (gen !== generation) { return; }
        hideLogin();
        drawAgents(table, got[0].agents || [], got[1].halts || []);
        document.body.setAttribute('data-state', 'ready');
      }).catch(function (err) { if (gen === generation) { fail(main, err); } });
    }
    load();
  }

  function drawAgents(table, agents, halts) {
    clear(table);
    table.appendChild(el('thead', {}, [el('tr', {}, ['Agent', 'Trust', 'Tier', 'Spend ×', 'Runs', 'Failure rate',
      'Regressions passed', 'Scope violations', 'Halted', ''].map(function (h) { return el('th', {scope: 'col', text: h}); }))]));
    var body = el('tbody');
    if (!agents.length) {
      body.appendChild(el('tr', {}, [el('td', {colspan: '10', 'class': 'muted', text: 'No agents.'})]));
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
        el('td', {'class': 'halt', text: halt ? halt.actor + ': ' + halt.reason : ''}),
        action
      ]));
    });
    table.appendChild(body);
  }

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

  function runPage(main, runId, gen) {
    var id = encodeURIComponent(runId);
    function load(first) {
      Promise.all([
        api('/v1/runs/' + id),
        api('/v1/runs/' + id + '/spans'),
        api('/v1/runs/' + id + '/classifications').catch(function () { return {classifications: []}; }),
        api('/v1/decisions?run=' + id).catch(function () { return {decisions: []}; }),
        api('/v1/halts').catch(function () { return {halts: []}; })
      ]).then(function (got) {
        return Promise.all([manifestOf(got[0].manifest_sha256), multipliers()]).then(function (more) {
          return got.concat(more);
        });
      }).then(function (got) {
        if (gen !== generation) { return; }
        hideLogin();
        var focused = document.activeElement && document.activeElement.id;
        drawRun(main, got[0], got[1].spans || [], got[2].classifications || [], got[3].decisions || [],
          got[4].halts || [], got[5], got[6][got[0].agent_id]);
        if (focused && document.getElementById(focused)) { document.getElementById(focused).focus(); }
        document.body.setAttribute('data-state', 'ready');
        if (first) { showCulprit(main); }
        if (isLive(got[0])) { schedule(function () { load(false); }); }
      }).catch(function (err) { if (gen === generation) { fail(main, err); } });
    }
    clear(main);
    main.appendChild(el('p', {'class': 'muted', text: 'Loading run ' + runId + '…'}));
    load(true);
  }

  function showCulprit(main) {
    var culprit = main.querySelector('section.step.culprit');
    if (culprit) { culprit.scrollIntoView({block: 'center'}); }
  }

  function section(title, id, children) {
    return el('section', {id: id, 'class': 'panel'}, [el('h2', {text: title})].concat(children));
  }

  function kv(pairs) {
    var dl = el('dl', {'class': 'kv'});
    pairs.forEach(function (pair) {
      if (pair[1] === null || pair[1] === undefined || pair[1] === '') { return; }
      dl.appendChild(el('dt', {text: pair[0]}));
      dl.appendChild(el('dd', {'data-key': pair[2] || null}, [pair[1]]));
    });
    return dl;
  }

  function drawRun(main, run, spans, classifications, decisions, halts, manifest, multiplier) {
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
    main.appendChild(section('Summary', 'summary', [kv([
      ['Agent', run.agent_id || run.service_name],
      ['Name', run.name],
      ['Kind', run.run_kind + (run.replay_of ? ' of ' + run.replay_of : '')],
      ['Started', when(run.start_ns)],
      ['Duration', duration(run.start_ns, run.end_ns)],
      ['Spans', String(run.span_count)],
      ['Cost', usd(run.cost_usd)],
      ['Spend cap', capText(run.cost_usd, manifest, multiplier), 'cap'],
      ['Outcome', run.status_code],
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

    // the verdict
    main.appendChild(drawVerdict(classifications, verdictDoc, culpritStep));

    // commands to copy
    main.appendChild(drawCommands(runId, spans, verdictDoc, culpritStep));

    // the timeline, then each step
    var ordered = spans.slice().sort(function (a, b) { return ns(a.start_ns) - ns(b.start_ns); });
    main.appendChild(drawWaterfall(run, ordered, culpritStep));
    main.appendChild(drawSteps(ordered, decisions, culpritStep));
    main.appendChild(drawDecisions(decisions, spans));
  }

  function capText(cost, manifest, multiplier) {
    var cap = runCap(manifest, multiplier);
    if (cap === null) { return manifest ? 'none per run' : ''; }
    var base = Number(manifest.spend.per_run_usd);
    var m = isFinite(multiplier) ? multiplier : 1;
    return usd(cost) + ' of ' + usd(cap) + ' per run (' + (100 * Number(cost || 0) / cap).toFixed(0) + '%): ' +
      'the manifest\'s ' + usd(base) + ' × trust multiplier ' + m.toFixed(2);
  }

  function controls(run, halt) {
    var box = el('div', {'class': 'controls'});
    if (tokenAgent() !== null) {
      box.appendChild(el('span', {'class': 'muted', id: 'control-note',
        text: 'Kill and Resume take the admin token; this tab holds an agent\'s token.'}));
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

  function ask(title, text, okText, needReason, act) {
    var dialog = document.getElementById('confirm');
    var reason = document.getElementById('confirm-reason');
    var error = document.getElementById('confirm-error');
    document.getElementById('confirm-title').textContent = title;
    document.getElementById('confirm-text').textContent = text;
    document.getElementById('confirm-ok').textContent = okText;
    reason.value = '';
    reason.required = needReason;
    error.textContent = '';
    dialog.onsubmitHandler = function () {
      if (needReason && !reason.value.trim()) { error.textContent = 'Give a reason: it is recorded.'; return; }
      act(reason.value.trim()).then(function () {
        dialog.close();
        route();
      }).catch(function (err) {
        error.textContent = err.message || String(err);
        if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
          error.textContent += ' (set the admin token with the Token button)';
        }
      });
    };
    dialog.showModal();
    reason.focus();
  }

  function drawVerdict(classifications, verdictDoc, culpritStep) {
    var children = [];
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
        doc.root_cause ? el('p', {text: 'Root cause: ' + doc.root_cause}) : null
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
        (attr(s, 'agentreplay.cost.usd') ? ' · ' + usd(attr(s, 'agentreplay.cost.usd')) : '') +
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

  // --- start -----------------------------------------------------------------------------------
  function start() {
    showTokenState();
    document.getElementById('token-button').addEventListener('click', function () { showLogin(''); });
    document.getElementById('login-form').addEventListener('submit', function (e) {
      e.preventDefault();
      setToken(document.getElementById('login-token').value.trim());
      document.getElementById('login-token').value = '';
      hideLogin();
      route();
    });
    document.getElementById('login-forget').addEventListener('click', function () {
      setToken('');
      hideLogin();
      route();
    });
    var dialog = document.getElementById('confirm');
    document.getElementById('confirm-form').addEventListener('submit', function (e) {
      e.preventDefault();
      if (dialog.onsubmitHandler) { dialog.onsubmitHandler(); }
    });
    document.getElementById('confirm-cancel').addEventListener('click', function () { dialog.close(); });
    window.addEventListener('hashchange', function () {
      if (/^#step-/.test(window.location.hash)) { return; }
      route();
    });
    route();
  }

  start();
}());
