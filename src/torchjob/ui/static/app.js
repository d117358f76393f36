// torchjob's dashboard. No framework and no build step: the DOM is built with createElement and
// every value from a job (names, metrics, events, logs) goes in as text, never as markup.
"use strict";
(function () {
  const TOKEN = new URLSearchParams(location.search).get("token") || "";
  const main = document.getElementById("main");
  const live = document.getElementById("live");
  const STATES = ["Running", "Pending", "Created", "Restarting", "Suspended", "Succeeded", "Failed"];
  const ui = { jobs: [], where: null, filter: { state: "", name: "" }, charts: {}, yLabels: {}, firstPaint: null,
               job: null, log: { key: "", text: "", follow: true, search: "" } };
  window.tj = ui; // for the tests (and the curious): what the page holds and drew

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "style") e.setAttribute("style", v);
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      e.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return e;
  }
  const q = (path, params) => {
    const u = new URL(path, location.href);
    u.search = new URLSearchParams({ ...(params || {}), token: TOKEN }).toString();
    return u.toString();
  };
  async function api(path, opts, params) {
    const r = await fetch(q(path, params), { ...(opts || {}), headers: { "X-Torchjob-Token": TOKEN } });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
    return body;
  }
  const nsOf = (j) => j.namespace || "-";
  // On a cluster a TorchJob and a TrainJob may share a name: every link, stream and call names the
  // kind as `KIND/NAME` does (`torchjob`, `trainjob`, ...). Locally every job is a TorchJob: none.
  const onCluster = () => Boolean(ui.where && !ui.where.local);
  const kindOf = (j) => (onCluster() ? (j.kind || "TorchJob").toLowerCase() : null);
  const kindParams = (j) => { const k = kindOf(j); return k ? { kind: k } : {}; };
  const jobHash = (j) => "#/job/" + encodeURIComponent(nsOf(j)) + "/" +
    (kindOf(j) ? encodeURIComponent(kindOf(j)) + "/" : "") + encodeURIComponent(j.name);
  const jobPath = (j) => "api/jobs/" + encodeURIComponent(nsOf(j)) + "/" + encodeURIComponent(j.name);

  function duration(s) {
    if (s === null || s === undefined) return "-";
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
    return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
  }
  const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "-");
  const stateBadge = (s) => el("span", { class: "state " + s, "data-testid": "state" }, s);
  // a bar coloured by the job's state (green: succeeded, red: failed, amber: suspended, blue: else)
  function bar(pct, eta, big, state) {
    const p = pct === null || pct === undefined ? null : Math.max(0, Math.min(100, pct));
    return el("span", { class: "progress" },
      el("span", { class: "bar" + (big ? " big" : "") + (state ? " " + state : ""), "data-testid": "bar" },
        el("i", { style: "width:" + (p || 0) + "%" })),
      el("span", { class: "pct", "data-testid": "percent" }, p === null ? "-" : (Math.round(p * 10) / 10) + "%"),
      eta !== null && eta !== undefined ? el("span", { class: "eta" }, "ETA " + duration(eta)) : null);
  }

  // --- live updates: one Server-Sent Events stream per page --------------------------------------
  // A listing comes as columns once and each job's values in their order (the server's PAGE_COLUMNS)
  function takeJobs(data) {
    const cols = data.cols;
    ui.jobs = data.rows.map((r) => { const j = {}; for (let i = 0; i < cols.length; i++) j[cols[i]] = r[i]; return j; });
    ui.where = data.where;
    showWhere();
  }
  // the listing the page came with (in the page itself), read once; the stream leaves it out
  const boot = document.getElementById("jobs-data");
  let have = "";
  if (boot) { takeJobs(JSON.parse(boot.textContent)); have = boot.dataset.digest; boot.remove(); }
  let source = null;
  function connect(jobKey, kind) {
    if (source) source.close();
    const params = jobKey ? { job: jobKey } : {};
    if (kind) params.kind = kind;
    if (have) { params.have = have; have = ""; }
    source = new EventSource(q("api/stream", params));
    source.onopen = () => { live.textContent = "live"; live.className = "on"; };
    source.onerror = () => { live.textContent = "reconnecting"; live.className = "off"; };
    source.addEventListener("jobs", (ev) => {
      takeJobs(JSON.parse(ev.data));
      if (!jobKey) renderJobs();
    });
    source.addEventListener("job", (ev) => {
      ui.job = JSON.parse(ev.data);
      // a page opened by a bare name (an old link) the server found one job of: its address and
      // stream name its kind from now on (a job of another kind of that name may come later)
      if (jobKey && !kind && kindOf(ui.job)) {
        history.replaceState(null, "", jobHash(ui.job));
        connect(jobKey, kindOf(ui.job));
      }
      renderJob();
    });
    source.addEventListener("problem", (ev) => showProblem(JSON.parse(ev.data).error));
  }
  function showWhere() {
    const w = ui.where || {};
    document.getElementById("where").textContent = w.local ? "this machine's jobs" :
      "cluster" + (w.context ? " " + w.context : "") + (w.namespace === "*" ? ", every namespace" :
        w.namespace ? ", namespace " + w.namespace : ", the context's namespace");
  }
  function showProblem(msg) {
    let box = document.getElementById("problem");
    if (!msg) { if (box) box.remove(); return; }
    if (!box) { box = el("div", { id: "problem", class: "error" }); main.prepend(box); }
    box.textContent = msg;
  }

  // --- the jobs page ------------------------------------------------------------------------------
  const NUMERIC = ["Replicas", "World", "Restarts", "Age"];
  const HEAD_TITLES = { Replicas: "replicas x processes per replica", World: "world size: every process of the job" };
  // replicas x processes per replica, as `-j` and `torchjob list` write it: "2x4"
  const shape = (j) => j.replicas + "x" + (j.procs || "1");
  const newestFirst = (a, b) => (b.created || 0) - (a.created || 0) || (a.name < b.name ? 1 : a.name > b.name ? -1 : 0);
  function jobsPage() {
    ui.job = null; ui.charts = {};
    main.replaceChildren(
      el("div", { class: "filters" },
        el("select", { id: "f-state", "aria-label": "state", onchange: (e) => { ui.filter.state = e.target.value; renderJobs(); } },
          el("option", { value: "" }, "every state"), STATES.map((s) => el("option", { value: s }, s))),
        el("input", { id: "f-name", placeholder: "filter by name", "aria-label": "name",
          oninput: (e) => { ui.filter.name = e.target.value; renderJobs(); } }),
        el("span", { class: "count", id: "count" })),
      el("table", { id: "jobs" },
        el("thead", {}, el("tr", {}, ["Name", "Namespace", "State", "Progress", "Replicas", "World", "Restarts",
          "Age", "Reason"].map((h) => el("th", { class: "col-" + h.toLowerCase() + (NUMERIC.includes(h) ? " num" : ""),
            title: HEAD_TITLES[h] || null }, h)))),
        el("tbody", { id: "rows" })));
    document.getElementById("f-state").value = ui.filter.state;
    document.getElementById("f-name").value = ui.filter.name;
    if (ui.where) renderJobs(); // the listing the page came with: the first screen drawn before the first paint
    connect(null);
  }
  // Only the rows in view (and OVERSCAN either side) are in the table: a thousand jobs cost the page
  // what a screenful does. Every row is ROW px high, so where each row goes is arithmetic: the body is
  // as tall as every row together and its top padding stands for the rows above the ones drawn.
  const ROW = 32, OVERSCAN = 10;
  const win = { shown: [], kube: false, from: -1, to: -1, pool: [], proto: null };
  function rowProto(kube) {
    return el("tr", {}, el("td", {}, el("a")), kube ? el("td") : null, el("td", {}, el("span", { "data-testid": "state" })),
      el("td", {}, el("span", { class: "progress" }, el("span", { "data-testid": "bar" }, el("i")),
        el("span", { class: "pct", "data-testid": "percent" }))),
      el("td", { class: "num", "data-testid": "replicas" }), el("td", { class: "num", "data-testid": "world" }),
      el("td", { class: "num" }), el("td", { class: "num" }), el("td"));
  }
  function fillRow(tr, j, kube, now) {
    const c = tr.children;
    let k = 0;
    tr.dataset.job = j.name;
    tr.dataset.kind = j.kind || "";
    const a = c[k++].firstChild;
    a.href = jobHash(j); a.textContent = j.name;
    let tag = a.nextSibling;  // a kind served beside TorchJob (TrainJob, PyTorchJob, PyTorchTrainingJob)
    if (j.kind) {
      if (!tag) { tag = el("span", { class: "kind", "data-testid": "kind" }); a.after(tag); }
      tag.textContent = j.kind;
    } else if (tag) tag.remove();
    if (kube) c[k++].textContent = j.namespace;
    const st = c[k++].firstChild;
    st.className = "state " + j.state; st.textContent = j.state;
    const prog = c[k++].firstChild, p = j.percent === null || j.percent === undefined ? null : Math.max(0, Math.min(100, j.percent));
    const barEl = prog.firstChild, pct = barEl.nextSibling;
    barEl.className = "bar " + j.state;
    barEl.firstChild.style.width = (p || 0) + "%";
    pct.textContent = p === null ? "-" : (Math.round(p * 10) / 10) + "%";
    let eta = pct.nextSibling;
    if (j.state === "Running" && j.eta !== null && j.eta !== undefined) {
      if (!eta) { eta = el("span", { class: "eta" }); prog.appendChild(eta); }
      eta.textContent = "ETA " + duration(j.eta);
    } else if (eta) eta.remove();
    c[k++].textContent = shape(j);
    c[k++].textContent = j.world === null || j.world === undefined ? "-" : j.world;
    c[k++].textContent = j.restarts;
    c[k++].textContent = j.created ? duration(now - j.created) : "-";
    c[k++].textContent = j.reason || "";
    return tr;
  }
  function renderJobs() {
    const tbody = document.getElementById("rows");
    if (!tbody) return;
    const f = ui.filter, name = f.name.toLowerCase();
    win.shown = ui.jobs.filter((j) => (!f.state || j.state === f.state) && (!name || j.name.toLowerCase().includes(name)))
      .sort(newestFirst);
    const kube = Boolean(ui.where && !ui.where.local);
    if (kube !== win.kube) { win.kube = kube; win.pool = []; win.proto = null; tbody.replaceChildren(); }
    document.querySelectorAll(".col-namespace").forEach((c) => { c.hidden = !kube; });
    document.getElementById("jobs").classList.toggle("kube", kube);
    tbody.style.height = win.shown.length * ROW + "px";
    document.getElementById("count").textContent = win.shown.length + " of " + ui.jobs.length + " jobs";
    win.from = -1;
    drawWindow();
    if (ui.firstPaint === null) {
      // painted: the frame after the first screen's rows went in (measured from navigation start, in ms)
      requestAnimationFrame(() => setTimeout(() => { ui.firstPaint = performance.now(); }, 0));
    }
  }
  // the rows from the one above the window's top to the one below its bottom: one read of the layout
  // (where the body starts), then only writes
  function drawWindow() {
    const tbody = document.getElementById("rows");
    if (!tbody) return;
    const top = tbody.getBoundingClientRect().top;  // relative to the window
    const n = win.shown.length;
    const from = Math.max(0, Math.min(n, Math.floor(-top / ROW) - OVERSCAN));
    const to = Math.max(from, Math.min(n, Math.ceil((window.innerHeight - top) / ROW) + OVERSCAN));
    if (from === win.from && to === win.to) return;
    win.from = from; win.to = to;
    if (!win.proto) win.proto = rowProto(win.kube);
    while (win.pool.length < to - from) win.pool.push(win.proto.cloneNode(true));
    const now = Date.now() / 1000;
    const rows = [];
    for (let i = from; i < to; i++) rows.push(fillRow(win.pool[i - from], win.shown[i], win.kube, now));
    tbody.style.paddingTop = from * ROW + "px";
    // the pool's k-th row is always the k-th drawn, refilled: rows are only added or taken at the end
    while (tbody.children.length < rows.length) tbody.appendChild(rows[tbody.children.length]);
    while (tbody.children.length > rows.length) tbody.lastChild.remove();
  }
  let drawPending = false;
  function onView() {
    if (drawPending || !document.getElementById("rows")) return;
    drawPending = true;
    requestAnimationFrame(() => { drawPending = false; drawWindow(); });
  }
  window.addEventListener("scroll", onView, { passive: true });
  window.addEventListener("resize", onView);

  // --- the job page -------------------------------------------------------------------------------
  function jobPage(ns, kind, name) {
    ui.job = null; ui.charts = {}; ui.log = { key: "", text: "", follow: true, search: "" };
    main.replaceChildren(el("h1", {}, name), el("p", { class: "muted" }, "loading…"));
    if (!kind && onCluster()) {  // a bare name (an old link): the listing says which kinds hold it
      const same = ui.jobs.filter((j) => nsOf(j) === ns && j.name === name);
      if (same.length === 1) { history.replaceState(null, "", jobHash(same[0])); kind = kindOf(same[0]); }
      else if (same.length > 1) { choose(name, same); connect(null); return; }
    }
    connect(ns + "/" + name, kind);
  }
  // a bare name that jobs of several kinds hold: a link to each, none opened for the user
  function choose(name, same) {
    main.replaceChildren(el("h1", {}, name), el("div", { class: "error", id: "choose" },
      same.length + " jobs are named " + name + ": open one",
      el("ul", {}, same.map((j) => el("li", {}, el("a", { href: jobHash(j), "data-kind": kindOf(j) },
        (j.kind || "TorchJob") + " " + j.name))))));
  }
  function section(title, id, ...kids) { return el("section", { id }, el("h2", {}, title), ...kids); }
  function renderJob() {
    const j = ui.job;
    if (!j || !location.hash.startsWith("#/job/")) return;
    const root = document.getElementById("job-root");
    if (!root || root.dataset.name !== j.name || root.dataset.kind !== (j.kind || "")) buildJob(j);
    fillJob(j);
  }
  function buildJob(j) {
    main.replaceChildren(el("div", { id: "job-root", "data-name": j.name, "data-kind": j.kind || "" },
      el("h1", {}, el("span", { id: "job-name" }, j.name), el("span", { id: "job-kind", class: "kind" }, j.kind || ""),
        el("span", { id: "job-state" }),
        el("span", { class: "actions" },
          el("button", { id: "act-suspend", onclick: () => ask("suspend") }, "Suspend"),
          el("button", { id: "act-resume", onclick: () => ask("resume") }, "Resume"),
          el("button", { id: "act-delete", class: "danger", onclick: () => ask("delete") }, "Delete"))),
      el("div", { id: "confirm-box" }),
      section("Progress", "progress"),
      section("Metrics", "metrics", el("div", { class: "grid", id: "charts" })),
      section("Root cause", "root-cause"),
      section("Replica attempts", "attempts"),
      section("Conditions", "conditions"),
      section("Events", "events"),
      section("Stacks", "stacks-section", el("div", { class: "logbar" },
        el("button", { id: "take-stacks", onclick: takeStacks }, "Take stacks"),
        el("span", { class: "muted" }, " where every rank is now (torchjob stacks)")), el("pre", { id: "stacks" })),
      section("Logs", "logs", logBar(), el("pre", { id: "log" })),
      section("Spec", "spec"),
      section("Document", "document", el("pre", { id: "doc" }))));
    pollLog();
  }
  async function takeStacks() {
    const j = ui.job, pre = document.getElementById("stacks"), button = document.getElementById("take-stacks");
    button.disabled = true;
    pre.textContent = "taking stacks…";
    try {
      const out = await api(jobPath(j) + "/stacks", { method: "POST" }, kindParams(j));
      pre.textContent = out.text;
    } catch (e) { pre.textContent = String(e.message); }
    button.disabled = false;
  }
  function ask(verb) {
    const j = ui.job, box = document.getElementById("confirm-box");
    box.replaceChildren(el("div", { class: "confirm", "data-testid": "confirm" },
      el("span", {}, verb[0].toUpperCase() + verb.slice(1) + " " + (j.kind || "job") + " " + j.name + "?"),
      el("button", { class: verb === "delete" ? "danger" : "go", id: "confirm-yes", onclick: async () => {
        box.replaceChildren(el("span", { class: "muted" }, verb + "…"));
        try {
          await api(jobPath(j) + "/" + verb, { method: "POST" }, kindParams(j));
          box.replaceChildren(el("span", { class: "muted", "data-testid": "done" }, "asked to " + verb));
          if (verb === "delete") location.hash = "#/";
        } catch (e) { box.replaceChildren(el("div", { class: "error" }, String(e.message))); }
      } }, "Yes, " + verb),
      el("button", { onclick: () => box.replaceChildren() }, "Cancel")));
  }
  function kv(pairs) {
    return el("dl", { class: "kv" }, pairs.filter((p) => p[1] !== null && p[1] !== undefined && p[1] !== "")
      .flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  }
  function table(heads, rows, testid) {
    return el("table", { "data-testid": testid }, el("thead", {}, el("tr", {}, heads.map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
  }
  function fill(id, ...kids) { const s = document.getElementById(id); s.replaceChildren(s.firstChild, ...kids); }
  function fillJob(j) {
    document.getElementById("job-state").replaceChildren(stateBadge(j.state));
    const running = !["Succeeded", "Failed"].includes(j.state);
    document.getElementById("act-suspend").disabled = !running || j.suspended;
    document.getElementById("act-resume").disabled = !j.suspended;
    const p = j.progress || {};
    fill("progress", j.progress ? el("div", {}, bar(j.percent, j.state === "Running" ? j.eta : null, true, j.state), kv([
      ["step", p.step !== undefined ? p.step + (p.total ? " / " + p.total : "") : null],
      ["rate", p.rate ? (p.rate >= 1 ? p.rate.toPrecision(3) + " steps/s" : (1 / p.rate).toPrecision(3) + " s/step") : null],
      ["ETA", p.etaSeconds !== undefined && j.state === "Running" ? duration(p.etaSeconds) : null],
      ["metrics", (p.metrics || []).map((m) => m.name + "=" + m.value).join("  ")],
      ["last report", p.lastReportTime ? new Date(p.lastReportTime).toLocaleString() + (p.reporter ? " from " + p.reporter : "") : null],
      ["stragglers", (p.stragglers || []).map((s) => s.message).join("; ")],  // named by torchjob.progress.stragglers
    ])) : el("p", { class: "muted" }, "no progress reported (report it with torchjob.report)"));
    charts(j.history);
    // a job that has not failed has no root cause to show: no card
    const cause = document.getElementById("root-cause");
    cause.hidden = !j.rootCause;
    if (j.rootCause) fill("root-cause", el("pre", { "data-testid": "root-cause" }, j.rootCause)); else fill("root-cause");
    // a job of many replicas: counted by state, those not running listed (the API's ?replicas=all lists each)
    const counts = j.replicaCounts ? el("p", { "data-testid": "replica-counts" }, Object.values(j.replicaCounts).reduce((a, b) => a + b, 0)
      + " replicas: " + Object.entries(j.replicaCounts).map(([s, n]) => n + " " + s).join(", ")
      + (j.attempts.length ? "; those not running:" : "")) : null;
    fill("attempts", ...(counts ? [counts] : []), timeline(j), table(["Replica", "Attempt", "Started", "Ended", "Exit code", "Reason"],
      j.attempts.map((a) => [a.replica, a.attempt, when(a.started), when(a.ended),
        a.exit_code === null ? "-" : a.exit_code, (a.reason || "") + (a.waiting ? " (" + a.waiting + ")" : "")]), "attempts"));
    fill("conditions", table(["Type", "Status", "Reason", "Message", "Since"],
      j.conditions.map((c) => [c.type, c.status, c.reason || "", c.message || "", when(c.time)]), "conditions"));
    fill("events", table(["Time", "Type", "Reason", "Message"],
      j.events.map((e) => [when(e.time), e.type, e.reason, e.message]), "events"));
    fill("spec", kv([["processes per replica", j.procs], ["world size", j.world === null ? "decided on each node (" + j.procs + ")" : j.world]]),
      table(["Replica type", "Replicas", "Restart policy", "Image", "Command"],
      j.spec.map((s) => [s.type, s.replicas, s.restartPolicy || "-", s.image || "-", s.command.join(" ")]), "spec"),
      kv(Object.entries(j.runPolicy).map(([k, v]) => [k, typeof v === "object" ? JSON.stringify(v) : String(v)])));
    document.getElementById("doc").textContent = j.document;
    fillReplicas(j);
  }
  function timeline(j) {
    const as = j.attempts.filter((a) => a.started);
    if (!as.length) return el("p", { class: "muted" }, "no replica has started");
    const now = Date.now() / 1000;
    const t0 = Math.min(...as.map((a) => a.started));
    const t1 = Math.max(...as.map((a) => a.ended || now), t0 + 1);
    const replicas = [...new Set(as.map((a) => a.replica))];
    return el("div", { class: "timeline", "data-testid": "timeline" },
      replicas.map((r) => el("div", { class: "tl-row" }, el("span", { class: "tl-name" }, r),
        el("div", { class: "tl-track" }, as.filter((a) => a.replica === r).map((a) => {
          const cls = a.ended === null ? "run" : a.exit_code === 0 ? "ok" : a.exit_code === null ? "other" : "bad";
          const left = ((a.started - t0) / (t1 - t0)) * 100, width = (((a.ended || now) - a.started) / (t1 - t0)) * 100;
          return el("div", { class: "tl-seg " + cls, style: "left:" + left + "%;width:" + width + "%",
            title: r + " attempt " + a.attempt + ": " + when(a.started) + " - " + (a.ended ? when(a.ended) : "running") +
              (a.exit_code !== null ? ", exit " + a.exit_code : "") + (a.reason ? ", " + a.reason : "") });
        })))),
      el("div", { class: "tl-axis" }, el("span", {}, when(t0)), el("span", {}, duration(t1 - t0))));
  }

  // --- metric curves (uPlot) -----------------------------------------------------------------------
  // The y range: uPlot's own, except around a flat curve (a constant lr), which gets 10% either side
  // of its value instead of a sliver whose ticks all print the same.
  function yRange(u, lo, hi) {
    if (lo === null || hi === null) return [0, 1];
    if (hi - lo > Math.abs(hi) * 1e-9) return uPlot.rangeNum(lo, hi, 0.1, true);
    const pad = Math.abs(lo) * 0.1 || 1;
    return [lo - pad, hi + pad];
  }
  // Tick labels with as many significant digits as it takes to tell them apart (at most 12).
  function yLabels(name) {
    return (u, splits) => {
      let out = splits.map(String);
      for (let d = 1; d <= 12; d++) {
        out = splits.map((v) => (v === 0 ? "0" : String(Number(v.toPrecision(d)))));
        if (new Set(out).size === splits.length) break;
      }
      ui.yLabels[name] = out;
      return out;
    };
  }
  // uPlot is loaded with the first job page, not before: the jobs page paints without it
  let chartLib = null;
  function charts(h) {
    if (window.uPlot) { drawCharts(h); return; }
    if (!chartLib) {
      chartLib = new Promise((ok, bad) => {
        document.head.appendChild(el("link", { rel: "stylesheet", href: "static/uPlot.min.css" }));
        document.head.appendChild(el("script", { src: "static/uPlot.iife.min.js", onload: ok, onerror: bad }));
      });
    }
    chartLib.then(() => { if (ui.job && document.getElementById("charts")) drawCharts(ui.job.history); });
  }
  function showValue(box, name, value) {
    let values = document.getElementById("metric-values");
    if (!values) { values = el("dl", { class: "kv", id: "metric-values" }); box.parentNode.insertBefore(values, box); }
    const text = value === null ? "-" : String(Number(value.toPrecision(6)));
    const have = values.querySelector('[data-metric="' + CSS.escape(name) + '"]');
    if (have) { have.querySelector("dd").textContent = text; return; }
    values.appendChild(el("div", { "data-metric": name }, el("dt", {}, name), el("dd", {}, text)));
  }
  function drawCharts(h) {
    const box = document.getElementById("charts");
    if (!h) { if (!box.firstChild) box.appendChild(el("p", { class: "muted", id: "no-metrics" }, "no metrics reported")); return; }
    document.getElementById("no-metrics")?.remove();
    for (const s of h.series) {
      const xs = [], ys = [];
      h.steps.forEach((x, i) => { if (s.values[i] !== null) { xs.push(x); ys.push(s.values[i]); } });
      const data = [xs, ys];
      const have = ui.charts[s.name];
      // a constant, or a value reported once (a total, a run's summary): shown as its value, not charted
      if (new Set(ys).size <= 1 && !have) { showValue(box, s.name, ys.length ? ys[0] : null); continue; }
      document.querySelector('#metric-values [data-metric="' + CSS.escape(s.name) + '"]')?.remove();
      if (have) { have.setData(data); continue; }
      const holder = el("div", { class: "chart", "data-metric": s.name }, el("div", { class: "title" }, s.name));
      box.appendChild(holder);
      ui.charts[s.name] = new uPlot({ width: Math.max(280, holder.clientWidth - 14), height: 220,
        scales: { x: { time: false }, y: { range: yRange } },
        series: [{ label: "step" }, { label: s.name, stroke: s.name.toLowerCase().includes("loss") ? "#e5534b" : "#3056d3", width: 1.5,
          points: { show: xs.length <= 60 } }],
        axes: [{ label: "step" }, { values: yLabels(s.name), size: 60 }], legend: { show: true } }, data, holder);
    }
    if (h.omitted) box.setAttribute("title", h.omitted + " more metrics were reported but not kept");
  }

  // --- logs ---------------------------------------------------------------------------------------
  function logBar() {
    return el("div", { class: "logbar" },
      el("select", { id: "log-replica", "aria-label": "replica", onchange: () => { ui.log.key = ""; pollLog(true); } }),
      el("label", {}, el("input", { type: "checkbox", id: "log-follow", checked: true,
        onchange: (e) => { ui.log.follow = e.target.checked; } }), " follow"),
      el("input", { id: "log-search", placeholder: "search the log", oninput: (e) => { ui.log.search = e.target.value; showLog(); } }),
      el("span", { class: "count", id: "log-count" }));
  }
  function fillReplicas(j) {
    const sel = document.getElementById("log-replica");
    const opts = j.attempts.map((a) => a.replica + "/" + a.attempt);
    const have = [...sel.options].map((o) => o.value);
    if (opts.join() === have.join()) return;
    const keep = sel.value;
    sel.replaceChildren(...opts.map((o) => el("option", { value: o }, o.replace("/", " attempt "))));
    // the latest attempt of the first replica, unless one was picked
    sel.value = opts.includes(keep) ? keep : (opts.filter((o) => o.startsWith((j.attempts[0] || {}).replica + "/")).pop() || "");
    if (sel.value !== keep) pollLog(true);
  }
  let logTimer = null;
  async function pollLog(now) {
    clearTimeout(logTimer);
    const j = ui.job, sel = document.getElementById("log-replica");
    if (!sel) return;
    if (j && sel.value && (now || ui.log.follow || !ui.log.text)) {
      const [replica, attempt] = sel.value.split("/");
      try {
        const out = await api(jobPath(j) + "/log", {}, { replica, attempt, ...kindParams(j) });
        if (out.text !== ui.log.text || sel.value !== ui.log.key) { ui.log.text = out.text; ui.log.key = sel.value; showLog(true); }
      } catch (e) {
        ui.log.text = "";
        const pre = document.getElementById("log");
        if (pre) pre.textContent = String(e.message);
      }
    }
    if (document.getElementById("log")) logTimer = setTimeout(pollLog, 1000);
  }
  function showLog(fresh) {
    const pre = document.getElementById("log");
    if (!pre) return;
    const lines = ui.log.text.split("\n");
    if (lines.length && lines[lines.length - 1] === "") lines.pop();
    const needle = ui.log.search;
    const frag = document.createDocumentFragment();
    let hits = 0;
    for (const line of lines) {
      if (needle && !line.toLowerCase().includes(needle.toLowerCase())) continue;
      hits++;
      const div = el("div", { class: "line" });
      if (needle) {
        const low = line.toLowerCase(), n = needle.toLowerCase();
        let at = 0, i;
        while ((i = low.indexOf(n, at)) !== -1) {
          div.appendChild(document.createTextNode(line.slice(at, i)));
          div.appendChild(el("mark", {}, line.slice(i, i + n.length)));
          at = i + n.length;
        }
        div.appendChild(document.createTextNode(line.slice(at)));
      } else div.textContent = line;
      frag.appendChild(div);
    }
    pre.replaceChildren(frag);
    document.getElementById("log-count").textContent = needle ? hits + " matching lines" : lines.length + " lines";
    if (fresh && ui.log.follow) pre.scrollTop = pre.scrollHeight;
  }

  // --- routes -------------------------------------------------------------------------------------
  function route() {
    // #/job/NS/NAME, or on a cluster #/job/NS/KIND/NAME (no job name has a "/")
    const m = location.hash.match(/^#\/job\/([^/]+)\/(?:([^/]+)\/)?([^/]+)$/);
    if (m) jobPage(decodeURIComponent(m[1]), m[2] ? decodeURIComponent(m[2]).toLowerCase() : null, decodeURIComponent(m[3]));
    else jobsPage();
  }
  window.addEventListener("hashchange", route);
  setInterval(() => { if (document.getElementById("rows")) renderJobs(); }, 15000); // the ages move on
  route();
})();
