// lsd-dask report: the parcels on an interactive cortex (plotly.js mesh3d), their scores on
// hover, a per-parcel table linked both ways with the surface, and the scores against K.
// Reads the JSON payload in #lsd-viewer-data (written by lsd_dask.pipeline.products.viewer).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("lsd-viewer-data").textContent);
  var el = function (id) { return document.getElementById(id); };
  var state = { method: null, k: null, split: null, selected: null, view: "lateral", subject: null };
  var mesh = [];        // per hemisphere: {n, offset, x, y, z, i, j, k}
  var labelsOf = {};    // "method|k|split" -> Uint16Array over every vertex
  var own = [];         // per participant map: {labels: Uint16Array, confidence: Float32Array}
  var viewer = window.lsdViewer = { ready: false, state: state, data: data };

  async function unpack(b64, Type) {
    var bin = Uint8Array.from(atob(b64), function (c) { return c.charCodeAt(0); });
    var stream = new Blob([bin]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Type(await new Response(stream).arrayBuffer());
  }

  function key(method, k, split) { return method + "|" + k + "|" + split; }

  function table(method, k, split) {
    return ((data.parcels[method] || {})[String(k)] || {})[split] || null;
  }

  function rowOf(t, id) {
    if (!t) return -1;
    return t.ids.indexOf(id);
  }

  function fmt(v, digits) {
    return v === null || v === undefined ? "n/a" : Number(v).toFixed(digits === undefined ? 3 : digits);
  }

  function scoreRow(method, k) {
    for (var i = 0; i < data.scores.length; i++) {
      var r = data.scores[i];
      if (r.method === method && r.k === k) return r;
    }
    return null;
  }

  // the split whose parcels are drawn (the first split's where the splits disagree)
  function shownSplit() {
    return state.split === "disagreement" ? data.splits[0] : state.split;
  }

  function otherSplit(split) {
    var s = data.splits;
    return s[(s.indexOf(split) + 1) % s.length];
  }

  // the colour of every vertex of one hemisphere in the current view
  function vertexColours(h) {
    var m = mesh[h], out = new Array(m.n);
    var colours = data.colours[state.method + "|" + state.k];
    if (state.subject !== null) {
      var mine = own[state.subject].labels, theirs = data.colours[data.participants[state.subject].colours];
      for (var u = 0; u < m.n; u++) {
        var pid = mine[m.offset + u];
        out[u] = pid === 0 ? data.background : theirs[pid];
      }
      return out;
    }
    if (state.split === "disagreement") {
      var a = labelsOf[key(state.method, state.k, data.splits[0])];
      var b = labelsOf[key(state.method, state.k, data.splits[1])];
      for (var v = 0; v < m.n; v++) {
        var g = m.offset + v;
        out[v] = a[g] === 0 ? data.background : (a[g] === b[g] ? "#dddddd" : "#d62728");
      }
      return out;
    }
    var lab = labelsOf[key(state.method, state.k, state.split)];
    for (var w = 0; w < m.n; w++) {
      var id = lab[m.offset + w];
      var c = id === 0 ? data.background : colours[id];
      if (state.selected !== null && id !== state.selected && id !== 0) c = fade(c);
      out[w] = c;
    }
    return out;
  }

  function fade(hex) {
    var n = parseInt(hex.slice(1), 16), r = (n >> 16) & 255, g = (n >> 8) & 255, b = n & 255;
    var f = function (x) { return Math.round(x + (255 - x) * 0.75); };
    return "rgb(" + f(r) + "," + f(g) + "," + f(b) + ")";
  }

  function hoverTexts(h) {
    var m = mesh[h], out = new Array(m.n);
    var lab = viewer.labels();
    for (var v = 0; v < m.n; v++) {
      var id = lab[m.offset + v];
      out[v] = id === 0 ? "not scored (masked)" : "parcel" + String(id).padStart(4, "0");
    }
    return out;
  }

  function draw() {
    var gd = el("lsd-cortex");
    var update = { vertexcolor: [vertexColours(0), vertexColours(1)],
                   text: [hoverTexts(0), hoverTexts(1)] };
    return Plotly.restyle(gd, update, [0, 1]).then(function () {
      drawTable();
      drawScores();
      el("lsd-caption").textContent = caption();
    });
  }

  function caption() {
    if (state.subject !== null) {
      var p = data.participants[state.subject];
      return "sub-" + p.participant + "'s own parcels from " + priorName(p);
    }
    if (state.split === "disagreement") {
      return state.method + ", K = " + state.k + ": vertices whose parcel differs between " +
        data.splits.join(" and ") + " (red), after matching the parcels' ids";
    }
    return state.method + ", K = " + state.k + ", " + state.split + "'s parcels";
  }

  // the hovered vertex: its parcel, size, held-out scores, Dice, and the parcellation's z
  function priorName(p) { return p.prior; }

  // a participant's vertex: its own parcel, its confidence, the prior's parcel there, and
  // the participant's scores on held-out halves beside the prior's
  function describeOwn(vertex) {
    var p = data.participants[state.subject], id = own[state.subject].labels[vertex];
    var info = el("lsd-hover");
    info.dataset.vertex = String(vertex);
    info.dataset.parcel = String(id);
    if (id === 0) { info.textContent = "Vertex " + vertex + ": masked, in no parcel."; return; }
    var lines = ["Vertex " + vertex + ": parcel" + String(id).padStart(4, "0") + " (id " + id +
      ") in sub-" + p.participant + "'s own parcels from " + priorName(p),
      "confidence " + fmt(own[state.subject].confidence[vertex], 4)];
    if (p.prior_method !== null) {
      var prior = labelsOf[key(p.prior_method, p.k, otherSplit(p.split))];
      if (prior) lines.push("the prior puts it in parcel " + prior[vertex] + (prior[vertex] === id ? " (the same)" : " (moved)"));
    }
    lines.push("sub-" + p.participant + " on held-out halves of its own data: homogeneity " +
      fmt(p.own.homogeneity) + " (the prior's " + fmt(p.group.homogeneity) + "), DCBC " +
      fmt(p.own.dcbc) + " (the prior's " + fmt(p.group.dcbc) + "); within-subject Dice " +
      fmt(p.within_dice) + "; " + fmt(100 * p.moved, 1) + " % of vertices moved from the prior");
    info.textContent = lines.join("\n");
  }

  function describe(vertex) {
    if (state.subject !== null) { describeOwn(vertex); return; }
    var split = shownSplit();
    var id = labelsOf[key(state.method, state.k, split)][vertex];
    var info = el("lsd-hover");
    info.dataset.vertex = String(vertex);
    info.dataset.parcel = String(id);
    if (id === 0) { info.textContent = "Vertex " + vertex + ": masked, in no parcel."; return; }
    var t = table(state.method, state.k, split), r = rowOf(t, id), s = scoreRow(state.method, state.k);
    var other = otherSplit(split);
    var lines = ["Vertex " + vertex + ": " + "parcel" + String(id).padStart(4, "0") + " (id " + id + ", " + split + ")"];
    if (r >= 0) {
      lines.push(t.sizes[r] + " vertices; on " + other + "'s data: held-out homogeneity " +
        fmt(t.homogeneity[r]) + ", DCBC " + fmt(t.dcbc[r]) + "; Dice with " + other +
        "'s parcel " + id + ": " + fmt(t.dice[r]));
    }
    if (s) {
      lines.push("The whole parcellation: held-out homogeneity " + fmt(s.heldout_homogeneity) +
        " (spin-null z " + fmt(s.heldout_homogeneity_z, 1) + "), DCBC " + fmt(s.heldout_dcbc) +
        " (z " + fmt(s.heldout_dcbc_z, 1) + ")");
    }
    if (state.split === "disagreement") {
      var b = labelsOf[key(state.method, state.k, data.splits[1])][vertex];
      lines.push(data.splits[1] + " puts it in parcel " + b + (b === id ? " (the same)" : " (a different one)"));
    }
    info.textContent = lines.join("\n");
  }

  function drawTable() {
    var split = shownSplit();
    var t = table(state.method, state.k, split), body = el("lsd-parcels").tBodies[0];
    body.innerHTML = "";
    if (!t || state.subject !== null) return;  // a participant's parcels: no table of their own
    var colours = data.colours[state.method + "|" + state.k];
    t.ids.forEach(function (id, r) {
      var tr = document.createElement("tr");
      tr.dataset.parcel = String(id);
      var sw = "<span style='display:inline-block;width:0.9em;height:0.9em;background:" + colours[id] + "'></span> ";
      tr.innerHTML = "<td class='l'>" + sw + t.names[r] + "</td><td>" + id + "</td><td>" + t.sizes[r] +
        "</td><td>" + fmt(t.homogeneity[r]) + "</td><td>" + fmt(t.dcbc[r]) + "</td><td>" + fmt(t.dice[r]) + "</td>";
      if (id === state.selected) tr.className = "sel";
      tr.addEventListener("click", function () { select(id === state.selected ? null : id, false); });
      body.appendChild(tr);
    });
  }

  function select(id, scroll) {
    state.selected = id;
    draw().then(function () {
      if (id === null || !scroll) return;
      // the table's own box scrolls to the row; the page stays where it is
      var row = el("lsd-parcels").querySelector("tr[data-parcel='" + id + "']");
      var box = el("lsd-parcels").parentElement;
      if (row) box.scrollTop = row.offsetTop - box.clientHeight / 2;
    });
  }

  // the scores against K, with the split-half nulls as bands, the current K marked
  function drawScores() {
    var metric = el("lsd-metric").value, traces = [], shapes = [];
    data.methods.forEach(function (method, n) {
      var rows = data.scores.filter(function (r) { return r.method === method; })
        .sort(function (a, b) { return a.k - b.k; });
      var ks = rows.map(function (r) { return r.k; });
      var colour = data.palette[n % data.palette.length];
      var nulls = [["null_", "region-size null"], ["spin_null_", "spin null"]];
      if (metric === "dice" || metric === "nmi") {
        nulls.forEach(function (nl, j) {
          var mean = rows.map(function (r) { return r[nl[0] + metric + "_mean"]; });
          var sd = rows.map(function (r) { return r[nl[0] + metric + "_sd"]; });
          if (mean.some(function (v) { return v === null || v === undefined; })) return;
          // each method's nulls in its own colour, lighter for the region-size null
          var fill = rgba(colour, j === 0 ? 0.12 : 0.25);
          traces.push({ x: ks, y: mean.map(function (m, i) { return m + 2 * sd[i]; }), mode: "lines",
            line: { width: 0 }, showlegend: false, hoverinfo: "skip" });
          traces.push({ x: ks, y: mean.map(function (m, i) { return m - 2 * sd[i]; }), mode: "lines",
            line: { width: 0 }, fill: "tonexty", fillcolor: fill, showlegend: n === 0,
            name: nl[1] + " (mean ± 2 sd)", hovertemplate: method + ", " + nl[1] + "<extra></extra>" });
        });
      }
      traces.push({ x: ks, y: rows.map(function (r) { return r[metric]; }), mode: "lines+markers",
        name: method, line: { color: colour }, marker: { size: 9 },
        customdata: rows.map(function (r) { return r[metric + "_z"] === undefined ? null : r[metric + "_z"]; }),
        hovertemplate: method + ", K = %{x}: %{y:.3f}<extra></extra>" });
    });
    shapes.push({ type: "line", xref: "x", yref: "paper", x0: state.k, x1: state.k, y0: 0, y1: 1,
      line: { color: "#444", dash: "dot" } });
    return Plotly.react(el("lsd-scores"), traces, {
      margin: { l: 50, r: 10, t: 10, b: 40 }, height: 340, shapes: shapes,
      xaxis: { title: { text: "K" }, type: "log", tickvals: data.ks }, yaxis: { title: { text: metric } },
      legend: { orientation: "h", y: -0.3 }
    }, { displaylogo: false, responsive: true });
  }

  function rgba(hex, alpha) {
    var n = parseInt(hex.slice(1), 16);
    return "rgba(" + ((n >> 16) & 255) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + alpha + ")";
  }

  function setCamera(view) {
    state.view = view;
    var side = view === "lateral" ? 1 : -1;
    return Plotly.relayout(el("lsd-cortex"), {
      "scene.camera": { eye: { x: -1.8 * side, y: 0, z: 0.1 }, up: { x: 0, y: 0, z: 1 } },
      "scene2.camera": { eye: { x: 1.8 * side, y: 0, z: 0.1 }, up: { x: 0, y: 0, z: 1 } }
    });
  }

  function choices(select, values, current) {
    select.innerHTML = "";
    values.forEach(function (v) {
      var o = document.createElement("option");
      o.value = String(v[0]); o.textContent = v[1];
      if (String(v[0]) === String(current)) o.selected = true;
      select.appendChild(o);
    });
  }

  // for scripts and tests: the labels shown (the first split's where they disagree), and
  // the colour of every vertex of hemisphere h as drawn
  viewer.labels = function () {
    if (state.subject !== null) return own[state.subject].labels;
    var split = shownSplit();
    return labelsOf[key(state.method, state.k, split)];
  };
  viewer.colours = vertexColours;

  async function start() {
    for (var h = 0; h < data.hemispheres.length; h++) {
      var hemi = data.hemispheres[h];
      var xyz = await unpack(hemi.vertices, Float32Array);
      var faces = await unpack(hemi.faces, Uint32Array);
      var n = xyz.length / 3, x = new Float32Array(n), y = new Float32Array(n), z = new Float32Array(n);
      for (var v = 0; v < n; v++) { x[v] = xyz[3 * v]; y[v] = xyz[3 * v + 1]; z[v] = xyz[3 * v + 2]; }
      var f = faces.length / 3, i = new Uint32Array(f), j = new Uint32Array(f), kk = new Uint32Array(f);
      for (var t = 0; t < f; t++) { i[t] = faces[3 * t]; j[t] = faces[3 * t + 1]; kk[t] = faces[3 * t + 2]; }
      mesh.push({ n: n, offset: hemi.offset, x: x, y: y, z: z, i: i, j: j, k: kk });
    }
    for (var s = 0; s < data.views.length; s++) {
      var view = data.views[s];
      labelsOf[key(view.method, view.k, view.split)] = await unpack(view.labels, Uint16Array);
    }
    for (var q = 0; q < data.participants.length; q++) {
      var entry = data.participants[q], raw = await unpack(entry.confidence, Uint16Array);
      var conf = new Float32Array(raw.length);
      for (var c = 0; c < raw.length; c++) conf[c] = raw[c] / 65535 * entry.confidence_max;
      own.push({ labels: await unpack(entry.labels, Uint16Array), confidence: conf });
    }
    state.method = data.methods[0];
    state.k = data.ks[Math.floor(data.ks.length / 2)];
    state.split = data.splits[0];
    choices(el("lsd-method"), data.methods.map(function (m) { return [m, m]; }), state.method);
    choices(el("lsd-k"), data.ks.map(function (k) { return [k, "K = " + k]; }), state.k);
    var splitChoices = data.splits.map(function (s) { return [s, s]; });
    splitChoices.push(["disagreement", "where the splits disagree"]);
    choices(el("lsd-split"), splitChoices, state.split);
    choices(el("lsd-metric"), data.metrics, "dice");
    var subjects = [["", data.participants.length ? "the group's parcels" : "no participant's own parcels"]];
    data.participants.forEach(function (p, q) {
      subjects.push([String(q), "sub-" + p.participant + "'s own, from " + priorName(p)]);
    });
    choices(el("lsd-subject"), subjects, "");
    el("lsd-subject").disabled = data.participants.length === 0;
    var shown = new Set(data.participants.map(function (p) { return p.participant; })).size;
    if (data.participants_total > shown) {
      el("lsd-subject").title = "the run's first " + shown + " of its " + data.participants_total +
        " participants (their files hold every participant's)";
    }
    el("lsd-method").addEventListener("change", function (e) { state.method = e.target.value; state.selected = null; draw(); });
    el("lsd-k").addEventListener("change", function (e) { state.k = Number(e.target.value); state.selected = null; draw(); });
    el("lsd-split").addEventListener("change", function (e) { state.split = e.target.value; state.selected = null; draw(); });
    el("lsd-metric").addEventListener("change", function () { drawScores(); });
    el("lsd-subject").addEventListener("change", function (e) {
      state.subject = e.target.value === "" ? null : Number(e.target.value);
      state.selected = null;
      ["lsd-method", "lsd-k", "lsd-split"].forEach(function (id) { el(id).disabled = state.subject !== null; });
      draw();
    });
    el("lsd-lateral").addEventListener("click", function () { setCamera("lateral"); });
    el("lsd-medial").addEventListener("click", function () { setCamera("medial"); });
    var axis = { visible: false };
    var scene = function (x0, x1) {
      return { domain: { x: [x0, x1], y: [0, 1] }, xaxis: axis, yaxis: axis, zaxis: axis,
               aspectmode: "data", dragmode: "orbit" };
    };
    var traces = mesh.map(function (m, h) {
      return { type: "mesh3d", x: m.x, y: m.y, z: m.z, i: m.i, j: m.j, k: m.k,
               scene: h === 0 ? "scene" : "scene2", hoverinfo: "text", flatshading: false,
               lighting: { ambient: 0.6, diffuse: 0.6, specular: 0.05 }, name: data.hemispheres[h].name };
    });
    var gd = el("lsd-cortex");
    await Plotly.newPlot(gd, traces, {
      margin: { l: 0, r: 0, t: 0, b: 0 }, height: 420, showlegend: false,
      scene: scene(0, 0.5), scene2: scene(0.5, 1)
    }, { displaylogo: false, responsive: true });
    gd.on("plotly_hover", function (e) {
      var p = e.points[0];
      describe(mesh[p.curveNumber].offset + p.pointNumber);
    });
    gd.on("plotly_click", function (e) {
      var p = e.points[0];
      if (state.subject !== null) return;
      var id = viewer.labels()[mesh[p.curveNumber].offset + p.pointNumber];
      // after plotly's own click handling: restyling inside it re-enters it
      if (id !== 0) setTimeout(function () { select(id, true); }, 0);
    });
    await setCamera("lateral");
    await draw();
    el("lsd-scores").on("plotly_click", function (e) {
      var k = e.points[0].x;
      if (data.ks.indexOf(k) < 0) return;
      state.k = k; state.selected = null; el("lsd-k").value = String(k);
      setTimeout(draw, 0);
    });
    viewer.ready = true;
  }

  viewer.started = start().catch(function (err) {
    el("lsd-hover").textContent = "The interactive view could not start: " + err;
    throw err;
  });
})();
