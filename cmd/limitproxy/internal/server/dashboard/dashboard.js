// limitproxy's dashboard (docs/admin-api.md#get-dashboard). Every 2 s it
// reads this admin listener's /metrics (Prometheus text format), and with
// the admin token /api/v1/config and /api/v1/top, and renders them. Rates
// are counter increases between two polls divided by the time between
// them; quantiles are histogram_quantile over the same increases. It loads
// nothing from anywhere else and needs no library.
//
// Every figure is in an element with a data-testid (dashboard_test.go reads
// them): a rate has one decimal, a count is an integer, a time is in ms
// with one decimal, and "–" means not known (yet).
(function () {
  'use strict';

  var INTERVAL_MS = 2000;
  var TIMEOUT_MS = 5000;
  var HISTORY = 60; // sparkline points: two minutes
  var TOP_N = 10;
  var DECISIONS = ['allowed', 'queued', 'rejected', 'shadow_rejected', 'shed', 'banned'];
  var LINES = ['allowed', 'queued', 'rejected', 'shadow_rejected']; // drawn in a policy's sparkline
  var TOKEN_KEY = 'limitproxy-admin-token';
  var DASH = '\u2013';

  var token = takeToken();
  var prev = null; // the previous poll's metrics: {t: ms, byId: {series id: value}}
  var polls = 0;
  var hist = {}; // sparkline series by name
  var timer = 0;
  var busy = false; // a poll is under way

  // takeToken returns the admin token given as #token=… (then kept in
  // sessionStorage, this tab only, and removed from the address bar and
  // history) or kept from before. The fragment never reaches a server.
  function takeToken() {
    var m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    var t = '';
    if (m) {
      try {
        t = decodeURIComponent(m[1]);
      } catch (e) {
        t = '';
      }
      try {
        sessionStorage.setItem(TOKEN_KEY, t);
      } catch (e) { /* storage disabled: the token lives until the page is left */ }
      history.replaceState(null, '', location.pathname + location.search);
      return t;
    }
    try {
      return sessionStorage.getItem(TOKEN_KEY) || '';
    } catch (e) {
      return '';
    }
  }

  // ---- Prometheus text exposition format ----

  function parseValue(s) {
    switch (s) {
      case '+Inf': return Infinity;
      case '-Inf': return -Infinity;
      case 'NaN': return NaN;
    }
    return s === undefined || s === '' ? NaN : Number(s);
  }

  // parseMetrics returns the samples of a /metrics answer, each
  // {name, labels, value, id}; id names the series (name and labels).
  function parseMetrics(text) {
    var out = [];
    var lines = text.split('\n');
    for (var i = 0; i < lines.length; i++) {
      var line = lines[i];
      if (line === '' || line.charAt(0) === '#') {
        continue;
      }
      var n = line.length, j = 0;
      while (j < n && line[j] !== '{' && line[j] !== ' ' && line[j] !== '\t') {
        j++;
      }
      var name = line.slice(0, j);
      var labels = {};
      var ok = true;
      if (line[j] === '{') {
        j++;
        for (;;) {
          while (j < n && (line[j] === ' ' || line[j] === ',')) {
            j++;
          }
          if (j >= n) {
            ok = false;
            break;
          }
          if (line[j] === '}') {
            j++;
            break;
          }
          var eq = line.indexOf('=', j);
          if (eq < 0 || line[eq + 1] !== '"') {
            ok = false;
            break;
          }
          var key = line.slice(j, eq).trim();
          var val = '';
          for (j = eq + 2; j < n && line[j] !== '"'; j++) {
            if (line[j] === '\\' && j + 1 < n) {
              j++;
              val += line[j] === 'n' ? '\n' : line[j];
            } else {
              val += line[j];
            }
          }
          j++; // the closing quote
          labels[key] = val;
        }
      }
      var value = parseValue(line.slice(j).trim().split(/\s+/)[0]);
      if (!ok || name === '' || isNaN(value)) {
        continue;
      }
      var keys = Object.keys(labels).sort();
      var id = name + '{' + keys.map(function (k) { return k + '=' + JSON.stringify(labels[k]); }).join(',') + '}';
      out.push({name: name, labels: labels, value: value, id: id});
    }
    return out;
  }

  // Metrics is one poll's samples, with the previous poll's to difference.
  function Metrics(samples, t, before) {
    this.byName = {};
    this.byId = {};
    this.t = t;
    this.before = before; // the previous poll, or null
    for (var i = 0; i < samples.length; i++) {
      var s = samples[i];
      (this.byName[s.name] = this.byName[s.name] || []).push(s);
      this.byId[s.id] = s.value;
    }
  }

  function matches(labels, want) {
    for (var k in want) {
      if (labels[k] !== want[k]) {
        return false;
      }
    }
    return true;
  }

  // select returns the samples of name whose labels include want and, if
  // given, pass pred.
  Metrics.prototype.select = function (name, want, pred) {
    var all = this.byName[name] || [];
    return all.filter(function (s) { return matches(s.labels, want) && (!pred || pred(s.labels)); });
  };

  Metrics.prototype.has = function (name, want) {
    return this.select(name, want || {}).length > 0;
  };

  // sum is the sum of the selected samples: a gauge or a counter's total.
  Metrics.prototype.sum = function (name, want, pred) {
    return this.select(name, want, pred).reduce(function (a, s) { return a + s.value; }, 0);
  };

  // increase is how much the selected counters grew since the previous
  // poll (NaN on the first). A series that was not there before counts
  // from 0 (the exporter creates a series at its first count); one that
  // went down was reset (a restart) and counts from 0 again.
  Metrics.prototype.increase = function (name, want, pred) {
    if (!this.before) {
      return NaN;
    }
    var before = this.before.byId;
    return this.select(name, want, pred).reduce(function (a, s) {
      var p = before[s.id] || 0;
      return a + (s.value >= p ? s.value - p : s.value);
    }, 0);
  };

  Metrics.prototype.rate = function (name, want, pred) {
    if (!this.before) {
      return NaN;
    }
    var dt = (this.t - this.before.t) / 1000;
    return dt > 0 ? this.increase(name, want, pred) / dt : NaN;
  };

  // quantile is Prometheus's histogram_quantile(q, increase(name_bucket))
  // over the selected series (summed by le) since the previous poll: the
  // bucket's bounds interpolated linearly, the highest finite bound when
  // the rank falls in +Inf, NaN when nothing was observed.
  Metrics.prototype.quantile = function (q, name, want, pred) {
    if (!this.before) {
      return NaN;
    }
    var before = this.before.byId;
    var byLe = {};
    this.select(name + '_bucket', want, pred).forEach(function (s) {
      var p = before[s.id] || 0;
      byLe[s.labels.le] = (byLe[s.labels.le] || 0) + (s.value >= p ? s.value - p : s.value);
    });
    var buckets = Object.keys(byLe).map(function (le) {
      return {le: parseValue(le), n: byLe[le]};
    }).sort(function (a, b) { return a.le - b.le; });
    if (buckets.length === 0) {
      return NaN;
    }
    var total = buckets[buckets.length - 1].n;
    if (!(total > 0) || buckets[buckets.length - 1].le !== Infinity) {
      return NaN;
    }
    var rank = q * total;
    for (var i = 0; i < buckets.length; i++) {
      if (buckets[i].n >= rank) {
        if (buckets[i].le === Infinity) {
          return i > 0 ? buckets[i - 1].le : NaN;
        }
        var lo = i > 0 ? buckets[i - 1].le : 0;
        var below = i > 0 ? buckets[i - 1].n : 0;
        if (buckets[i].n === below) {
          return buckets[i].le;
        }
        return lo + (buckets[i].le - lo) * (rank - below) / (buckets[i].n - below);
      }
    }
    return NaN;
  };

  // labelValues lists the values of label over the series of the names,
  // without "".
  Metrics.prototype.labelValues = function (names, label) {
    var seen = {};
    var self = this;
    names.forEach(function (name) {
      (self.byName[name] || []).forEach(function (s) {
        var v = s.labels[label];
        if (v) {
          seen[v] = true;
        }
      });
    });
    return Object.keys(seen).sort();
  };

  // ---- formatting and the DOM ----

  function fmtRate(x) {
    return isFinite(x) ? x.toFixed(1) : DASH;
  }

  function fmtCount(x) {
    return isFinite(x) ? String(Math.round(x)) : DASH;
  }

  function fmtMs(seconds) {
    return isFinite(seconds) ? (seconds * 1000).toFixed(1) : DASH;
  }

  function fmtTime(iso) {
    var d = new Date(iso);
    if (!iso || isNaN(d.getTime())) {
      return DASH;
    }
    var ago = Math.max(0, Math.round((Date.now() - d.getTime()) / 1000));
    return d.toLocaleString() + ' (' + ago + ' s ago)';
  }

  function $(id) {
    return document.getElementById(id);
  }

  function setText(id, text) {
    $(id).textContent = text;
  }

  // el makes an element; attrs are attributes (class, data-testid…),
  // children are nodes or strings.
  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) {
      e.setAttribute(k, attrs[k]);
    }
    (children || []).forEach(function (c) {
      e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    });
    return e;
  }

  // figure is one number: its element carries the testid and only the
  // number; unit is outside it.
  function figure(testid, text, unit) {
    var children = [el('span', {'class': 'fig', 'data-testid': testid}, [text])];
    if (unit) {
      children.push(el('span', {'class': 'unit'}, [unit]));
    }
    return el('span', {}, children);
  }

  // rateCell is a rate over its total.
  function rateCell(cls, rateId, rate, totalId, total) {
    return el('td', {'class': 'num ' + cls}, [
      figure(rateId, fmtRate(rate), '/s'),
      el('br'),
      el('small', {}, [figure(totalId, fmtCount(total))])
    ]);
  }

  function numCell(testid, text, unit) {
    return el('td', {'class': 'num'}, [figure(testid, text, unit)]);
  }

  function record(name, value) {
    var h = hist[name] = hist[name] || [];
    h.push(isFinite(value) ? value : 0);
    if (h.length > HISTORY) {
      h.shift();
    }
  }

  // sparkline draws the named histories as lines on one scale.
  function sparkline(names, classes) {
    var ns = 'http://www.w3.org/2000/svg';
    var w = 160, h = 28;
    var svg = document.createElementNS(ns, 'svg');
    svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
    svg.setAttribute('class', 'spark');
    svg.setAttribute('aria-hidden', 'true');
    var max = 0;
    names.forEach(function (n) {
      (hist[n] || []).forEach(function (v) { max = Math.max(max, v); });
    });
    names.forEach(function (n, i) {
      var values = hist[n] || [];
      if (values.length < 2) {
        return;
      }
      var pts = values.map(function (v, j) {
        var x = w - (values.length - 1 - j) * (w / (HISTORY - 1));
        var y = max > 0 ? h - 1 - (h - 2) * v / max : h - 1;
        return x.toFixed(1) + ',' + y.toFixed(1);
      });
      var line = document.createElementNS(ns, 'polyline');
      line.setAttribute('points', pts.join(' '));
      line.setAttribute('class', classes[i]);
      svg.appendChild(line);
    });
    return el('td', {'class': 'spark'}, [svg]);
  }

  function replaceRows(id, rows) {
    var body = $(id);
    while (body.firstChild) {
      body.removeChild(body.firstChild);
    }
    rows.forEach(function (r) { body.appendChild(r); });
  }

  // ---- the panels ----

  function renderPolicies(m, config) {
    var names = [];
    if (config && config.policies) {
      config.policies.forEach(function (p) { names.push(p.name); });
    }
    m.labelValues(['limitproxy_requests_total', 'limitproxy_queue_depth', 'limitproxy_queue_wait_seconds_count'], 'policy')
      .forEach(function (n) {
        if (names.indexOf(n) < 0) {
          names.push(n);
        }
      });
    replaceRows('policy-rows', names.map(function (p) {
      var cells = [el('th', {scope: 'row'}, [p])];
      DECISIONS.forEach(function (d) {
        var want = {policy: p, decision: d};
        var rate = m.rate('limitproxy_requests_total', want);
        if (m.before) {
          record('p:' + p + ':' + d, rate);
        }
        cells.push(rateCell('d-' + d, 'rate-' + p + '-' + d, rate, 'total-' + p + '-' + d,
          m.sum('limitproxy_requests_total', want)));
      });
      var queued = m.has('limitproxy_queue_depth', {policy: p});
      cells.push(numCell('queue-depth-' + p, queued ? fmtCount(m.sum('limitproxy_queue_depth', {policy: p})) : DASH));
      cells.push(numCell('queue-wait-p50-' + p, fmtMs(m.quantile(0.5, 'limitproxy_queue_wait_seconds', {policy: p})), ' ms'));
      cells.push(numCell('queue-wait-p99-' + p, fmtMs(m.quantile(0.99, 'limitproxy_queue_wait_seconds', {policy: p})), ' ms'));
      cells.push(sparkline(LINES.map(function (d) { return 'p:' + p + ':' + d; }),
        LINES.map(function (d) { return 'line-' + d; })));
      return el('tr', {}, cells);
    }));
    ['unmatched', 'invalid'].forEach(function (d) {
      setText(d + '-rate', fmtRate(m.rate('limitproxy_requests_total', {decision: d})));
      setText(d + '-total', fmtCount(m.sum('limitproxy_requests_total', {decision: d})));
    });
  }

  function is5xx(labels) {
    return /^5/.test(labels.code || '');
  }

  function renderUpstreams(m, config) {
    var names = [];
    if (config && config.upstreams) {
      config.upstreams.forEach(function (u) { names.push(u.name); });
    }
    m.labelValues(['limitproxy_upstream_duration_seconds_count', 'limitproxy_upstream_concurrency_limit'], 'upstream')
      .forEach(function (n) {
        if (names.indexOf(n) < 0) {
          names.push(n);
        }
      });
    replaceRows('upstream-rows', names.map(function (u) {
      var want = {upstream: u};
      var dur = 'limitproxy_upstream_duration_seconds';
      var rate = m.rate(dur + '_count', want), errors = m.rate(dur + '_count', want, is5xx);
      if (m.before) {
        record('u:' + u + ':requests', rate);
        record('u:' + u + ':errors', errors);
      }
      var cells = [
        el('th', {scope: 'row'}, [u]),
        rateCell('', 'upstream-rate-' + u, rate, 'upstream-total-' + u, m.sum(dur + '_count', want)),
        rateCell('d-rejected', 'upstream-errors-rate-' + u, errors, 'upstream-errors-total-' + u, m.sum(dur + '_count', want, is5xx)),
        numCell('upstream-p50-' + u, fmtMs(m.quantile(0.5, dur, want)), ' ms'),
        numCell('upstream-p99-' + u, fmtMs(m.quantile(0.99, dur, want)), ' ms')
      ];
      if (m.has('limitproxy_upstream_concurrency_limit', want)) {
        cells.push(numCell('concurrency-limit-' + u, fmtCount(m.sum('limitproxy_upstream_concurrency_limit', want))));
        cells.push(numCell('concurrency-in-flight-' + u, fmtCount(m.sum('limitproxy_upstream_in_flight', want))));
        cells.push(numCell('concurrency-queue-' + u, fmtCount(m.sum('limitproxy_upstream_queue_depth', want))));
        cells.push(rateCell('d-shed', 'concurrency-shed-rate-' + u, m.rate('limitproxy_upstream_shed_total', want),
          'concurrency-shed-total-' + u, m.sum('limitproxy_upstream_shed_total', want)));
      } else {
        cells.push(el('td', {'class': 'num none', colspan: '4'}, ['no concurrency limit']));
      }
      cells.push(sparkline(['u:' + u + ':requests', 'u:' + u + ':errors'], ['line-allowed', 'line-rejected']));
      return el('tr', {}, cells);
    }));
  }

  // renderReload shows the last reload: its outcome and counts from the
  // metrics (no token needed), the rest from /api/v1/config.
  function renderReload(m, config, configErr) {
    var ok = m.has('limitproxy_config_last_reload_successful') ? m.sum('limitproxy_config_last_reload_successful', {}) === 1 : null;
    var result = $('reload-result');
    result.textContent = ok === null ? DASH : ok ? 'ok' : 'failed';
    result.className = ok === false ? 'bad' : ok ? 'good' : '';
    setText('reload-successes', fmtCount(m.sum('limitproxy_config_reloads_total', {result: 'success'})));
    setText('reload-failures', fmtCount(m.sum('limitproxy_config_reloads_total', {result: 'failure'})));
    var note = $('reload-note'), errBox = $('reload-error');
    if (!config) {
      ['reload-trigger', 'reload-loaded-at', 'reload-hash', 'reload-file', 'reload-restart'].forEach(function (id) { setText(id, DASH); });
      setText('reload-when', '');
      errBox.hidden = true;
      note.hidden = false;
      note.textContent = configErr === 401 ? 'The details need the admin API token.' : 'The details are not available: ' + configErr + '.';
      return;
    }
    note.hidden = true;
    var last = config.last_reload || {};
    setText('reload-when', last.at ? 'at ' + fmtTime(last.at) : '');
    setText('reload-trigger', last.trigger || DASH);
    setText('reload-loaded-at', fmtTime(config.loaded_at));
    var hash = $('reload-hash');
    hash.textContent = config.hash ? config.hash.slice(0, 16) : DASH;
    hash.title = config.hash || '';
    setText('reload-file', config.file || DASH);
    setText('reload-restart', last.requires_restart && last.requires_restart.length ? last.requires_restart.join(', ') : 'nothing');
    errBox.hidden = !last.error;
    errBox.textContent = last.error || '';
  }

  // none is a row saying the list is empty, if it is.
  function none(list, columns) {
    return list && list.length ? [] : [el('tr', {}, [el('td', {'class': 'none', colspan: String(columns)}, ['none'])])];
  }

  function renderTop(top, topErr) {
    var status = $('top-status'), lists = $('top-lists');
    while (lists.firstChild) {
      lists.removeChild(lists.firstChild);
    }
    if (!top) {
      status.textContent = topErr === 404 ? 'top offenders: not available' :
        topErr === 401 ? 'top offenders: needs the admin API token' : 'top offenders: not available (' + topErr + ')';
      return;
    }
    var policies = top.policies || [];
    status.textContent = policies.length ? '' : 'no policy tracks its offenders';
    policies.forEach(function (p) {
      var name = p.policy;
      var head = el('p', {'class': 'note'}, [
        figure('top-total-rejected-' + name, fmtCount(p.total_rejected)), ' rejected in this window of ',
        figure('top-window-' + name, fmtCount(p.window_seconds), ' s'), ' and the one before; a count is over by at most ',
        figure('top-error-bound-' + name, fmtCount(p.error_bound)), '; keys ' + (p.keys || 'hashed') + '.'
      ]);
      var rejected = el('table', {'class': 'top'}, [
        el('caption', {}, ['most rejected']),
        el('thead', {}, [el('tr', {}, [el('th', {}, ['key']), el('th', {'class': 'num'}, ['rejected']), el('th', {'class': 'num'}, ['±'])])]),
        el('tbody', {}, none(p.rejected, 3).concat((p.rejected || []).map(function (r, i) {
          return el('tr', {}, [
            el('td', {}, [el('code', {'data-testid': 'top-rejected-key-' + name + '-' + i}, [String(r.key)])]),
            numCell('top-rejected-count-' + name + '-' + i, fmtCount(r.count)),
            numCell('top-rejected-error-' + name + '-' + i, fmtCount(r.error))
          ]);
        })))
      ]);
      var closest = el('table', {'class': 'top'}, [
        el('caption', {}, ['closest to the limit']),
        el('thead', {}, [el('tr', {}, [el('th', {}, ['key']), el('th', {'class': 'num'}, ['used'])])]),
        el('tbody', {}, none(p.closest, 2).concat((p.closest || []).map(function (r, i) {
          return el('tr', {}, [
            el('td', {}, [el('code', {'data-testid': 'top-closest-key-' + name + '-' + i}, [String(r.key)])]),
            numCell('top-closest-used-' + name + '-' + i, isFinite(r.used) ? (r.used * 100).toFixed(1) : DASH, ' %')
          ]);
        })))
      ]);
      lists.appendChild(el('div', {'class': 'top-policy'}, [el('h3', {}, [name]), head, el('div', {'class': 'pair'}, [rejected, closest])]));
    });
  }

  // ---- polling ----

  // get fetches a path of this listener, relative to the page, with the
  // token on /api/ paths only. It resolves to {status, body} and rejects
  // only when the listener cannot be reached.
  function get(path, api, as) {
    var ctl = new AbortController();
    var t = setTimeout(function () { ctl.abort(); }, TIMEOUT_MS);
    var headers = {};
    if (api && token) {
      headers.Authorization = 'Bearer ' + token;
    }
    return fetch(path, {headers: headers, cache: 'no-store', credentials: 'omit', signal: ctl.signal})
      .then(function (resp) {
        var received = performance.now();
        if (!resp.ok) {
          resp.body && resp.body.cancel();
          return {status: resp.status, body: null, received: received};
        }
        return (as === 'json' ? resp.json() : resp.text()).then(function (body) {
          return {status: resp.status, body: body, received: received};
        });
      })
      .finally(function () { clearTimeout(t); });
  }

  function showTokenForm(refused) {
    var form = $('token-form');
    form.hidden = false;
    if (refused) {
      setText('token-note', 'The admin API refused this token. It is kept in this tab only.');
    }
  }

  function poll() {
    if (busy) {
      return;
    }
    busy = true;
    clearTimeout(timer);
    var settled = function (p) {
      return p.then(function (r) { return r; }, function (e) { return {status: 0, error: e}; });
    };
    // The metrics first, then the API: what the API shows is at least as
    // recent as the figures.
    var metricsDone = settled(get('metrics', false, 'text'));
    Promise.all([
      metricsDone,
      metricsDone.then(function () { return settled(get('api/v1/config', true, 'json')); }),
      metricsDone.then(function () { return settled(get('api/v1/top?n=' + TOP_N, true, 'json')); })
    ]).then(function (rs) {
      var metrics = rs[0], config = rs[1], top = rs[2];
      if (metrics.status !== 200) {
        throw new Error(metrics.status ? 'metrics: HTTP ' + metrics.status : 'cannot reach the admin listener');
      }
      var m = new Metrics(parseMetrics(metrics.body), metrics.received, prev);
      var cfg = config.status === 200 ? config.body : null;
      if (config.status === 401 || top.status === 401) {
        showTokenForm(token !== '');
      }
      renderPolicies(m, cfg);
      renderUpstreams(m, cfg);
      renderReload(m, cfg, config.status || 'unreachable');
      renderTop(top.status === 200 ? top.body : null, top.status || 'unreachable');
      prev = {t: m.t, byId: m.byId};
      polls++;
      setText('polls', String(polls));
      var status = $('status');
      status.textContent = 'live, updated ' + new Date().toLocaleTimeString();
      status.className = 'status good';
    }).catch(function (e) {
      var status = $('status');
      status.textContent = 'stale: ' + e.message + ' (retrying)';
      status.className = 'status bad';
    }).finally(function () {
      busy = false;
      timer = setTimeout(poll, INTERVAL_MS);
    });
  }

  $('token-form').addEventListener('submit', function (ev) {
    ev.preventDefault();
    token = $('token-input').value.trim();
    $('token-input').value = '';
    try {
      sessionStorage.setItem(TOKEN_KEY, token);
    } catch (e) { /* kept for this page only */ }
    $('token-form').hidden = true;
    poll();
  });
  setText('instance', location.host);
  poll();
})();
