/* Money as the console shows it: each amount in its own currency, never two currencies added up.
 *
 * Pure functions (no page): the runs list and the run page draw with them, and they are tested
 * without a browser. The rules are the manifest's (manifest.py: count_charge, evaluate_spend): a cap
 * counts spend in its own currency, times the agent's trust multiplier; a USD cap also counts what was
 * charged in another currency at the manifest's rate (spend.rates: US dollars per unit). Amounts are
 * written as the incident packets write them: "$12.50" for US dollars, "12.50 EUR" for any other.
 */
(function (root) {
  'use strict';

  var USD = 'USD';
  var COST_USD = 'agentreplay.cost.usd', COST_AMOUNT = 'agentreplay.cost.amount',
      COST_CURRENCY = 'agentreplay.cost.currency';

  function digits(n) { return n >= 0.01 || n === 0 ? n.toFixed(2) : n.toPrecision(2); }

  /** One amount in its currency: "$0.000047", "600.00 EUR". */
  function money(amount, currency) {
    var n = Number(amount || 0);
    return !currency || currency === USD ? '$' + digits(n) : digits(n) + ' ' + currency;
  }

  /** Totals by currency, US dollars first: "$0.000047 and 99.00 EUR" ("$0.00" when nothing was spent). */
  function totalsText(totals) {
    var codes = currencies(totals);
    return codes.length ? codes.map(function (c) { return money(totals[c], c); }).join(' and ') : money(0, USD);
  }

  function currencies(byCode) {
    return Object.keys(byCode || {}).sort(function (a, b) {
      return a === USD ? -1 : b === USD ? 1 : a < b ? -1 : a > b ? 1 : 0;
    });
  }

  function positive(value) {
    var n = Number(value);
    return isFinite(n) && n > 0 ? n : null;
  }

  /** The manifest's caps of one period ("per_run" or "per_day") by currency: ``per_run_usd`` and
   * ``per_run: {EUR: 600}`` (a USD cap may be written either way). */
  function capsOf(manifest, period) {
    var spend = manifest && typeof manifest.spend === 'object' && manifest.spend ? manifest.spend : {};
    var caps = {};
    var listed = spend[period] && typeof spend[period] === 'object' ? spend[period] : {};
    Object.keys(listed).forEach(function (code) {
      var cap = positive(listed[code]);
      if (cap !== null && /^[A-Z]{3}$/.test(code)) { caps[code] = cap; }
    });
    var usd = positive(spend[period + '_usd']);
    if (usd !== null) { caps[USD] = usd; }
    return caps;
  }

  /** The run's caps, each in its currency: [{currency, base (the manifest's), cap (times the multiplier)}]. */
  function runCaps(manifest, multiplier) {
    var caps = capsOf(manifest, 'per_run');
    var m = isFinite(multiplier) ? Number(multiplier) : 1;
    return currencies(caps).map(function (code) { return {currency: code, base: caps[code], cap: caps[code] * m}; });
  }

  function rates(manifest) {
    var found = manifest && manifest.spend && typeof manifest.spend.rates === 'object' ? manifest.spend.rates : {};
    var out = {};
    Object.keys(found || {}).forEach(function (code) {
      var rate = positive(found[code]);
      if (rate !== null && code !== USD) { out[code] = rate; }
    });
    return out;
  }

  function attr(span, key) { return span && span.attributes ? span.attributes[key] : undefined; }

  /** What a run spent, by currency, from its spans: a charge in another currency as charged
   * (``agentreplay.cost.amount`` and ``.currency``), US dollars from ``agentreplay.cost.usd``. ``costUsd``:
   * the run's recorded US dollar total, when known (it wins over the spans' sum: a live run's spans may lag). */
  function spentBy(spans, costUsd) {
    var totals = {};
    (spans || []).forEach(function (s) {
      var code = attr(s, COST_CURRENCY), amount = Number(attr(s, COST_AMOUNT));
      if (typeof code === 'string' && code && code !== USD && isFinite(amount)) {
        if (amount) { totals[code] = (totals[code] || 0) + amount; }
        return;
      }
      var usd = Number(attr(s, COST_USD));
      if (isFinite(usd) && usd) { totals[USD] = (totals[USD] || 0) + usd; }
    });
    var recorded = Number(costUsd);
    if (isFinite(recorded) && recorded > 0) { totals[USD] = recorded; }
    return totals;
  }

  /** Each cap with what counts toward it: [{currency, cap, base, counted, share, converted: [[code, amount, rate]]}]. */
  function capUse(totals, manifest, multiplier) {
    var known = rates(manifest);
    return runCaps(manifest, multiplier).map(function (c) {
      var counted = Number(totals[c.currency] || 0), converted = [];
      if (c.currency === USD) {
        currencies(totals).forEach(function (code) {
          if (code !== USD && known[code] !== undefined && totals[code]) {
            counted += totals[code] * known[code];
            converted.push([code, totals[code], known[code]]);
          }
        });
      }
      return {currency: c.currency, cap: c.cap, base: c.base, counted: counted, share: counted / c.cap,
              converted: converted};
    });
  }

  /** The run page's spend cap line: each cap in its currency, what counts toward it and its share. */
  function capText(totals, manifest, multiplier) {
    var uses = capUse(totals, manifest, multiplier);
    if (!uses.length) { return manifest ? 'none per run' : ''; }
    var m = isFinite(multiplier) ? Number(multiplier) : 1;
    return uses.map(function (u) {
      var at = u.converted.map(function (c) { return money(c[1], c[0]) + ' counted at ' + money(c[2], USD); });
      return money(u.counted, u.currency) + ' of ' + money(u.cap, u.currency) + ' per run (' +
        (100 * u.share).toFixed(0) + '%' + (at.length ? '; ' + at.join(', ') : '') + '): the manifest\'s ' +
        money(u.base, u.currency) + ' × trust multiplier ' + m.toFixed(2);
    }).join('; ');
  }

  /** A run's outcome as a person reads it: "error" for a failed run, "running" while live, else "ok"
   * (OpenTelemetry's "Unset" is a run that ended without an error). */
  function outcome(run) {
    var code = run && run.status_code;
    if (code === 'Error') { return 'error'; }
    if ((!code || code === 'Unset') && run && run.chain && run.chain.status === 'pending') { return 'running'; }
    return 'ok';
  }

  root.AgentReplayMoney = {
    USD: USD,
    money: money,
    totalsText: totalsText,
    capsOf: capsOf,
    runCaps: runCaps,
    spentBy: spentBy,
    capUse: capUse,
    capText: capText,
    outcome: outcome
  };
})(typeof window !== 'undefined' ? window : globalThis);
