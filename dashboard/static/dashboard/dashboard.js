/* durablecache dashboard: live updates (websocket), countdowns, charts.
 * Everything here only improves a page that works without it. */
(function () {
  "use strict";
  const body = document.body;
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

  // --- countdowns to expiry ------------------------------------------------
  function countdownText(iso) {
    const left = Math.round((Date.parse(iso) - Date.now()) / 1000);
    if (left <= 0) return "expiring…";
    const h = Math.floor(left / 3600), m = Math.floor((left % 3600) / 60), s = left % 60;
    return "in " + (h ? h + "h " : "") + (h || m ? m + "m " : "") + String(s).padStart(2, "0") + "s";
  }
  function tick() {
    $$("time[data-countdown]").forEach((t) => { t.textContent = countdownText(t.dataset.countdown); });
    $$("time[data-ago]").forEach((t) => {
      const ago = Math.max(0, Math.round((Date.now() - Date.parse(t.dataset.ago)) / 1000));
      t.textContent = ago + " s ago";
    });
  }
  setInterval(tick, 1000); tick();

  // --- counts --------------------------------------------------------------
  function refreshCounts() {
    fetch(body.dataset.countsUrl, { credentials: "same-origin" }).then((r) => r.ok ? r.json() : null).then((c) => {
      if (!c) return;
      for (const k of ["connected", "disconnected", "expired"]) { const el = $("#count-" + k); if (el) el.textContent = c[k]; }
    }).catch(() => {});
  }

  // --- live updates ----------------------------------------------------------
  function expiresCell(u) {
    return u.expires_at && u.state === "disconnected" ? '<time data-countdown="' + esc(u.expires_at) + '">' + countdownText(u.expires_at) + "</time>" : "—";
  }
  function stateSpan(state) { return '<span class="status ' + esc(state) + '">' + esc(state) + "</span>"; }

  function onClientsPage(u) {
    const table = $("table#clients[data-state-filter]");
    if (!table) return;
    let row = $('tr[data-durable-id="' + CSS.escape(u.durable_id) + '"]', table);
    const filter = table.dataset.stateFilter, search = (table.dataset.search || "").toLowerCase();
    const live = u.state === "connected" || u.state === "disconnected";
    if (!row) {
      if (!live || (filter && filter !== u.state) || (search && !u.durable_id.toLowerCase().includes(search))) return;
      const empty = $("tr.empty", table); if (empty) empty.remove();
      row = document.createElement("tr");
      row.dataset.durableId = u.durable_id;
      row.innerHTML = '<td><a href="' + encodeURIComponent(u.durable_id) + '/">' + esc(u.durable_id) + "</a></td><td></td>" +
        '<td class="state"></td><td class="node"></td><td class="primary"></td><td class="secondaries"></td><td class="sizes"></td><td class="pending"></td><td class="interests"></td><td class="expires"></td>';
      $("tbody", table).prepend(row);
    }
    $(".state", row).innerHTML = live ? stateSpan(u.state) : stateSpan(u.state === "expired" ? "expired" : "gone");
    $(".node", row).textContent = u.node || "";
    $(".primary", row).textContent = u.primary || "";
    $(".secondaries", row).textContent = (u.secondaries || []).join(", ");
    $(".expires", row).innerHTML = expiresCell(u);
    row.classList.toggle("gone", !live);
    row.classList.remove("flash"); void row.offsetWidth; row.classList.add("flash");
  }

  function onOverview(u) {
    const list = $("#activity");
    if (!list) return;
    const empty = $("li.empty", list); if (empty) empty.remove();
    const li = document.createElement("li");
    const now = new Date().toTimeString().slice(0, 8);
    li.innerHTML = "<time>" + now + '</time> <a href="clients/' + encodeURIComponent(u.durable_id) + '/">' + esc(u.durable_id) +
      '</a> <span class="kind ' + esc(u.event) + '">' + esc(u.event) + "</span> " + esc(u.node || "");
    list.prepend(li);
  }

  function onClientPage(u) {
    const page = $("#client");
    if (!page || page.dataset.durableId !== u.durable_id) return;
    const live = u.state === "connected" || u.state === "disconnected";
    const state = $("#client-state");
    state.className = "status state " + (live ? u.state : u.state === "expired" ? "expired" : "gone");
    state.textContent = live ? u.state : u.state === "expired" ? "expired" : "closed";
    $("#client-node").textContent = u.node || "—";
    $("#client-primary").textContent = u.primary || "";
    $("#client-expires").innerHTML = u.state === "connected" ? "— (connected)" : expiresCell(u);
    const hist = $("#history");
    if (hist) {
      const li = document.createElement("li");
      li.innerHTML = "<time>" + new Date().toISOString().slice(0, 19).replace("T", " ") + '</time> <span class="kind ' + esc(u.event) + '">' + esc(u.event) + "</span> " + esc(u.node || "");
      hist.prepend(li);
    }
  }

  let backoff = 500;
  function connect() {
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + body.dataset.liveUrl;
    const ws = new WebSocket(url);
    const status = $("#live-status");
    ws.onopen = () => { backoff = 500; if (status) { status.classList.add("on"); status.title = "live updates: on"; } };
    ws.onclose = () => {
      if (status) { status.classList.remove("on"); status.title = "live updates: reconnecting"; }
      setTimeout(connect, backoff); backoff = Math.min(backoff * 2, 10000);
    };
    ws.onmessage = (msg) => {
      let u; try { u = JSON.parse(msg.data); } catch (e) { return; }
      if (u.kind !== "client") return;
      onClientsPage(u); onOverview(u); onClientPage(u); refreshCounts();
      document.dispatchEvent(new CustomEvent("dashboard:update", { detail: u }));
    };
  }
  connect();

  // --- charts ----------------------------------------------------------------
  const palette = ["#0969da", "#1a7f37", "#bf3989", "#9a6700", "#8250df", "#cf222e", "#0550ae"];
  function lineChart(canvas, yTitle) {
    return new Chart(canvas, {
      type: "line",
      data: { datasets: [] },
      options: {
        animation: false, parsing: false, normalized: true,
        // A null point is a period without samples (a node, or the whole
        // cluster, was down): leave it blank rather than draw across it.
        spanGaps: false,
        interaction: { mode: "nearest", intersect: false },
        scales: {
          x: { type: "linear", ticks: { callback: (v) => new Date(v).toTimeString().slice(0, 8), maxTicksLimit: 8 } },
          y: { beginAtZero: true, title: { display: true, text: yTitle } },
        },
        plugins: { tooltip: { callbacks: { title: (items) => new Date(items[0].parsed.x).toTimeString().slice(0, 8) } } },
      },
    });
  }
  function points(list, field) { return list.map((p) => ({ x: Date.parse(p.at), y: p[field] })); }

  const charts = $(".charts[data-series-url]");
  if (charts && window.Chart) {
    const queued = lineChart($("#chart-queued"), "events queued");
    const rates = lineChart($("#chart-rates"), "events / s");
    const load = () => fetch(charts.dataset.seriesUrl, { credentials: "same-origin" }).then((r) => r.json()).then((data) => {
      const names = Object.keys(data.nodes).sort();
      queued.data.datasets = names.map((n, i) => ({ label: n, data: points(data.nodes[n], "queued"), borderColor: palette[i % palette.length], pointRadius: 0 }));
      // Writes are the cluster's, measured from every node's samples.
      rates.data.datasets = [{ label: "in (writes)", data: points(data.cluster, "in"), borderColor: "#57606a", borderDash: [4, 3], pointRadius: 0 }]
        .concat(names.map((n, i) => ({ label: "out " + n, data: points(data.nodes[n], "out"), borderColor: palette[i % palette.length], pointRadius: 0 })));
      queued.update(); rates.update();
    }).catch(() => {});
    load(); setInterval(load, 5000);
  }

  const page = $("#client[data-state-url]");
  if (page) {
    const chart = window.Chart ? lineChart($("#chart-client"), "events queued") : null;
    const load = () => fetch(page.dataset.stateUrl, { credentials: "same-origin" }).then((r) => r.ok ? r.json() : null).then((s) => {
      if (!s) return;
      const sizes = Object.entries(s.queue_sizes).map(([h, n]) => h + ": " + n).join(", ");
      $("#client-sizes").textContent = sizes;
      $("#client-pending").textContent = s.pending_events;
      $("#client-secondaries").textContent = (s.secondaries.join(", ") || "—") + (s.syncing.length ? " (filling: " + s.syncing.join(", ") + ")" : "");
      if (chart) {
        chart.data.datasets = [{ label: s.durable_id, data: s.series.map((p) => ({ x: Date.parse(p.at), y: p.size })), borderColor: palette[0], pointRadius: 0 }];
        // The caption's 30 minutes, up to now, whatever the samples: a new
        // client (no samples yet) gets a time axis, not Chart.js's 0..1.
        chart.options.scales.x.max = Date.now();
        chart.options.scales.x.min = chart.options.scales.x.max - 30 * 60 * 1000;
        chart.update();
      }
    }).catch(() => {});
    load(); setInterval(load, 2000);
  }
})();
