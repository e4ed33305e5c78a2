/* AgentReplay console: the router and the start (the other scripts are loaded first). */
(function () {
  'use strict';
  var C = window.AgentReplayConsole;
  var token = C.token, setToken = C.setToken, showTokenState = C.showTokenState, stopPolling = C.stopPolling,
      showLogin = C.showLogin, hideLogin = C.hideLogin, nextPage = C.nextPage;

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
    var gen = nextPage();
    stopPolling();
    C.stopLive();
    var where = parseHash();
    var main = document.getElementById('main');
    document.body.setAttribute('data-state', 'loading');
    if (where.parts[0] === 'diff' && where.parts[1] && where.parts[2]) {
      document.body.setAttribute('data-view', 'diff');
      C.diffPage(main, where.parts[1], where.parts[2], gen);
    } else if (where.parts[0] === 'models') {
      document.body.setAttribute('data-view', 'models');
      C.modelsPage(main, gen);
    } else if (where.parts[0] === 'agents') {
      document.body.setAttribute('data-view', 'agents');
      C.agentsPage(main, gen);
    } else if (where.parts[0] === 'run' && where.parts[1]) {
      document.body.setAttribute('data-view', 'run');
      C.runPage(main, where.parts[1], gen);
    } else {
      document.body.setAttribute('data-view', 'runs');
      C.runsPage(main, where.params, gen);
    }
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

  C.route = route;
  start();
}());
