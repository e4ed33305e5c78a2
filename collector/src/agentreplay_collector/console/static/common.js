/* AgentReplay console: what every page shares. The console reads only through the read and control
 * APIs of its own origin (/v1/...).
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
      agent !== null ? 'agent token (' + agent + '): refused, the console takes the admin token' :
      'token set (this tab)';
  }

  function tokenAgent() {
    // An agent's identity token is a JWT naming its agent (sub); the admin token is not. Only to say that
    // the console refuses it: the collector checks every token itself.
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

  function usd(value) { return window.AgentReplayMoney.money(value, 'USD'); }

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

  function multipliers(agent) {  // agent id -> its trust's spend multiplier (the caps are the manifest's times it)
    return api('/v1/trust' + (agent ? '?agent=' + encodeURIComponent(agent) : '')).then(function (doc) {
      var found = {};
      (doc.agents || []).forEach(function (a) { found[a.agent_id] = Number(a.spend_multiplier); });
      return found;
    }).catch(function () { return {}; });
  }

  function runCap(manifest, multiplier) {  // the run's caps, each in its currency (money.js), null if none
    var caps = window.AgentReplayMoney.runCaps(manifest, multiplier);
    return caps.length ? caps : null;
  }

  function isLive(run) { return run.chain && run.chain.status === 'pending'; }

  function schedule(fn) {
    stopPolling();
    timer = window.setTimeout(fn, POLL_MS);
  }

  function stopPolling() {
    if (timer !== null) { window.clearTimeout(timer); timer = null; }
  }

  // --- the live feed: /v1/live, Server-Sent Events read with fetch (EventSource cannot send the token) ---
  var feed = null;

  function parseEvents(text, onEvent) {  // complete events out of `text`; what is left (a partial event)
    var at;
    while ((at = text.indexOf('\n\n')) >= 0) {
      var block = text.slice(0, at);
      text = text.slice(at + 2);
      var kind = 'message';
      var data = [];
      block.split('\n').forEach(function (line) {
        if (line.indexOf('event:') === 0) { kind = line.slice(6).trim(); }
        else if (line.indexOf('data:') === 0) { data.push(line.slice(5).replace(/^ /, '')); }
      });
      if (!data.length) { continue; }
      var doc = null;
      try { doc = JSON.parse(data.join('\n')); } catch (e) { doc = null; }
      if (doc !== null && typeof doc === 'object') { onEvent(kind, doc); }
    }
    return text;
  }

  function live(onEvent, run) {  // run: follow one run's events only (a run's page)
    // Follow the collector's live feed until the page changes: a snapshot first, then each event. A feed
    // that closes (the collector restarted, this tab fell behind and was dropped) is opened again, and its
    // new snapshot brings the page up to date.
    stopLive();
    var state = {stopped: false, controller: null, retry: null};
    feed = state;
    function connect() {
      if (state.stopped) { return; }
      state.controller = new window.AbortController();
      var headers = {'Accept': 'text/event-stream'};
      if (token()) { headers.Authorization = 'Bearer ' + token(); }
      window.fetch('/v1/live' + (run ? '?run=' + encodeURIComponent(run) : ''), {headers: headers, credentials: 'omit', cache: 'no-store',
        signal: state.controller.signal}).then(function (answer) {
        if (!answer.ok || !answer.body) { throw new ApiError(answer.status, 'the live feed answered ' + answer.status); }
        document.body.setAttribute('data-live', 'open');
        var reader = answer.body.getReader();
        var decoder = new window.TextDecoder();
        var buffer = '';
        function pump() {
          return reader.read().then(function (part) {
            if (part.done) { throw new Error('the live feed closed'); }
            buffer = parseEvents(buffer + decoder.decode(part.value, {stream: true}), function (kind, doc) {
              if (!state.stopped) { onEvent(kind, doc); }
            });
            return pump();
          });
        }
        return pump();
      }).catch(function (err) {
        if (state.stopped) { return; }
        document.body.setAttribute('data-live', 'closed');
        if (err instanceof ApiError && (err.status === 401 || err.status === 403)) { return; }
        state.retry = window.setTimeout(connect, 1000);
      });
    }
    connect();
  }

  function stopLive() {
    if (feed === null) { return; }
    feed.stopped = true;
    if (feed.retry !== null) { window.clearTimeout(feed.retry); }
    if (feed.controller !== null) { feed.controller.abort(); }
    feed = null;
    document.body.removeAttribute('data-live');
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

  // --- a confirmation, and small blocks the pages share -----------------------------------------
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
        window.AgentReplayConsole.route();
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

  // --- which page is current: a late answer of a page left since draws nothing ------------------
  var generation = 0;
  function nextPage() { generation += 1; return generation; }
  function current(gen) { return gen === generation; }

  window.AgentReplayConsole = {
    el: el,
    clear: clear,
    token: token,
    setToken: setToken,
    showTokenState: showTokenState,
    tokenAgent: tokenAgent,
    ApiError: ApiError,
    api: api,
    ns: ns,
    duration: duration,
    when: when,
    usd: usd,
    parsed: parsed,
    pretty: pretty,
    quote: quote,
    manifestOf: manifestOf,
    multipliers: multipliers,
    runCap: runCap,
    isLive: isLive,
    schedule: schedule,
    stopPolling: stopPolling,
    live: live,
    stopLive: stopLive,
    parseEvents: parseEvents,
    fail: fail,
    showLogin: showLogin,
    hideLogin: hideLogin,
    ask: ask,
    section: section,
    kv: kv,
    nextPage: nextPage,
    current: current,
    PAGE_SIZE: PAGE_SIZE,
    POLL_MS: POLL_MS,
    ALERTS: ALERTS
  };
}());
