// fairpod dashboard: a small page of our own over the JSON API (/api/v1). It polls the API every
// POLL_MS while open, so every page updates without a reload. Charts: plotly.js (served from the
// installed plotly package). The token stays in this browser's localStorage for this server (every tab of it
// is signed in; signing out in one signs out all) and goes out only as a bearer token to this server.
"use strict";

const POLL_MS = 2000;
const API = "/api/v1";
const NODE_ROWS = 500;  // nodes listed on the cluster page (the counts cover all)
const TEAM_LINES = 10;  // teams drawn one by one in a chart of the teams page (the others as one line)
const PAGES = ["cluster", "teams", "tasks", "events"];
// Okabe-Ito colours (colour-blind safe); every series also gets its own dash and marker so that the
// charts read in greyscale.
const COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"];
const DASHES = ["dash", "dot", "dashdot", "longdash", "longdashdot"];  // capacity and quota lines
const SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "cross", "star", "hexagon"];

const state = {
  token: localStorage.getItem("fairpod.token") || "",
  me: null,
  page: "cluster",
  lastEventId: null,
  events: [],
  timer: null,
  busy: false,
  lastOk: 0,
};

const $ = (sel) => document.querySelector(sel);

function esc(v) {
  return String(v ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}
function num(v, digits = 0) {
  if (v === null || v === undefined) return "–";
  return Number(v).toLocaleString("en-US", {maximumFractionDigits: digits, minimumFractionDigits: 0});
}
function pct(v) {
  return v === null || v === undefined ? "–" : `${Math.round(v * 100)} %`;
}
function dur(s) {
  if (s === null || s === undefined) return "–";
  s = Math.max(0, Math.round(s));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}
function eta(ts, now) {  // an estimated start (fairpod.server.accounting.eta), said to be one
  if (ts === null || ts === undefined) return "–";
  return ts <= now ? "≈ now" : `≈ in ${dur(ts - now)}`;
}
function clock(ts) {
  const d = new Date(ts * 1000);
  return d.toLocaleString("en-GB", {month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit"});
}
function stateTag(s) {
  return `<span class="state s-${esc(s)}">${esc(s)}</span>`;
}
function kpi(label, value, sub = "", id = "") {
  return `<div class="kpi"${id ? ` id="${id}"` : ""}><div class="label">${esc(label)}</div>` +
    `<div class="value">${esc(value)}</div><div class="sub">${esc(sub)}</div></div>`;
}
function rows(tbody, html, cols, empty) {
  tbody.innerHTML = html.length ? html.join("") : `<tr><td colspan="${cols}" class="empty">${esc(empty)}</td></tr>`;
}

class AuthError extends Error {}

// pool-2 before pool-10
const COLLATOR = new Intl.Collator(undefined, {numeric: true, sensitivity: "base"});
function naturalCompare(a, b) { return COLLATOR.compare(a, b); }

// a request sent now and awaited later: a failure is the awaiting code's to show, not an unhandled rejection meanwhile
function ahead(promise) {
  promise.catch(() => {});
  return promise;
}

async function api(path) {
  const r = await fetch(API + path, {headers: {Authorization: `Bearer ${state.token}`}});
  if (r.status === 401) throw new AuthError("the token is unknown or revoked");
  if (!r.ok) {
    let msg = r.statusText;
    try { msg = (await r.json()).detail || msg; } catch (e) { /* not JSON */ }
    throw new Error(`${msg} (HTTP ${r.status})`);
  }
  return r.json();
}

// -- sign in / out ------------------------------------------------------------------------------
function showLogin(msg) {
  clearInterval(state.timer);
  state.timer = null;
  state.me = null;
  $("#login").hidden = false;
  $("#nav").hidden = true;
  $("#who").hidden = true;
  for (const p of PAGES) $(`#page-${p}`).hidden = true;
  $("#login-error").textContent = msg || "";
  $("#token").focus();
}

async function signIn(token) {
  state.token = token;
  try {
    state.me = await api("/me");
  } catch (e) {
    localStorage.removeItem("fairpod.token");
    showLogin(e instanceof AuthError ? "That token is unknown or revoked." : `Cannot sign in: ${e.message}`);
    return;
  }
  localStorage.setItem("fairpod.token", token);
  $("#login").hidden = true;
  $("#nav").hidden = false;
  $("#who").hidden = false;
  const me = state.me;
  $("#cluster-name").textContent = `cluster ${me.cluster}`;
  $("#user").textContent = me.role === "member" ? `${me.name} (member of ${me.teams.join(", ")})` : `${me.name} (${me.role})`;
  fillSelect($("#f-team"), me.visible_teams);
  fillSelect($("#f-group"), me.instance_groups.map((g) => g.name));
  state.lastEventId = null;
  state.events = [];
  route();
  state.timer = setInterval(refresh, POLL_MS);
}

function fillSelect(sel, values) {
  const keep = sel.value;
  sel.innerHTML = `<option value="">all</option>` + values.map((v) => `<option>${esc(v)}</option>`).join("");
  sel.value = values.includes(keep) ? keep : "";
}

// -- routing and polling ------------------------------------------------------------------------
function route() {
  const want = (location.hash.replace(/^#\/?/, "") || "cluster").split("?")[0];
  state.page = PAGES.includes(want) ? want : "cluster";
  if (!state.me) return;  // signed out: the page is drawn once signed in, never under the sign-in card
  for (const p of PAGES) $(`#page-${p}`).hidden = p !== state.page;
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.page === state.page) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = `fairpod · ${state.page[0].toUpperCase()}${state.page.slice(1)}`;
  refresh();
}

async function refresh() {
  if (!state.me || state.busy) return;
  state.busy = true;
  try {
    // the events asked beside the page's own data, not before it (the events page draws from them)
    const events = ahead(pollEvents());
    if (state.page === "cluster") await drawCluster();
    else if (state.page === "teams") await drawTeams();
    else if (state.page === "tasks") await drawTasks();
    await events;
    if (state.page === "events") drawEvents();
    state.lastOk = Date.now();
    const live = $("#live");
    live.textContent = `live · updated ${new Date().toLocaleTimeString("en-GB")}`;
    live.classList.remove("stale");
  } catch (e) {
    if (e instanceof AuthError) {
      localStorage.removeItem("fairpod.token");
      showLogin("Your token is no longer valid; sign in again.");
    } else {
      const live = $("#live");
      live.textContent = `not updating: ${e.message}`;
      live.classList.add("stale");
    }
  } finally {
    state.busy = false;
  }
}

// -- charts -------------------------------------------------------------------------------------
function baseLayout(title, ytitle) {
  return {
    title: {text: title, font: {size: 14}, x: 0.02},
    margin: {l: 52, r: 12, t: 34, b: 70},
    xaxis: {type: "date", showgrid: true, gridcolor: "#eaeef2"},
    yaxis: {title: {text: ytitle}, rangemode: "tozero", gridcolor: "#eaeef2"},
    legend: {orientation: "h", y: -0.22, font: {size: 11}},
    font: {family: "system-ui, sans-serif", size: 12, color: "#1b1f24"},
    paper_bgcolor: "#fff", plot_bgcolor: "#fff", hovermode: "x unified",
  };
}
function line(name, xs, ys, i, opts = {}) {
  return {
    type: "scatter", mode: "lines+markers", name, x: xs, y: ys, connectgaps: false,
    line: {color: COLOURS[i % COLOURS.length], dash: opts.dash || "solid", width: opts.width || 2,
           shape: "hv"},
    marker: {symbol: SYMBOLS[i % SYMBOLS.length], size: opts.marker ?? 5, color: COLOURS[i % COLOURS.length]},
  };
}
function plot(el, traces, layout) {
  if (!window.Plotly) { el.textContent = "Loading the charting library…"; return; }
  // show the window from the first recorded figure on, so a young history does not sit in a corner
  let first = null, last = null;
  for (const t of traces) {
    t.y.forEach((y, i) => {
      if (y === null || y === undefined) return;
      if (first === null || t.x[i] < first) first = t.x[i];
      if (last === null || t.x[i] > last) last = t.x[i];
    });
  }
  if (first !== null && last > first) {
    const minSpan = 5 * 60 * 1000;  // at least 5 minutes, within the window
    const start = traces.length ? traces[0].x[0] : first;
    if (last - first < minSpan) first = new Date(Math.max(start.getTime(), last.getTime() - minSpan));
    layout.xaxis.range = [first, last];
  }
  Plotly.react(el, traces, layout, {displayModeBar: false, responsive: true});
}
// the history's buckets, then "now" as the last point
function series(hist, values, nowValue) {
  const xs = hist.times.map((t) => new Date(t * 1000));
  xs.push(new Date(hist.to * 1000));
  return [xs, [...values, nowValue]];
}

// -- pages --------------------------------------------------------------------------------------
async function drawCluster() {
  const win = $("#window-cluster").value;
  // both asked at once; the figures drawn when the history answers, the node table when the nodes do
  const nodesP = ahead(api(`/nodes?limit=${NODE_ROWS}&problems_first=true`));
  const hist = await api(`/usage/history?window=${win}&series=groups`);
  const g = hist.now.groups;
  const sum = (k) => g.reduce((a, x) => a + x[k], 0);
  const acc = sum("acc"), capAcc = sum("cap_acc");
  $("#cluster-kpis").innerHTML =
    kpi("Accelerators in use", `${num(acc)} / ${num(capAcc)}`, "all instance groups", "kpi-acc") +
    kpi("Utilisation", pct(capAcc ? acc / capAcc : null), "accelerators in use / all", "kpi-utilisation") +
    kpi("vCPU in use", `${num(sum("vcpu"))} / ${num(sum("cap_vcpu"))}`) +
    kpi("Memory in use", `${num(sum("memory_gib"))} / ${num(sum("cap_memory_gib"))} GiB`) +
    kpi("Nodes healthy", `${num(sum("healthy_nodes"))} / ${num(sum("nodes"))}`, "schedulable / all");
  rows($("#group-table tbody"), g.map((x) => `<tr data-group="${esc(x.name)}"><td>${esc(x.name)}</td>` +
    `<td>${esc(x.instance_type)}</td><td class="num">${num(x.healthy_nodes)} / ${num(x.nodes)}</td>` +
    `<td class="num">${num(x.acc)} / ${num(x.cap_acc)}</td><td class="num">${pct(x.cap_acc ? x.acc / x.cap_acc : null)}</td>` +
    `<td class="num">${num(x.vcpu, 1)} / ${num(x.cap_vcpu)}</td>` +
    `<td class="num">${num(x.memory_gib, 1)} / ${num(x.cap_memory_gib)}</td></tr>`), 7, "no instance groups");
  // the figures first: let the browser show them before the charts are drawn
  await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
  const charts = [["chart-acc", "acc", "cap_acc", "Accelerators in use", "accelerators"],
                  ["chart-vcpu", "vcpu", "cap_vcpu", "vCPU in use", "vCPU"],
                  ["chart-mem", "memory_gib", "cap_memory_gib", "Memory in use", "GiB"]];
  for (const [id, key, cap, title, unit] of charts) {
    const traces = [];
    hist.groups.forEach((h, i) => {
      const now = g.find((x) => x.name === h.name) || {};
      const [xs, ys0] = series(hist, h[key], now[key] ?? null);
      // accelerators are whole: a bucket's mean is drawn at the nearest whole level
      const ys = key === "acc" ? ys0.map((y) => (y === null || y === undefined ? y : Math.round(y))) : ys0;
      traces.push(line(`${h.name} in use`, xs, ys, i));
      const [cx, cy] = series(hist, h[cap], now[cap] ?? null);
      traces.push(line(`${h.name} capacity`, cx, cy, i, {dash: DASHES[i % DASHES.length], width: 1.5, marker: 0}));
    });
    const layout = baseLayout(title, unit);
    if (key === "acc") layout.yaxis.tickformat = "d";
    plot($(`#${id}`), traces, layout);
  }
  // a datacenter has thousands of nodes: the table shows the first NODE_ROWS (those with a problem first, then by
  // name); the instance groups above count them all
  const nodes = await nodesP;
  const nodePage = $("#node-page");
  nodePage.hidden = nodes.total <= nodes.nodes.length;
  nodePage.textContent = `The first ${num(nodes.nodes.length)} of ${num(nodes.total)} nodes: unhealthy and ` +
    "cordoned ones first, then by name (the instance groups above count all of them).";
  nodes.nodes.sort((a, b) => (a.schedulable - b.schedulable) || naturalCompare(a.name, b.name));
  rows($("#node-table tbody"), nodes.nodes.map((n) => `<tr><td>${esc(n.name)}</td><td>${esc(n.instance_group)}</td>` +
    `<td>${esc(n.instance_type)}</td><td>${n.health_status === "Schedulable" ? esc(n.health_status) : `<span class="bad">${esc(n.health_status)}</span>`}</td>` +
    `<td>${esc(n.deep_health_check || "–")}</td><td>${n.cordoned ? '<span class="tag">cordoned</span>' : "no"}</td>` +
    `<td class="num">${num(n.accelerators_free)} / ${num(n.accelerators)}</td><td>${esc(n.jobs.join(", ") || "–")}</td>` +
    `<td>${esc([n.fault_type, n.fault_reason].filter(Boolean).join(": ") || "–")}</td>` +
    `<td class="topology">${esc(Object.entries(n.topology || {}).map(([lv, d]) => `${lv} ${d}`).join(", ") || "–")}</td></tr>`),
    10, "no nodes");
}

async function drawTeams() {
  const win = $("#window-teams").value;
  // both asked at once; the tables drawn as soon as /cluster answers, the charts when the history does (at
  // datacenter size the teams' history is the slow one)
  const histP = ahead(api(`/usage/history?window=${win}`));
  const cluster = await api("/cluster");
  $("#team-kpis").innerHTML = Object.entries(cluster.capacity).map(([it, c]) =>
    kpi(`Utilisation of ${it}`, pct(c.utilization), `${num(c.in_use)} of ${num(c.accelerators)} accelerators in use`,
        `kpi-util-${it.replace(/[^a-z0-9]/gi, "-")}`)).join("");
  rows($("#team-table tbody"), cluster.teams.map((t) => {
    const from = Object.entries(t.borrowed_from || {}).map(([k, v]) => `${num(v)} from ${esc(k)}`).join(", ");
    const borrowed = t.borrowed ? `<span class="over">${from || `${num(t.borrowed)} from idle capacity`}</span>` : "0";
    const sharing = t.sharing === "LendAndBorrow" ? `LendAndBorrow (borrow limit ${num(t.borrow_limit)} %)` : esc(t.sharing || "–");
    return `<tr data-team="${esc(t.team)}" data-type="${esc(t.instance_type)}"><td>${esc(t.team)}</td>` +
      `<td>${esc(t.instance_type)}</td><td class="num">${num(t.quota)}</td><td class="num">${num(t.in_use)}</td>` +
      `<td class="borrowed">${borrowed}</td><td class="num">${num(t.lent)}</td><td class="num">${num(t.available)}</td>` +
      `<td class="num util">${pct(t.utilization)}</td><td class="num">${num(t.fair_share_weight)}</td><td>${sharing}</td></tr>`;
  }), 10, "no teams you can see");
  const names = [...new Set(cluster.teams.map((t) => t.team))];
  for (const [id, k] of [["#why-a", 0], ["#why-b", 1]]) {
    const sel = $(id), keep = sel.value;
    if (sel.dataset.names !== names.join(",")) {
      sel.innerHTML = names.map((n) => `<option>${esc(n)}</option>`).join("");
      sel.value = names.includes(keep) ? keep : (names[k] || "");
      sel.dataset.names = names.join(",");
    }
  }
  const groups = cluster.groups || [];
  $("#tree-box").hidden = !groups.length;
  const parent = Object.fromEntries(groups.map((g) => [g.group, g.parent]));
  const depth = (g) => { let d = 0; for (let p = g.parent; p && d < 64; p = parent[p]) d++; return d; };
  rows($("#tree-table tbody"), groups.map((g) => {
    const sharing = g.sharing === "LendAndBorrow" ? `LendAndBorrow (borrow limit ${num(g.borrow_limit)} %)` : esc(g.sharing || "–");
    return `<tr data-group="${esc(g.group)}" data-type="${esc(g.instance_type)}">` +
      `<td style="padding-left:${0.5 + 1.5 * depth(g)}em">${esc(g.group)}</td><td>${esc(g.instance_type)}</td>` +
      `<td class="num">${num(g.quota)}</td><td class="num">${num(g.in_use)}</td>` +
      `<td class="num">${g.borrowed ? `<span class="over">${num(g.borrowed)}</span>` : "0"}</td>` +
      `<td class="num">${num(g.fair_share_weight)}</td><td>${sharing}</td><td>${esc(g.teams.join(", "))}</td></tr>`;
  }), 8, "no groups");
  // the tables first: let the browser show them before the charts are drawn (with 500 teams those take seconds)
  await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
  const hist = await histP;
  const box = $("#team-charts");
  const types = [...new Set(hist.teams.map((t) => t.instance_type))].sort();
  const ids = types.map((it) => `team-chart-${it.replace(/[^a-z0-9]/gi, "-")}`);
  if (box.dataset.ids !== ids.join(",")) {
    box.innerHTML = ids.map((id, i) => `<div id="${id}" class="chart" role="img" aria-label="Accelerators in use per team on ${esc(types[i])}, with quota lines"></div>`).join("")
      || `<p class="empty">No usage recorded yet.</p>`;
    box.dataset.ids = ids.join(",");
  }
  const whole = (ys) => ys.map((y) => (y === null || y === undefined ? y : Math.round(y)));
  types.forEach((it, k) => {
    const traces = [];
    const nowOf = new Map(hist.now.teams.filter((x) => x.instance_type === it).map((x) => [x.team, x]));
    const teams = hist.teams.filter((t) => t.instance_type === it);
    // a line per team for the TEAM_LINES using most now (then with most quota); the others summed in one line
    const key = (t) => [nowOf.get(t.team)?.in_use ?? 0, nowOf.get(t.team)?.quota ?? 0];
    teams.sort((a, b) => (key(b)[0] - key(a)[0]) || (key(b)[1] - key(a)[1]) || naturalCompare(a.team, b.team));
    const shown = teams.slice(0, TEAM_LINES), rest = teams.slice(TEAM_LINES);
    shown.forEach((t, i) => {
      const now = nowOf.get(t.team) || {};
      const [xs, ys] = series(hist, t.in_use, now.in_use ?? null);
      traces.push(line(`${t.team} in use`, xs, whole(ys), i));
      const [qx, qy] = series(hist, t.quota, now.quota ?? null);
      traces.push(line(`${t.team} quota`, qx, qy, i, {dash: DASHES[i % DASHES.length], width: 1.5, marker: 0}));
    });
    if (rest.length) {
      const sum = (field) => hist.times.map((_, j) => rest.reduce((a, t) => {
        const v = t[field][j];
        return v === null || v === undefined ? a : (a ?? 0) + v;
      }, null));
      const nowSum = (field) => rest.reduce((a, t) => a + (nowOf.get(t.team)?.[field] ?? 0), 0);
      const i = shown.length, name = `the other ${num(rest.length)} teams`;
      const [xs, ys] = series(hist, sum("in_use"), nowSum("in_use"));
      traces.push(line(`${name} in use`, xs, whole(ys), i));
      const [qx, qy] = series(hist, sum("quota"), nowSum("quota"));
      traces.push(line(`${name} quota`, qx, qy, i, {dash: DASHES[i % DASHES.length], width: 1.5, marker: 0}));
    }
    const layout = baseLayout(`${it}: accelerators in use per team (solid, with markers) and quota (broken lines)` +
      (rest.length ? `; the ${TEAM_LINES} teams using most, the other ${num(rest.length)} summed` : ""), "accelerators");
    layout.yaxis.tickformat = "d";
    plot($(`#${ids[k]}`), traces, layout);
  });
  await drawGoodput();
}

// goodput per team (fairpod.server.accounting.goodput, GET /reports/usage): kept and lost accelerator-hours, stacked
async function drawGoodput() {
  const el = $("#goodput-chart");
  let gp = {};
  try { gp = (await api("/reports/goodput")).goodput || {}; } catch (e) { el.textContent = `Goodput: ${e.message || e}`; return; }
  const teams = Object.keys(gp).filter((t) => t !== "*" && gp[t].goodput !== null).sort(naturalCompare);
  if (!teams.length) { el.innerHTML = `<p class="empty">No attempt has ended in the last 7 days.</p>`; return; }
  if (!window.Plotly) { el.textContent = "Loading the charting library…"; return; }
  const label = teams.map((t) => `${t} (${pct(gp[t].goodput)})`);
  const causes = [...new Set(teams.flatMap((t) => Object.keys(gp[t].lost_accelerator_seconds)
    .filter((c) => gp[t].lost_accelerator_seconds[c] > 0)))].sort();
  const traces = [{type: "bar", name: "kept", x: label, y: teams.map((t) => gp[t].kept_accelerator_seconds / 3600),
                   marker: {color: COLOURS[0]}}];
  causes.forEach((c, i) => traces.push({type: "bar", name: `lost: ${c}`, x: label,
    y: teams.map((t) => (gp[t].lost_accelerator_seconds[c] || 0) / 3600),
    marker: {color: COLOURS[(i + 1) % COLOURS.length], pattern: {shape: ["/", "x", ".", "-", "|", "+"][i % 6]}}}));
  const layout = baseLayout("Accelerator-hours kept and lost since the last checkpoint, per team (goodput)", "accelerator-hours");
  layout.xaxis = {type: "category"};
  layout.barmode = "stack";
  layout.hovermode = "closest";
  Plotly.react(el, traces, layout, {displayModeBar: false, responsive: true});
}

// "why does team X get more than team Y": GET /explain/teams (fairpod explain teams X Y)
async function drawWhy() {
  const a = $("#why-a").value, b = $("#why-b").value, out = $("#why-out");
  if (!a || !b || a === b) { out.innerHTML = `<p class="empty">Pick two different teams.</p>`; return; }
  let r;
  try { r = await api(`/explain/teams?team=${encodeURIComponent(a)}&team=${encodeURIComponent(b)}`); }
  catch (e) { out.innerHTML = `<p class="bad">${esc(e.message)}</p>`; return; }
  const share = (v) => (v === null ? "infinite" : Array.isArray(v) ? v.map(share).join(" / ") : v.toFixed(4));
  const lv = (name) => `<table class="grid why-levels"><thead><tr><th>${esc(name)}: level</th><th>Name</th>` +
    `<th class="num">Weight</th><th class="num">Quota</th><th class="num">In use</th><th class="num">Borrowed</th>` +
    `<th class="num">Share</th><th>Against</th></tr></thead><tbody>` + r.teams[name].map((x) =>
    `<tr><td>${esc(x.level)}</td><td>${esc(x.name)}</td><td class="num">${num(x.weight)}</td><td class="num">${num(x.quota)}</td>` +
    `<td class="num">${num(x.in_use)}</td><td class="num">${num(x.borrowed)}</td><td class="num">${share(x.share)}</td>` +
    `<td>${esc(x.siblings.join(", ") || "–")}</td></tr>`).join("") + `</tbody></table>`;
  const next = r.next_idle.length ? `<h3>Who gets the next idle ${esc(r.instance_type)} capacity</h3>` +
    `<table class="grid" id="why-next"><thead><tr><th>#</th><th>Team</th><th>Job</th><th class="num">Share after</th>` +
    `<th>Why in this place</th><th>Held back by</th></tr></thead><tbody>` + r.next_idle.map((o, i) =>
    `<tr><td>${i + 1}</td><td>${esc(o.team)}</td><td>${esc(o.job || "–")}</td><td class="num">${share(o.share_after)}</td>` +
    `<td>${esc(o.rule)}</td><td>${esc(o.why_not || "–")}</td></tr>`).join("") + `</tbody></table>`
    : `<p class="empty">No team waits for ${esc(r.instance_type)}.</p>`;
  out.innerHTML = `<ul id="why-lines">${r.explanation.map((l) => `<li>${esc(l)}</li>`).join("")}</ul>` +
    lv(a) + lv(b) + next;
}

async function drawTasks() {
  const q = new URLSearchParams({window: $("#window-tasks").value});
  if ($("#f-team").value) q.set("team", $("#f-team").value);
  if ($("#f-group").value) q.set("instance_group", $("#f-group").value);
  if ($("#f-state").value) q.set("state", $("#f-state").value);
  const d = await api(`/dashboard/tasks?${q}`);
  const c = d.counts;
  const winText = $("#window-tasks").selectedOptions[0].textContent;
  $("#task-kpis").innerHTML =
    kpi("Running", num(c.Running), "hold resources now", "kpi-running") +
    kpi("Pending", num(c.Pending), `${num(d.waiting_after_preemption)} of them preempted, waiting to resume`, "kpi-pending") +
    kpi("Preempted, stopping", num(c.Preempted), "replicas get SIGTERM, then go back to the queue", "kpi-preempted") +
    kpi("Average wait", dur(d.avg_wait_seconds), `submission to first start, ${num(d.admitted_in_window)} started in ${winText}`) +
    kpi("Average run time", dur(d.avg_run_seconds), `first start to end, ${num(d.finished_in_window)} ended in ${winText}`) +
    kpi("Ended", "", `succeeded, failed, cancelled in ${winText}`, "kpi-ended");
  // each count with its symbol, never split: a narrow card wraps between them ("1,234 ✓ 56 ✗" / "789 –")
  $("#kpi-ended .value").innerHTML = [[c.Succeeded, "✓", "succeeded"], [c.Failed, "✗", "failed"],
    [c.Cancelled, "–", "cancelled"]].map(([n, s, t]) => `<span class="tally" title="${t}">${num(n)} ${s}</span>`).join(" ");
  rows($("#task-table tbody"), d.tasks.map((t) => `<tr data-task="${esc(t.name)}"><td>${esc(t.name)}</td><td>${esc(t.team)}</td>` +
    `<td>${esc(t.priority || "(none: lowest)")}</td><td class="state-cell">${stateTag(t.state)}</td><td class="num">${t.queue_position ?? "–"}</td>` +
    `<td class="num eta">${eta(t.estimated_start, d.now)}</td>` +
    `<td class="num">${num(t.nodes)} × ${num(t.accelerators / t.nodes)}` +
    `${t.max_nodes ? ` <span class="elastic" title="elastic: ${num(t.min_nodes)} to ${num(t.max_nodes)} nodes">(${num(t.min_nodes)}–${num(t.max_nodes)})</span>` : ""}</td><td class="num">${dur(t.wait_seconds)}</td>` +
    `<td class="num">${dur(t.run_seconds)}</td><td class="num preempted">${num(t.preemptions)} / ${num(t.restarts)}</td>` +
    `<td class="reason">${esc(t.reason)}</td></tr>`), 11, "no tasks match the filters");
  const shownActive = Math.max(0, Math.min(d.limit, d.unfinished_total - d.offset));
  const taskPage = $("#task-page");
  taskPage.hidden = d.unfinished_total <= shownActive;
  taskPage.textContent = `The first ${num(shownActive)} of ${num(d.unfinished_total)} unfinished tasks ` +
    "(the counts above cover all of them); filter by team, instance group or state to see others.";
}

async function pollEvents() {
  const first = state.lastEventId === null;
  const d = await api(first ? "/events?limit=300" : `/events?since_id=${state.lastEventId}&limit=500`);
  const evs = first ? d.events.slice().reverse() : d.events;  // oldest first
  for (const e of evs) state.lastEventId = Math.max(state.lastEventId ?? 0, e.id);
  if (first && !evs.length) state.lastEventId = 0;
  state.events = evs.slice().reverse().concat(state.events).slice(0, 1000);  // newest first
}

function drawEvents() {
  const want = $("#f-kind").value.split(",").filter(Boolean);
  const shown = state.events.filter((e) => !want.length || want.some((w) => e.kind.includes(w))).slice(0, 300);
  rows($("#event-table tbody"), shown.map((e) => `<tr data-kind="${esc(e.kind)}"><td>${esc(clock(e.ts))}</td>` +
    `<td>${esc(e.kind)}</td><td>${esc(e.team || "–")}</td><td class="node">${esc((e.nodes || []).join(", ") || e.node || "–")}</td><td>${esc(e.message)}</td></tr>`),
    5, "no events yet");
}

// -- wiring -------------------------------------------------------------------------------------
window.addEventListener("hashchange", route);
window.addEventListener("storage", (ev) => {  // another tab of this server signed in or out
  if (ev.key !== "fairpod.token") return;
  if (!ev.newValue && state.me) {
    state.token = "";
    showLogin("Signed out (in another tab).");
  } else if (ev.newValue && !state.me) signIn(ev.newValue);
});
document.addEventListener("DOMContentLoaded", () => {
  $("#login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("#token").value.trim();
    if (t) signIn(t);
  });
  $("#signout").addEventListener("click", () => {
    localStorage.removeItem("fairpod.token");
    state.token = "";
    $("#token").value = "";
    showLogin("Signed out.");
  });
  $("#why-go").addEventListener("click", drawWhy);
  for (const id of ["#window-cluster", "#window-teams", "#window-tasks", "#f-team", "#f-group", "#f-state", "#f-kind"]) {
    $(id).addEventListener("change", refresh);
  }
  const link = location.hash.match(/^#signin=([A-Za-z0-9_-]+)$/);
  if (link) {
    history.replaceState(null, "", location.pathname + location.search);  // the code is spent: off the URL
    redeemLink(link[1]);
  } else if (state.token) signIn(state.token);
  else showLogin("");
});

// a one-time sign-in link from `fairpod dashboard`: trade its code for a session token of its user
async function redeemLink(code) {
  let r;
  try {
    r = await fetch(API + "/dashboard/links/redeem", {method: "POST", headers: {"Content-Type": "application/json"},
                                                      body: JSON.stringify({code})});
  } catch (e) {
    showLogin(`Cannot sign in: ${e.message}`);
    return;
  }
  if (!r.ok) {
    let msg = r.statusText;
    try { msg = (await r.json()).detail || msg; } catch (e) { /* not JSON */ }
    showLogin(`That sign-in link did not work: ${msg}.`);
    return;
  }
  await signIn((await r.json()).token);
  route();
}
