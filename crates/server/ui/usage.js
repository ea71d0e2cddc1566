// The stats panel, a part of the session view: every turn's cost, the context gauge, per-model
// totals. It reads `GET …/usage` (every turn of the log; the daemon goes on from where the last
// request stopped) when it opens and after each turn; the context gauge follows
// `message_started` between turns.
import uPlot from './vendor/uPlot.esm.js';
import { $, el } from './dom.js';
import { compact, compactMoney, money, plural, tokens } from './words.js';
import { api } from './api.js';
import { sessions } from './list.js';

/// The font of the charts' axes.
const AXIS_FONT = '11px system-ui, sans-serif';
const ruler = document.createElement('canvas').getContext('2d');
/// An axis wide enough for its widest label as the canvas draws it, besides its ticks (10 px)
/// and their gap (5 px): uPlot cuts what does not fit.
function axisSize(u, values) {
  ruler.font = AXIS_FONT;
  const widest = Math.max(12, ...(values ?? []).map((v) => ruler.measureText(String(v)).width));
  return Math.ceil(widest) + 10 + 5 + 4;
}

export const usageMethods = {
  // --- The stats panel: every turn's cost (from the server, not the page), context, models.

  buildStats() {
    this.statsParts = {
      totals: el('div', { class: 'totals' }),
      chart: el('div', { class: 'cost-chart' }),
      legend: el('div', { class: 'chart-legend' },
        el('span', {}, el('span', { class: 'swatch', style: 'background:#3366cc' }), 'cost per turn'),
        el('span', {}, el('span', { class: 'swatch', style: 'background:#cc7a00' }), 'tokens per turn')),
      readout: el('div', { class: 'chart-readout muted' }),
      gauge: el('div', { class: 'gauge', role: 'meter', 'aria-label': 'Context window used' }, el('div', { class: 'gauge-fill' })),
      gaugeLabel: el('div', { class: 'gauge-label muted' }),
      models: el('tbody'),
      windowsHead: el('h2', { hidden: true }, 'Usage limits'),
      windows: el('div', { class: 'usage-windows' }),
    };
    const p = this.statsParts;
    this.stats.replaceChildren(el('h2', {}, 'Cost'), p.totals, p.chart, p.legend, p.readout,
      el('h2', {}, 'Context'), p.gauge, p.gaugeLabel,
      el('h2', {}, 'By model'), el('table', { class: 'models' }, p.models),
      p.windowsHead, p.windows);
    // The chart follows the panel's width (a window resized; the panel moved between the side
    // and a phone's cost view).
    this.statsObserver = new ResizeObserver(() => {
      const width = Math.max(220, this.stats.clientWidth - 32);
      if (this.chart && this.stats.clientWidth && Math.abs(this.chart.width - width) > 2) this.chart.setSize({ width, height: 170 });
    });
    this.statsObserver.observe(this.stats);
    this.drawContext();
  },

  async loadUsage() {
    // A hidden panel (a phone, a narrow window) asks when it shows again.
    if (this.stats.offsetParent === null) { this.usageStale = true; return; }
    this.usageStale = false;
    if (this.usageLoading) { this.usageAgain = true; return; }
    this.usageLoading = true;
    try {
      this.usage = await api('GET', `/api/sessions/${this.id}/usage`);
      if (!this.closed) this.drawUsage();
    } catch (error) {
      /* the header says whether the daemon is there */
    } finally {
      this.usageLoading = false;
      if (this.usageAgain) { this.usageAgain = false; this.loadUsage(); }
    }
  },

  /// The account's usage windows (five-hour, seven-day, …), as Claude Code last reported them:
  /// this session's updates, or the daemon's newest report (`GET /api/usage`) until one comes.
  async loadWindows() {
    try {
      const report = await api('GET', '/api/usage');
      if (!this.closed && !this.transcript.usageWindows) this.drawWindows(report.windows ?? []);
    } catch (error) {
      /* the header says whether the daemon is there */
    }
  },

  drawWindows(windows) {
    const p = this.statsParts;
    if (!p) return;
    p.windowsHead.hidden = !windows.length;
    p.windows.replaceChildren(...windows.map((w) => {
      const used = w.utilization == null ? null : Math.max(0, Math.min(1, w.utilization));
      const state = { allowed_warning: 'near its limit', rejected: 'used up' }[w.status] ?? '';
      const resets = w.resets_at ? `resets ${resetTime(w.resets_at)}` : '';
      const fill = el('div', { class: 'gauge-fill' });
      if (used != null) fill.style.width = `${(used * 100).toFixed(1)}%`;
      return el('div', { class: `usage-window ${w.status}`, dataset: { window: w.window } },
        el('div', { class: 'usage-window-head' }, el('span', { class: 'usage-window-name' }, windowName(w.window)),
          el('span', { class: 'muted' }, [used == null ? '' : `${Math.round(used * 100)}%`, state].filter(Boolean).join(' · '))),
        el('div', { class: 'usage-meter', role: 'meter', 'aria-label': `${windowName(w.window)} used`, 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': used == null ? '' : String(Math.round(used * 100)) }, fill),
        resets ? el('div', { class: 'muted usage-window-reset' }, resets) : null);
    }));
  },

  drawContext() {
    const p = this.statsParts;
    if (!p) return;
    const t = this.transcript;
    const context = t.context ?? this.usage?.context_tokens ?? 0;
    const window_ = t.contextWindow ?? this.usage?.context_window ?? null;
    const fill = $('.gauge-fill', p.gauge);
    p.gauge.setAttribute('aria-valuenow', context);
    if (window_) {
      p.gauge.setAttribute('aria-valuemax', window_);
      fill.style.width = `${(Math.min(1, context / window_) * 100).toFixed(1)}%`;
      p.gaugeLabel.textContent = `${tokens(context)} of ${tokens(window_)} tokens (${Math.round((context / window_) * 100)}%)`;
    } else {
      p.gauge.removeAttribute('aria-valuemax');
      fill.style.width = '0%';
      p.gaugeLabel.textContent = `${tokens(context)} tokens; the window is known once a turn ends`;
    }
  },

  drawUsage() {
    const p = this.statsParts;
    const usage = this.usage;
    const turns = usage.turns ?? [];
    const spent = turns.reduce((sum, t) => sum + (t.input_tokens ?? 0) + (t.output_tokens ?? 0), 0);
    p.totals.textContent = usage.turn_count
      ? `${plural(usage.turn_count, 'turn')} · ${money(usage.total_cost_usd)} · ${tokens(spent)} tokens`
      : 'No finished turn yet.';
    p.models.replaceChildren(...(usage.models ?? []).map((m) => el('tr', {},
      el('td', {}, m.model), el('td', {}, `${compact(m.input_tokens)} in`), el('td', {}, `${compact(m.output_tokens)} out`), el('td', {}, money(m.cost_usd)))));
    this.drawContext();
    this.chartTurns = turns.length;
    this.chart?.destroy();
    this.chart = null;
    p.chart.replaceChildren();
    p.legend.hidden = !turns.length;
    p.readout.textContent = turns.length ? 'Point at a bar for its turn.' : '';
    if (!turns.length) return;
    const xs = turns.map((t) => t.turn);
    const data = [xs, turns.map((t) => t.cost_usd), turns.map((t) => (t.input_tokens ?? 0) + (t.output_tokens ?? 0))];
    const style = getComputedStyle(document.documentElement);
    const ink = style.getPropertyValue('--muted').trim() || '#667085';
    const grid = style.getPropertyValue('--line').trim() || '#e3e6ec';
    const width = Math.max(220, this.stats.clientWidth - 32);
    // Whole turns only: a step of 1, 2, 5, 10, … that leaves at most six labels.
    const integerSplits = (u, axis, min, max) => {
      const first = Math.max(1, Math.ceil(min));
      const last = Math.floor(max);
      const span = Math.max(1, last - first);
      const step = [1, 2, 5].flatMap((m) => [1, 10, 100, 1000, 10000].map((p10) => m * p10)).sort((a, b) => a - b).find((s) => span / s <= 5) ?? 100000;
      const ticks = [];
      for (let t = Math.ceil(first / step) * step; t <= last; t += step) ticks.push(t);
      if (!ticks.length) ticks.push(first);
      this.chartTicks = ticks;
      return ticks;
    };
    const axis = { stroke: ink, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 }, font: AXIS_FONT };
    this.chart = new uPlot({
      width, height: 170, legend: { show: false }, padding: [10, 4, 0, 0],
      cursor: { y: false, points: { show: false } },
      scales: { x: { time: false, range: () => [xs[0] - 0.5, xs[xs.length - 1] + 0.5] }, $: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] }, tokens: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      axes: [
        { ...axis, splits: integerSplits, values: (u, ticks) => ticks.map(String), grid: { show: false } },
        { ...axis, scale: '$', values: (u, ticks) => ticks.map(compactMoney), size: axisSize },
        { ...axis, scale: 'tokens', side: 1, grid: { show: false }, values: (u, ticks) => ticks.map(compact), size: axisSize },
      ],
      series: [{},
        { label: 'cost', scale: '$', stroke: '#3366cc', fill: 'rgba(51,102,204,.35)', paths: uPlot.paths.bars({ size: [0.6, 48], align: 0 }), points: { show: false } },
        { label: 'tokens', scale: 'tokens', stroke: '#cc7a00', width: 2, points: { show: turns.length < 40, size: 5 } }],
      hooks: {
        setCursor: [(u) => {
          const i = u.cursor.idx;
          if (i == null) { p.readout.textContent = 'Point at a bar for its turn.'; return; }
          const t = turns[i];
          p.readout.textContent = `Turn ${t.turn}: ${money(t.cost_usd)} · ${tokens(t.input_tokens)} in · ${tokens(t.output_tokens)} out · ${(t.duration_ms / 1000).toFixed(1)} s`;
        }],
      },
    }, data, p.chart);
  },
};

/// A usage window's name in words: `five_hour` → "5-hour window".
function windowName(name) {
  const known = { five_hour: '5-hour', seven_day: '7-day', seven_day_opus: '7-day (Opus)', seven_day_sonnet: '7-day (Sonnet)', seven_day_overage_included: '7-day (with extra usage)', overage: 'Extra usage' };
  return known[name] ?? name.replaceAll('_', ' ');
}

/// When a window resets (Unix seconds), in the reader's own time: "at 14:05", or with the day
/// when it is not today.
function resetTime(seconds) {
  const at = new Date(seconds * 1000);
  const today = new Date().toDateString() === at.toDateString();
  return today
    ? `at ${at.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })}`
    : `on ${at.toLocaleDateString([], { weekday: 'short', day: 'numeric', month: 'short' })} at ${at.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })}`;
}
