/* AgentReplay console: two runs side by side, step by step (#/diff/A/B).
 *
 * Steps are paired by their number. A step's decision is what it did: a tool call's name and arguments,
 * an LLM call's answer (its text and the tools it called, call ids aside). The parting step is the first
 * whose decision differs; an LLM call whose request differs (a changed prompt, a fork's added message)
 * is marked where the request changed, with the first message that differs on each side.
 */
(function () {
  'use strict';
  var C = window.AgentReplayConsole;
  var el = C.el, clear = C.clear, api = C.api, parsed = C.parsed, pretty = C.pretty, fail = C.fail,
      hideLogin = C.hideLogin, section = C.section, current = C.current;

  function attr(span, name) { return span.attributes ? span.attributes[name] : undefined; }

  function steps(spans) {
    var found = {};
    spans.forEach(function (s) {
      var step = attr(s, 'agentreplay.step');
      if (step !== undefined && step !== '') { found[Number(step)] = s; }
    });
    return found;
  }

  function isTool(span) {
    return attr(span, 'gen_ai.operation.name') === 'execute_tool' || attr(span, 'gen_ai.tool.name') !== undefined;
  }

  function messages(raw) {  // [{role, parts: [{type, name, arguments, content, response}]}], call ids left out
    var list = parsed(raw);
    if (!Array.isArray(list)) { return raw === undefined ? [] : [{role: '?', parts: [{content: String(raw)}]}]; }
    return list.map(function (m) {
      var parts = Array.isArray(m && m.parts) ? m.parts : [{type: 'text', content: m && m.content}];
      return {role: m && m.role, parts: parts.map(function (p) {
        return {type: p && p.type, name: p && p.name, arguments: parsed(p && p.arguments),
          content: p && p.content, response: p && (p.response !== undefined ? p.response : p.result)};
      })};
    });
  }

  function decision(span) {
    if (!span) { return null; }
    if (isTool(span)) {
      return JSON.stringify([span.name, parsed(attr(span, 'gen_ai.tool.call.arguments'))]);
    }
    return JSON.stringify([span.name, messages(attr(span, 'gen_ai.output.messages'))]);
  }

  function firstChange(a, b) {  // the index of the first input message that differs, or -1
    var left = messages(attr(a, 'gen_ai.input.messages'));
    var right = messages(attr(b, 'gen_ai.input.messages'));
    for (var n = 0; n < Math.max(left.length, right.length); n++) {
      if (JSON.stringify(left[n]) !== JSON.stringify(right[n])) { return n; }
    }
    return -1;
  }

  function summary(span) {
    if (!span) { return [el('span', {'class': 'muted', text: 'no such step'})]; }
    var out = [el('strong', {text: span.name})];
    if (isTool(span)) {
      out.push(el('pre', {'class': 'arguments', text: pretty(attr(span, 'gen_ai.tool.call.arguments'))}));
    } else {
      messages(attr(span, 'gen_ai.output.messages')).forEach(function (m) {
        m.parts.forEach(function (p) {
          if (p.type === 'tool_call') {
            out.push(el('pre', {'class': 'call', text: 'calls ' + p.name + ' ' + JSON.stringify(p.arguments)}));
          } else if (p.content !== undefined && p.content !== null) {
            out.push(el('pre', {'class': 'text', text: typeof p.content === 'string' ? p.content : pretty(p.content)}));
          }
        });
      });
    }
    return out;
  }

  function messageText(message) {
    if (!message) { return '(no message)'; }
    return (message.role || '?') + ': ' + message.parts.map(function (p) {
      return typeof p.content === 'string' ? p.content : JSON.stringify(p.content !== undefined ? p.content : p);
    }).join(' ');
  }

  function diffPage(main, left, right, gen) {
    clear(main);
    main.appendChild(el('p', {'class': 'muted', text: 'Loading the two runs…'}));
    Promise.all([api('/v1/runs/' + encodeURIComponent(left) + '/spans'),
      api('/v1/runs/' + encodeURIComponent(right) + '/spans')]).then(function (got) {
      if (!current(gen)) { return; }
      hideLogin();
      drawDiff(main, left, right, steps(got[0].spans || []), steps(got[1].spans || []));
      document.body.setAttribute('data-state', 'ready');
    }).catch(function (err) { if (current(gen)) { fail(main, err); } });
  }

  function drawDiff(main, left, right, a, b) {
    clear(main);
    main.appendChild(el('h1', {text: 'Two runs, step by step'}));
    var numbers = Object.keys(a).concat(Object.keys(b)).map(Number)
      .filter(function (n, i, all) { return all.indexOf(n) === i; }).sort(function (x, y) { return x - y; });
    var parting = null;
    numbers.forEach(function (n) {
      if (parting === null && decision(a[n]) !== decision(b[n])) { parting = n; }
    });
    document.body.setAttribute('data-parting', parting === null ? '' : String(parting));
    main.appendChild(el('p', {id: 'parting', text: parting === null ?
      'The runs take the same steps.' : 'They part at step ' + parting + '.'}));
    var head = el('tr', {}, [el('th', {scope: 'col', text: 'Step'}),
      el('th', {scope: 'col'}, [el('a', {href: '#/run/' + encodeURIComponent(left), text: left.slice(0, 12)})]),
      el('th', {scope: 'col'}, [el('a', {href: '#/run/' + encodeURIComponent(right), text: right.slice(0, 12)})])]);
    var body = el('tbody');
    numbers.forEach(function (n) {
      var same = decision(a[n]) === decision(b[n]);
      var notes = [];
      if (a[n] && b[n] && !isTool(a[n]) && !isTool(b[n])) {
        var at = firstChange(a[n], b[n]);
        if (at >= 0) {
          var l = messages(attr(a[n], 'gen_ai.input.messages'))[at];
          var r = messages(attr(b[n], 'gen_ai.input.messages'))[at];
          notes.push(el('div', {'class': 'request-change', 'data-message': String(at)}, [
            el('span', {'class': 'badge changed', text: 'the request differs from message ' + at}),
            el('div', {'class': 'pair'}, [el('pre', {'class': 'left', text: messageText(l)}),
              el('pre', {'class': 'right', text: messageText(r)})])]));
        }
      }
      var row = el('tr', {'data-step': String(n), 'class': (same ? 'same' : 'differs') + (n === parting ? ' parting' : '')}, [
        el('td', {}, [String(n), n === parting ? el('span', {'class': 'badge culprit-badge', text: 'parts here'}) : null]),
        el('td', {'class': 'side left'}, summary(a[n])),
        el('td', {'class': 'side right'}, summary(b[n]))
      ]);
      body.appendChild(row);
      if (notes.length) {
        body.appendChild(el('tr', {'class': 'request-row', 'data-request-step': String(n)}, [
          el('td', {}, []), el('td', {colspan: '2'}, notes)]));
      }
    });
    main.appendChild(section('Steps', 'diff', [el('table', {'class': 'diff'}, [el('thead', {}, [head]), body])]));
  }

  C.diffPage = diffPage;
}());
