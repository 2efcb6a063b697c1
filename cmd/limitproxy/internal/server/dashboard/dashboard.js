// limitproxy's dashboard (docs/admin-api.md#get-dashboard). Every 2 s it
// reads this admin listener's /metrics (Prometheus text format), and with
// the admin token /api/v1/config and /api/v1/top, and renders them. Rates
// are counter increases between two polls divided by the time between
// them; quantiles are histogram_quantile over the same increases. The
// charts hold the last 15 minutes of those figures, 450 points a series
// at most; when the page opens (or comes back after its browser slowed
// it down), /api/v1/history gives the points the page did not see. It
// loads nothing from anywhere else and needs no library: the charts are
// SVG drawn here.
//
// Every figure is in an element with a data-testid (dashboard_test.go reads
// them): a rate has one decimal, a count is an integer, a time is in ms
// with one decimal, and "–" means not known (yet). Each chart's lines
// carry data-series, data-points and data-max for the same reason.
(function () {
  'use strict';

  var INTERVAL_MS = 2000;
  var TIMEOUT_MS = 5000;
  var SPAN_MS = 15 * 60 * 1000; // what a chart shows
  var POINTS = 450; // points kept a series: 15 minutes of polls
  var GAP_MS = 3 * INTERVAL_MS; // a longer step between two points is a gap in the line
  var TOP_N = 10;
  // The decisions of a policy, in the table's order.
  var DECISIONS = ['allowed', 'queued', 'rejected', 'banned', 'shadow_rejected', 'shed'];
  // What a policy's chart draws: always the first four, the others when
  // they are not 0 within the 15 minutes.
  var CHART = ['allowed', 'queued', 'rejected', 'banned'];
  var CHART_IF_ANY = ['shadow_rejected', 'shed', 'shadow_banned'];
  var LABELS = {shadow_rejected: 'shadow rejected', shadow_banned: 'shadow banned', p50: 'p50', p99: 'p99',
    requests: 'requests', errors: 'errors (5xx)'};
  var TOKEN_KEY = 'limitproxy-admin-token';
  var DASH = '\u2013';
  var SVG = 'http://www.w3.org/2000/svg';

  var token = takeToken();
  var prev = null; // the previous poll's metrics: {t: ms, wall: ms, byId: {series id: value}}
  var polls = 0;
  var timer = 0;
  var busy = false; // a poll is under way
  // historyState: "want" (ask /api/v1/history at the next poll), "have",
  // "denied" (401: asked again with another token), "none" (the server
  // has no history: never asked again).
  var historyState = 'want';
  var lastTop = null; // the last /api/v1/top answer, rendered again after a reveal
  var revealed = {}; // policy + "\n" + hash → {key} or {error}, for the rows shown
  var plots = []; // every chart drawn, for the shared cursor
  var cursorT = null; // the time the cursor shows, or null
  var cursorPlot = null; // the plot the pointer or focus is in

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
  function Metrics(samples, t, wall, before) {
    this.byName = {};
    this.byId = {};
    this.t = t; // performance.now(): for the time between polls
    this.wall = wall; // Date.now(): where the poll's point goes on a chart
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

  // ---- the charts' points: 15 minutes of polls, bounded ----

  // The points of every series share one ring of times: a poll adds one
  // point to each. A series is a Float32Array aligned with the times; NaN
  // is no value (before the series was seen, a latency without answers).
  // Series are named "p\n<policy>\n<decision>" (requests a second) and
  // "u\n<upstream>\n<field>" (requests, errors: a second; p50, p99: s).
  var store = {times: new Float64Array(POINTS), n: 0, next: 0, series: Object.create(null)};

  function pName(policy, d) {
    return 'p\n' + policy + '\n' + d;
  }

  function uName(upstream, f) {
    return 'u\n' + upstream + '\n' + f;
  }

  // order returns the ring's indexes, oldest first.
  function order() {
    var out = [];
    for (var j = 0; j < store.n; j++) {
      out.push((store.next - store.n + j + POINTS) % POINTS);
    }
    return out;
  }

  function lastTime() {
    return store.n ? store.times[(store.next - 1 + POINTS) % POINTS] : -Infinity;
  }

  function newSeries() {
    var a = new Float32Array(POINTS);
    a.fill(NaN);
    return a;
  }

  // addPoint adds the point at time t (ms): vals by series name; a series
  // left out has no value there.
  function addPoint(t, vals) {
    var i = store.next;
    store.times[i] = t;
    store.next = (i + 1) % POINTS;
    store.n = Math.min(store.n + 1, POINTS);
    for (var name in vals) {
      if (!store.series[name]) {
        store.series[name] = newSeries();
      }
    }
    for (name in store.series) {
      store.series[name][i] = name in vals ? vals[name] : NaN;
    }
  }

  // seed merges /api/v1/history's answer h, received at wall (ms), into
  // the points: the page's own points older than the history's (from
  // before a restart of the server) stay, the rest is the history's. A
  // decision the history leaves out was 0; so were the policies and
  // upstreams known (names) that it leaves out.
  function seed(h, wall, names) {
    var ages = h.ages_seconds || [];
    if (!ages.length) {
      return;
    }
    var ts = ages.map(function (a) { return wall - a * 1000; });
    var keep = order().filter(function (i) { return store.times[i] < ts[0] - INTERVAL_MS / 2; });
    var cols = Object.create(null); // series name → values of the history's samples
    var zeros = function () { return ts.map(function () { return 0; }); };
    var nulls = function () { return ts.map(function () { return NaN; }); };
    var policies = names.policies.slice(), upstreams = names.upstreams.slice();
    (h.policies || []).forEach(function (p) {
      policies.push(p.policy);
      for (var d in p.decisions || {}) {
        cols[pName(p.policy, d)] = p.decisions[d].map(Number);
      }
    });
    policies.forEach(function (p) {
      DECISIONS.concat(['shadow_banned']).forEach(function (d) {
        cols[pName(p, d)] = cols[pName(p, d)] || zeros();
      });
    });
    (h.upstreams || []).forEach(function (u) {
      upstreams.push(u.upstream);
      cols[uName(u.upstream, 'requests')] = (u.requests || []).map(Number);
      cols[uName(u.upstream, 'errors')] = (u.errors || []).map(Number);
      cols[uName(u.upstream, 'p50')] = (u.p50_seconds || []).map(function (v) { return v === null ? NaN : v; });
      cols[uName(u.upstream, 'p99')] = (u.p99_seconds || []).map(function (v) { return v === null ? NaN : v; });
    });
    upstreams.forEach(function (u) {
      cols[uName(u, 'requests')] = cols[uName(u, 'requests')] || zeros();
      cols[uName(u, 'errors')] = cols[uName(u, 'errors')] || zeros();
      cols[uName(u, 'p50')] = cols[uName(u, 'p50')] || nulls();
      cols[uName(u, 'p99')] = cols[uName(u, 'p99')] || nulls();
    });
    var times = keep.map(function (i) { return store.times[i]; }).concat(ts);
    var series = Object.create(null);
    var from = Math.max(0, times.length - POINTS);
    var all = Object.create(null);
    Object.keys(store.series).concat(Object.keys(cols)).forEach(function (n) { all[n] = true; });
    for (var name in all) {
      var old = store.series[name];
      var vals = keep.map(function (i) { return old ? old[i] : NaN; })
        .concat(cols[name] || nulls());
      var a = newSeries();
      a.set(vals.slice(from, from + POINTS).map(function (v) { return typeof v === 'number' ? v : NaN; }));
      series[name] = a;
    }
    store.times.fill(0);
    store.times.set(times.slice(from));
    store.n = times.length - from;
    store.next = store.n % POINTS;
    store.series = series;
  }

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

  function pad2(n) {
    return (n < 10 ? '0' : '') + n;
  }

  // clock is a time of day, 24-hour: "16:04", or with seconds "16:04:31".
  function clock(t, seconds) {
    var d = new Date(t);
    return pad2(d.getHours()) + ':' + pad2(d.getMinutes()) + (seconds ? ':' + pad2(d.getSeconds()) : '');
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

  // svg makes an SVG element, as el does.
  function svg(tag, attrs, children) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs || {}) {
      e.setAttribute(k, attrs[k]);
    }
    (children || []).forEach(function (c) {
      e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    });
    return e;
  }

  function clear(e) {
    while (e.firstChild) {
      e.removeChild(e.firstChild);
    }
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

  function replaceRows(id, rows) {
    var body = $(id);
    clear(body);
    rows.forEach(function (r) { body.appendChild(r); });
  }

  // ---- charts ----

  // niceStep is a step of 1, 2, 2.5 or 5 × 10^k that cuts 0…max in about
  // n parts.
  function niceStep(max, n) {
    var raw = max / n;
    var p = Math.pow(10, Math.floor(Math.log(raw) / Math.LN10));
    var steps = [1, 2, 5, 10]; // not 2.5: whole labels from 1 up
    for (var i = 0; i < steps.length; i++) {
      if (steps[i] * p >= raw) {
        return steps[i] * p;
      }
    }
    return 10 * p;
  }

  // fmtAxis is a tick's label: 1.5k for 1500, and as many decimals as the
  // step needs.
  function fmtAxis(v, step) {
    if (v >= 1000 && step >= 100) {
      return (v / 1000).toFixed(step >= 1000 ? 0 : 1).replace(/\.0$/, '') + 'k';
    }
    var decimals = step >= 1 ? 0 : step >= 0.1 - 1e-9 ? 1 : step >= 0.01 - 1e-9 ? 2 : 3;
    return v.toFixed(decimals);
  }

  // swatch is a short line drawn as the series' line is, for a legend.
  function swatch(cls) {
    return svg('svg', {'class': 'swatch', viewBox: '0 0 24 8', 'aria-hidden': 'true'}, [
      svg('line', {x1: 1, y1: 4, x2: 23, y2: 4, 'class': 'line ' + cls})
    ]);
  }

  // collecting is what a chart says while it does not cover its 15
  // minutes, or "" once it does.
  function collecting(covered) {
    if (covered >= SPAN_MS - INTERVAL_MS) {
      return '';
    }
    if (covered < 60000) {
      return 'collecting: ' + Math.floor(covered / 1000) + ' s of 15 min';
    }
    return 'collecting: ' + Math.floor(covered / 60000) + ' min of 15';
  }

  // Card is one chart panel: a title and, per plot, a legend above it.
  // The DOM stays between polls (so does the keyboard focus); each poll
  // draws the plots again.
  function Card(container, key, title, testid) {
    this.key = key;
    this.sub = el('span', {'class': 'card-sub'});
    this.el = el('article', {'class': 'card', 'data-testid': testid}, [
      el('h3', {}, [title, ' ', this.sub])
    ]);
    this.plots = [];
    container.appendChild(this.el);
  }

  // plot adds a plot of spec {key, label, unit, scale, height, series:
  // [{name, id, label, cls, always}]} to the card.
  Card.prototype.plot = function (spec) {
    var legend = el('ul', {'class': 'legend'});
    var box = el('div', {'class': 'plot', tabindex: '0', role: 'group', 'aria-roledescription': 'chart',
      'aria-label': spec.label + '. Arrow keys read the values at a time.'});
    var tip = el('div', {'class': 'tip', role: 'status', 'aria-live': 'polite', hidden: ''});
    box.appendChild(tip);
    this.el.appendChild(legend);
    this.el.appendChild(box);
    var p = {spec: spec, legend: legend, box: box, tip: tip, graph: null, data: null};
    box.addEventListener('pointermove', function (ev) { pointAt(p, ev.clientX); });
    box.addEventListener('pointerleave', function () {
      if (document.activeElement !== box) {
        setCursor(null, null);
      }
    });
    box.addEventListener('focus', function () {
      if (p.data && p.data.t.length) {
        setCursor(p, p.data.t[p.data.t.length - 1]);
      }
    });
    box.addEventListener('blur', function () { setCursor(null, null); });
    box.addEventListener('keydown', function (ev) { stepCursor(p, ev); });
    this.plots.push(p);
    plots.push(p);
    return p;
  };

  Card.prototype.remove = function () {
    var mine = this.plots;
    plots = plots.filter(function (p) { return mine.indexOf(p) < 0; });
    this.el.parentNode.removeChild(this.el);
  };

  // cards keeps the cards of a container by key, in the order of keys.
  function syncCards(container, cards, keys, make) {
    var want = {};
    keys.forEach(function (k) { want[k] = true; });
    Object.keys(cards).forEach(function (k) {
      if (!want[k]) {
        cards[k].remove();
        delete cards[k];
      }
    });
    keys.forEach(function (k) {
      if (!cards[k]) {
        cards[k] = make(k);
      }
      container.appendChild(cards[k].el); // in order
    });
  }

  // draw draws plot p over the 15 minutes that end at now: gridlines
  // and ticks, a line per series (broken where points are missing), the
  // legend with the latest values, and what is still being collected.
  function draw(p, now) {
    var spec = p.spec;
    var width = Math.max(260, p.box.clientWidth || 600);
    var height = spec.height;
    var m = {l: 46, r: 12, t: 24, b: 22};
    var w = width - m.l - m.r, h = height - m.t - m.b;
    var t0 = now - SPAN_MS;
    var idx = order().filter(function (i) { return store.times[i] > t0; });
    var ts = idx.map(function (i) { return store.times[i]; });
    var x = function (t) { return m.l + (t - t0) / SPAN_MS * w; };

    // The series drawn, each with its values (scaled: ms for latency).
    var drawn = [];
    spec.series.forEach(function (s) {
      var a = store.series[s.name];
      var vals = idx.map(function (i) { return a ? a[i] * spec.scale : NaN; });
      var any = vals.some(function (v) { return v > 0; });
      if (s.always || any) {
        drawn.push({s: s, vals: vals});
      }
    });
    var max = 0;
    drawn.forEach(function (d) {
      d.vals.forEach(function (v) {
        if (v > max) {
          max = v;
        }
      });
    });
    var step = niceStep(max > 0 ? max : 1, 4);
    var top = Math.max(step, Math.ceil(max / step - 1e-9) * step);
    var y = function (v) { return m.t + h - v / top * h; };

    var g = svg('svg', {'class': 'chart', width: width, height: height, viewBox: '0 0 ' + width + ' ' + height,
      role: 'img', 'data-chart': spec.key, 'data-points': ts.length});
    var title = svg('title', {}, [summary(spec, drawn, ts)]);
    g.appendChild(title);

    // Gridlines and the y axis's ticks.
    for (var v = 0; v <= top + step / 2; v += step) {
      g.appendChild(svg('line', {'class': 'grid', x1: m.l, x2: m.l + w, y1: y(v), y2: y(v)}));
      g.appendChild(svg('text', {'class': 'tick', x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end'}, [fmtAxis(v, step)]));
    }
    g.appendChild(svg('text', {'class': 'unit-label', x: m.l - 6, y: 10, 'text-anchor': 'end'}, [spec.unit]));
    // The x axis: a tick every 3 minutes (5 when narrow), at round times.
    var every = (w < 420 ? 5 : 3) * 60000;
    for (var t = Math.ceil(t0 / every) * every; t <= now; t += every) {
      var xt = x(t);
      g.appendChild(svg('line', {'class': 'grid', x1: xt, x2: xt, y1: m.t, y2: m.t + h}));
      if (xt > m.l + 16 && xt < m.l + w - 16) {
        g.appendChild(svg('text', {'class': 'tick', x: xt, y: m.t + h + 16, 'text-anchor': 'middle'}, [clock(t)]));
      }
    }
    g.appendChild(svg('line', {'class': 'axis', x1: m.l, x2: m.l + w, y1: m.t + h, y2: m.t + h}));

    // What is still being collected: the part before the first point.
    var start = ts.length ? Math.max(t0, ts[0] - INTERVAL_MS) : now;
    var note = collecting(now - start);
    if (note) {
      var bx = x(start);
      g.appendChild(svg('rect', {'class': 'collect', x: m.l, y: m.t, width: Math.max(0, bx - m.l), height: h}));
      var inside = bx - m.l >= 190;
      g.appendChild(svg('text', {'class': 'collect-note', 'data-testid': 'collecting-' + spec.key,
        x: inside ? (m.l + bx) / 2 : m.l + 8, y: m.t + h / 2 + 4, 'text-anchor': inside ? 'middle' : 'start'}, [note]));
    }

    // The lines, the last series on top.
    drawn.forEach(function (d) {
      var path = '', open = false, points = 0, dmax = 0;
      for (var j = 0; j < ts.length; j++) {
        var val = d.vals[j];
        if (!isFinite(val)) {
          open = false;
          continue;
        }
        points++;
        dmax = Math.max(dmax, val);
        var xy = x(ts[j]).toFixed(1) + ' ' + y(val).toFixed(1);
        if (!open || ts[j] - ts[j - 1] > GAP_MS) {
          path += 'M' + xy + 'h0.01'; // a point alone shows as a dot
        } else {
          path += 'L' + xy;
        }
        open = true;
      }
      g.appendChild(svg('path', {'class': 'line ' + d.s.cls, d: path || 'M0 0', 'data-series': d.s.id,
        'data-points': points, 'data-max': +dmax.toFixed(3)}));
    });

    // The cursor: a line and a dot a series, placed by setCursor.
    var cursor = svg('g', {'class': 'cursor', visibility: 'hidden'}, [
      svg('line', {x1: 0, x2: 0, y1: m.t, y2: m.t + h})
    ].concat(drawn.map(function (d) { return svg('circle', {r: 3.5, 'class': 'dot ' + d.s.cls}); })));
    g.appendChild(cursor);

    if (p.graph) {
      p.box.replaceChild(g, p.graph);
    } else {
      p.box.insertBefore(g, p.tip);
    }
    p.graph = g;
    p.data = {t: ts, now: now, drawn: drawn, x: x, y: y, m: m, w: w, cursor: cursor};
    drawLegend(p, drawn);
    placeCursor(p);
  }

  // drawLegend lists the series drawn, each with its latest value.
  function drawLegend(p, drawn) {
    clear(p.legend);
    drawn.forEach(function (d) {
      var last = d.vals.length ? d.vals[d.vals.length - 1] : NaN;
      p.legend.appendChild(el('li', {'data-series': d.s.id}, [
        swatch(d.s.cls), ' ' + d.s.label + ' ',
        el('span', {'class': 'fig', 'data-testid': 'legend-' + p.spec.key + '-' + d.s.id}, [fmtValue(p.spec, last)])
      ]));
    });
  }

  function fmtValue(spec, v) {
    if (!isFinite(v)) {
      return DASH;
    }
    return spec.unit === 'ms' ? v.toFixed(1) + ' ms' : v.toFixed(1) + '/s';
  }

  // summary is a chart's text alternative: what it shows, its latest
  // values and its highest.
  function summary(spec, drawn, ts) {
    if (!ts.length) {
      return spec.label + ': no points yet.';
    }
    var now = drawn.map(function (d) { return d.s.label + ' ' + fmtValue(spec, d.vals[d.vals.length - 1]); });
    var peak = null;
    drawn.forEach(function (d) {
      d.vals.forEach(function (v, j) {
        if (isFinite(v) && (!peak || v > peak.v)) {
          peak = {v: v, label: d.s.label, t: ts[j]};
        }
      });
    });
    return spec.label + ', ' + ts.length + ' points since ' + clock(ts[0]) + '. Latest: ' + now.join(', ') + '.' +
      (peak && peak.v > 0 ? ' Highest: ' + peak.label + ' ' + fmtValue(spec, peak.v) + ' at ' + clock(peak.t, true) + '.' : '');
  }

  // nearest returns the index of the point of p closest to time t, or -1.
  function nearest(p, t) {
    var ts = p.data ? p.data.t : [];
    if (!ts.length || t === null) {
      return -1;
    }
    var lo = 0, hi = ts.length - 1;
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (ts[mid] < t) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo > 0 && t - ts[lo - 1] < ts[lo] - t) {
      lo--;
    }
    return Math.abs(ts[lo] - t) <= GAP_MS ? lo : -1;
  }

  // pointAt puts the cursor at the time under the pointer.
  function pointAt(p, clientX) {
    if (!p.data) {
      return;
    }
    var d = p.data;
    var x = clientX - p.graph.getBoundingClientRect().left;
    setCursor(p, d.now - SPAN_MS + (x - d.m.l) / d.w * SPAN_MS);
  }

  // stepCursor moves the cursor of a focused plot with the keyboard.
  function stepCursor(p, ev) {
    var ts = p.data ? p.data.t : [];
    if (!ts.length) {
      return;
    }
    var i = nearest(p, cursorT);
    if (i < 0) {
      i = ts.length - 1;
    }
    switch (ev.key) {
      case 'ArrowLeft': i = Math.max(0, i - (ev.shiftKey ? 30 : 1)); break;
      case 'ArrowRight': i = Math.min(ts.length - 1, i + (ev.shiftKey ? 30 : 1)); break;
      case 'Home': i = 0; break;
      case 'End': i = ts.length - 1; break;
      case 'Escape': setCursor(null, null); return;
      default: return;
    }
    ev.preventDefault();
    setCursor(p, ts[i]);
  }

  // setCursor shows time t on every chart (a line and dots), and the
  // values in the tooltip of the plot the pointer or focus is in.
  function setCursor(p, t) {
    cursorPlot = p;
    cursorT = t;
    plots.forEach(placeCursor);
  }

  function placeCursor(p) {
    if (!p.data) {
      return;
    }
    var d = p.data;
    var i = nearest(p, cursorT);
    if (i < 0) {
      d.cursor.setAttribute('visibility', 'hidden');
      if (p === cursorPlot || !p.tip.hidden) {
        p.tip.hidden = true;
      }
      return;
    }
    var cx = d.x(d.t[i]);
    d.cursor.setAttribute('visibility', 'visible');
    var line = d.cursor.firstChild;
    line.setAttribute('x1', cx);
    line.setAttribute('x2', cx);
    var dots = d.cursor.querySelectorAll('circle');
    d.drawn.forEach(function (s, j) {
      var v = s.vals[i];
      dots[j].setAttribute('visibility', isFinite(v) ? 'visible' : 'hidden');
      dots[j].setAttribute('cx', cx);
      dots[j].setAttribute('cy', isFinite(v) ? d.y(v) : 0);
    });
    if (p !== cursorPlot) {
      p.tip.hidden = true;
      return;
    }
    clear(p.tip);
    p.tip.appendChild(el('div', {'class': 'tip-time'}, [clock(d.t[i], true)]));
    d.drawn.forEach(function (s) {
      p.tip.appendChild(el('div', {}, [swatch(s.s.cls), ' ' + s.s.label + ' ',
        el('b', {}, [fmtValue(p.spec, s.vals[i])])]));
    });
    p.tip.hidden = false;
    // Beside the cursor, on the side with room (CSSOM, which the
    // Content-Security-Policy allows: no inline style).
    var boxW = p.box.clientWidth, tipW = p.tip.offsetWidth;
    var left = cx + 12 + tipW > boxW ? cx - 12 - tipW : cx + 12;
    p.tip.style.left = Math.max(0, left) + 'px';
    p.tip.style.top = (d.m.t + 4) + 'px';
  }

  var policyCards = {}, upstreamCards = {};

  // policyNote is what a policy's chart says of it beside its name: its
  // upstream, and its mode when it is not enforced, from its description
  // in /api/v1/config.
  function policyNote(config, name) {
    var p = ((config && config.policies) || []).filter(function (q) { return q.name === name; })[0];
    var desc = p && p.description || '';
    var up = /(?:^| )upstream=(\S+)/.exec(desc), mode = /(?:^| )mode=(\S+)/.exec(desc);
    return [up ? 'to ' + up[1] : '', mode && mode[1] !== 'enforce' ? mode[1] + ' mode' : ''].filter(Boolean).join(', ');
  }

  function renderPolicyCharts(names, now, config) {
    syncCards($('policy-charts'), policyCards, names, function (name) {
      var c = new Card($('policy-charts'), name, name, 'policy-chart-' + name);
      c.plot({key: 'p:' + name, label: name + ': requests a second by decision over the last 15 minutes', unit: 'req/s', scale: 1,
        height: 210, series: CHART.concat(CHART_IF_ANY).map(function (d) {
          return {name: pName(name, d), id: d, label: LABELS[d] || d, cls: 's-' + d, always: CHART.indexOf(d) >= 0};
        })});
      return c;
    });
    names.forEach(function (n) {
      policyCards[n].sub.textContent = policyNote(config, n);
      policyCards[n].plots.forEach(function (p) { draw(p, now); });
    });
  }

  function renderUpstreamCharts(names, now) {
    syncCards($('upstream-charts'), upstreamCards, names, function (name) {
      var c = new Card($('upstream-charts'), name, name, 'upstream-chart-' + name);
      c.plot({key: 'u:' + name + ':latency', label: name + ': latency p50 and p99 over the last 15 minutes, in ms', unit: 'ms',
        scale: 1000, height: 150, series: [
          {name: uName(name, 'p50'), id: 'p50', label: 'p50', cls: 's-p50', always: true},
          {name: uName(name, 'p99'), id: 'p99', label: 'p99', cls: 's-p99', always: true}
        ]});
      c.plot({key: 'u:' + name + ':answers', label: name + ': answers and 5xx errors a second over the last 15 minutes', unit: 'req/s',
        scale: 1, height: 150, series: [
          {name: uName(name, 'requests'), id: 'requests', label: 'requests', cls: 's-requests', always: true},
          {name: uName(name, 'errors'), id: 'errors', label: 'errors (5xx)', cls: 's-errors', always: true}
        ]});
      return c;
    });
    names.forEach(function (n) {
      upstreamCards[n].plots.forEach(function (p) { draw(p, now); });
    });
  }

  // redrawAll draws every chart again, at the time of its last poll (a
  // window resized).
  function redrawAll() {
    plots.forEach(function (p) {
      if (p.data) {
        draw(p, p.data.now);
      }
    });
  }

  // ---- the panels ----

  function policyNames(m, config) {
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
    return names;
  }

  function upstreamNames(m, config) {
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
    return names;
  }

  function is5xx(labels) {
    return /^5/.test(labels.code || '');
  }

  var DUR = 'limitproxy_upstream_duration_seconds';

  // point is this poll's point of every series: the rates and quantiles
  // since the previous poll.
  function point(m, policies, upstreams) {
    var vals = {};
    policies.forEach(function (p) {
      DECISIONS.concat(['shadow_banned']).forEach(function (d) {
        vals[pName(p, d)] = m.rate('limitproxy_requests_total', {policy: p, decision: d});
      });
    });
    upstreams.forEach(function (u) {
      var want = {upstream: u};
      vals[uName(u, 'requests')] = m.rate(DUR + '_count', want);
      vals[uName(u, 'errors')] = m.rate(DUR + '_count', want, is5xx);
      vals[uName(u, 'p50')] = m.quantile(0.5, DUR, want);
      vals[uName(u, 'p99')] = m.quantile(0.99, DUR, want);
    });
    return vals;
  }

  function renderPolicies(m, names) {
    replaceRows('policy-rows', names.map(function (p) {
      var cells = [el('th', {scope: 'row'}, [p])];
      DECISIONS.forEach(function (d) {
        var want = {policy: p, decision: d};
        cells.push(rateCell('d-' + d, 'rate-' + p + '-' + d, m.rate('limitproxy_requests_total', want), 'total-' + p + '-' + d,
          m.sum('limitproxy_requests_total', want)));
      });
      var queued = m.has('limitproxy_queue_depth', {policy: p});
      cells.push(numCell('queue-depth-' + p, queued ? fmtCount(m.sum('limitproxy_queue_depth', {policy: p})) : DASH));
      cells.push(numCell('queue-wait-p50-' + p, fmtMs(m.quantile(0.5, 'limitproxy_queue_wait_seconds', {policy: p})), ' ms'));
      cells.push(numCell('queue-wait-p99-' + p, fmtMs(m.quantile(0.99, 'limitproxy_queue_wait_seconds', {policy: p})), ' ms'));
      return el('tr', {}, cells);
    }));
    ['unmatched', 'invalid'].forEach(function (d) {
      setText(d + '-rate', fmtRate(m.rate('limitproxy_requests_total', {decision: d})));
      setText(d + '-total', fmtCount(m.sum('limitproxy_requests_total', {decision: d})));
    });
  }

  function renderUpstreams(m, names) {
    replaceRows('upstream-rows', names.map(function (u) {
      var want = {upstream: u};
      var cells = [
        el('th', {scope: 'row'}, [u]),
        rateCell('', 'upstream-rate-' + u, m.rate(DUR + '_count', want), 'upstream-total-' + u, m.sum(DUR + '_count', want)),
        rateCell('d-rejected', 'upstream-errors-rate-' + u, m.rate(DUR + '_count', want, is5xx), 'upstream-errors-total-' + u,
          m.sum(DUR + '_count', want, is5xx)),
        numCell('upstream-p50-' + u, fmtMs(m.quantile(0.5, DUR, want)), ' ms'),
        numCell('upstream-p99-' + u, fmtMs(m.quantile(0.99, DUR, want)), ' ms')
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

  // keyCell is a top offender's key: as the list shows it and, when it is
  // a key hash, a button that asks the admin API which client it is
  // (GET …/keys/by-hash/{hash}) and what it answered.
  function keyCell(policy, list, i, key, hashed) {
    var cell = el('td', {'class': 'key'}, [el('code', {'data-testid': 'top-' + list + '-key-' + policy + '-' + i}, [String(key)])]);
    if (!hashed) {
      return cell;
    }
    var r = revealed[policy + '\n' + key];
    if (r && r.key !== undefined) {
      cell.appendChild(el('span', {'class': 'raw'}, [' is ', el('code', {'data-testid': 'top-' + list + '-raw-' + policy + '-' + i},
        [r.key === '' ? '(no key: key = [])' : r.key])]));
      return cell;
    }
    if (r && r.error) {
      cell.appendChild(el('span', {'class': 'bad reveal-error', 'data-testid': 'top-' + list + '-refused-' + policy + '-' + i},
        [' ' + r.error]));
      return cell;
    }
    var b = el('button', {type: 'button', 'class': 'reveal', 'data-testid': 'reveal-' + list + '-' + policy + '-' + i,
      'aria-label': 'reveal the client key of ' + key}, [r && r.busy ? 'revealing…' : 'reveal']);
    b.addEventListener('click', function () { reveal(policy, key); });
    cell.appendChild(document.createTextNode(' '));
    cell.appendChild(b);
    return cell;
  }

  // reveal asks which client the key hash hash of policy is, and shows
  // the answer in every row of that key.
  function reveal(policy, hash) {
    var k = policy + '\n' + hash;
    if (revealed[k]) {
      return;
    }
    revealed[k] = {busy: true};
    if (lastTop) {
      renderTop(lastTop);
    }
    settled(get('api/v1/policies/' + encodeURIComponent(policy) + '/keys/by-hash/' + encodeURIComponent(hash), true, 'json'))
      .then(function (r) {
        if (r.status === 200 && r.body && typeof r.body.key === 'string') {
          revealed[k] = {key: r.body.key};
        } else if (r.status === 401) {
          revealed[k] = {error: 'refused: the admin API token is missing or wrong'};
        } else if (r.status === 0) {
          revealed[k] = {error: 'not revealed: the admin listener cannot be reached'};
        } else {
          revealed[k] = {error: 'not revealed (' + r.status + ')' + (r.error ? ': ' + r.error : '')};
        }
        if (lastTop) { // else the list has gone since (a poll refused): the next one shows it again
          renderTop(lastTop);
        }
      });
  }

  function renderTop(top, topErr) {
    var status = $('top-status'), lists = $('top-lists');
    clear(lists);
    lastTop = top;
    if (!top) {
      revealed = {};
      status.textContent = topErr === 404 ? 'top offenders: not available' :
        topErr === 401 ? 'top offenders: needs the admin API token' : 'top offenders: not available (' + topErr + ')';
      return;
    }
    var policies = top.policies || [];
    status.textContent = policies.length ? '' : 'no policy tracks its offenders';
    var shown = {};
    policies.forEach(function (p) {
      var name = p.policy;
      var hashed = p.keys !== 'raw';
      (p.rejected || []).concat(p.closest || []).forEach(function (r) { shown[name + '\n' + r.key] = true; });
      var head = el('p', {'class': 'note'}, [
        figure('top-total-rejected-' + name, fmtCount(p.total_rejected)), ' rejected in this window of ',
        figure('top-window-' + name, fmtCount(p.window_seconds), ' s'), ' and the one before; a count is over by at most ',
        figure('top-error-bound-' + name, fmtCount(p.error_bound)), '; keys ' + (p.keys || 'hashed') + '.'
      ]);
      var rejected = el('table', {'class': 'top'}, [
        el('caption', {}, ['most rejected']),
        el('thead', {}, [el('tr', {}, [el('th', {scope: 'col'}, ['key']), el('th', {scope: 'col', 'class': 'num'}, ['rejected']),
          el('th', {scope: 'col', 'class': 'num'}, ['±'])])]),
        el('tbody', {}, none(p.rejected, 3).concat((p.rejected || []).map(function (r, i) {
          return el('tr', {}, [
            keyCell(name, 'rejected', i, r.key, hashed),
            numCell('top-rejected-count-' + name + '-' + i, fmtCount(r.count)),
            numCell('top-rejected-error-' + name + '-' + i, fmtCount(r.error))
          ]);
        })))
      ]);
      var closest = el('table', {'class': 'top'}, [
        el('caption', {}, ['closest to the limit']),
        el('thead', {}, [el('tr', {}, [el('th', {scope: 'col'}, ['key']), el('th', {scope: 'col', 'class': 'num'}, ['used'])])]),
        el('tbody', {}, none(p.closest, 2).concat((p.closest || []).map(function (r, i) {
          return el('tr', {}, [
            keyCell(name, 'closest', i, r.key, hashed),
            numCell('top-closest-used-' + name + '-' + i, isFinite(r.used) ? (r.used * 100).toFixed(1) : DASH, ' %')
          ]);
        })))
      ]);
      lists.appendChild(el('div', {'class': 'top-policy'}, [el('h3', {}, [name]), head, el('div', {'class': 'pair'}, [rejected, closest])]));
    });
    // What was revealed of keys no longer listed is forgotten.
    Object.keys(revealed).forEach(function (k) {
      if (!shown[k]) {
        delete revealed[k];
      }
    });
  }

  // ---- polling ----

  // get fetches a path of this listener, relative to the page, with the
  // token on /api/ paths only. It resolves to {status, body, error,
  // received, wall} (error: an API error's message) and rejects only when
  // the listener cannot be reached.
  function get(path, api, as) {
    var ctl = new AbortController();
    var t = setTimeout(function () { ctl.abort(); }, TIMEOUT_MS);
    var headers = {};
    if (api && token) {
      headers.Authorization = 'Bearer ' + token;
    }
    return fetch(path, {headers: headers, cache: 'no-store', credentials: 'omit', signal: ctl.signal})
      .then(function (resp) {
        var received = performance.now(), wall = Date.now();
        if (!resp.ok) {
          if (api && /json/.test(resp.headers.get('Content-Type') || '')) {
            return resp.json().then(function (b) {
              return {status: resp.status, body: null, error: b && b.error, received: received, wall: wall};
            }, function () {
              return {status: resp.status, body: null, received: received, wall: wall};
            });
          }
          resp.body && resp.body.cancel();
          return {status: resp.status, body: null, received: received, wall: wall};
        }
        return (as === 'json' ? resp.json() : resp.text()).then(function (body) {
          return {status: resp.status, body: body, received: received, wall: wall};
        });
      })
      .finally(function () { clearTimeout(t); });
  }

  function settled(p) {
    return p.then(function (r) { return r; }, function (e) { return {status: 0, error: e && e.message}; });
  }

  function showTokenForm(refused) {
    var form = $('token-form');
    form.hidden = false;
    if (refused) {
      setText('token-note', 'The admin API refused this token. It is kept in this tab only.');
    }
  }

  // historyNote says where the charts' points come from.
  function historyNote() {
    var text = {
      have: 'The points before this page opened came from the server\'s history (/api/v1/history).',
      denied: 'Without the admin API token the charts start when the page opens.',
      none: 'This limitproxy keeps no history: the charts start when the page opens.'
    }[historyState] || '';
    setText('history-note', text);
  }

  function poll() {
    if (busy) {
      return;
    }
    busy = true;
    clearTimeout(timer);
    // A page that missed points (a tab in the background is polled once
    // a minute; the listener was unreachable) asks for the history again.
    if (historyState === 'have' && store.n && Date.now() - lastTime() > GAP_MS) {
      historyState = 'want';
    }
    var wantHistory = historyState === 'want';
    // The metrics first, then the API: what the API shows is at least as
    // recent as the figures.
    var metricsDone = settled(get('metrics', false, 'text'));
    var api = function (path) {
      return metricsDone.then(function () { return settled(get(path, true, 'json')); });
    };
    Promise.all([
      metricsDone,
      api('api/v1/config'),
      api('api/v1/top?n=' + TOP_N),
      wantHistory ? api('api/v1/history') : Promise.resolve(null)
    ]).then(function (rs) {
      var metrics = rs[0], config = rs[1], top = rs[2], hist = rs[3];
      if (metrics.status !== 200) {
        throw new Error(metrics.status ? 'metrics: HTTP ' + metrics.status : 'cannot reach the admin listener');
      }
      var m = new Metrics(parseMetrics(metrics.body), metrics.received, metrics.wall, prev);
      var cfg = config.status === 200 ? config.body : null;
      if (config.status === 401 || top.status === 401) {
        showTokenForm(token !== '');
      }
      var policies = policyNames(m, cfg), upstreams = upstreamNames(m, cfg);
      if (hist) {
        if (hist.status === 200 && hist.body) {
          seed(hist.body, hist.wall, {policies: policies, upstreams: upstreams});
          historyState = 'have';
        } else {
          historyState = hist.status === 401 ? 'denied' : hist.status === 0 ? 'want' : 'none';
        }
      }
      // This poll's point, unless its interval overlaps points already
      // held (the history's, just merged).
      if (m.before && m.before.wall >= lastTime() - INTERVAL_MS / 4) {
        addPoint(m.wall, point(m, policies, upstreams));
      }
      renderPolicyCharts(policies, m.wall, cfg);
      renderUpstreamCharts(upstreams, m.wall);
      renderPolicies(m, policies);
      renderUpstreams(m, upstreams);
      renderReload(m, cfg, config.status || 'unreachable');
      renderTop(top.status === 200 ? top.body : null, top.status || 'unreachable');
      historyNote();
      prev = {t: m.t, wall: m.wall, byId: m.byId};
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
    if (historyState === 'denied') {
      historyState = 'want';
    }
    revealed = {};
    poll();
  });
  // A tab brought back to the front polls at once (and fills what it
  // missed from the history).
  document.addEventListener('visibilitychange', function () {
    if (!document.hidden) {
      poll();
    }
  });
  var resizing = 0;
  window.addEventListener('resize', function () {
    clearTimeout(resizing);
    resizing = setTimeout(redrawAll, 100);
  });
  setText('instance', location.host);
  poll();
})();
