// zkcron console: a client of the node's /v1/ API. Everything it shows is put in the page as
// text nodes (never parsed as HTML), and writes carry the bearer token typed into this tab.
'use strict';

(function () {
  const REFRESH_MS = 2000;
  const PAGE = 50;
  const STATUSES = ['all', 'failing', 'ok', 'missed', 'running', 'paused', 'never', 'disabled'];
  const main = document.getElementById('main');
  const store = window.sessionStorage;
  let view = null;          // the page shown: { refresh() }
  let overview = null;      // the last /v1/overview answer
  let busy = false;
  let again = false;
  let rendered = false;
  let declined = false;

  // ---- DOM ----------------------------------------------------------------------------------
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === 'on') {
        for (const [type, fn] of Object.entries(value)) el.addEventListener(type, fn);
      } else if (key === 'class') {
        el.className = value;
      } else {
        el.setAttribute(key, value === true ? '' : String(value));
      }
    }
    append(el, children);
    return el;
  }
  function append(el, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }
  // Replaces a region's content, keeping focus on the control with the same data-key.
  function fill(region, ...children) {
    const active = document.activeElement;
    const key = active && region.contains(active) ? active.dataset.key : undefined;
    region.replaceChildren();
    append(region, children);
    if (key) {
      for (const el of region.querySelectorAll('[data-key]')) {
        if (el.dataset.key === key) { el.focus(); break; }
      }
    }
  }

  // ---- time and words -----------------------------------------------------------------------
  const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
  const relative = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });
  function ago(ms) {
    const seconds = Math.round((ms - Date.now()) / 1000);
    const abs = Math.abs(seconds);
    if (abs < 60) return relative.format(seconds, 'second');
    if (abs < 3600) return relative.format(Math.round(seconds / 60), 'minute');
    if (abs < 86400) return relative.format(Math.round(seconds / 3600), 'hour');
    return relative.format(Math.round(seconds / 86400), 'day');
  }
  function when(ms) {
    if (ms === null || ms === undefined) return h('span', { class: 'muted' }, '—');
    const iso = new Date(ms).toISOString();
    return h('span', {},
      h('time', { datetime: iso, title: 'UTC ' + iso.replace('T', ' ').replace('.000Z', 'Z') },
        dateTime.format(new Date(ms))),
      h('span', { class: 'rel' }, '(' + ago(ms) + ')'));
  }
  function duration(ms) {
    if (ms === null || ms === undefined || ms < 0) return '—';
    if (ms < 1000) return ms + ' ms';
    const s = ms / 1000;
    if (s < 60) return s.toFixed(1) + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' min ' + Math.round(s % 60) + ' s';
    return Math.floor(m / 60) + ' h ' + (m % 60) + ' min';
  }
  function took(run) {
    if (!run || !run.started_unix_ms || !run.finished_unix_ms) return '—';
    return duration(run.finished_unix_ms - run.started_unix_ms);
  }
  function words(status) { return String(status).replace('_', ' '); }
  function badge(status, text) {
    if (!status) return h('span', { class: 'status none' }, text || 'never ran');
    return h('span', { class: 'status s-' + status }, text || words(status));
  }
  function exit(run) {
    if (!run) return '';
    if (run.http_status) return 'HTTP ' + run.http_status;
    if (run.signal) return 'signal ' + run.signal;
    if (run.exit_code !== null && run.exit_code !== undefined) return 'exit ' + run.exit_code;
    return '';
  }
  function bytes(n) {
    if (n < 1024) return n + ' B';
    if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
    return (n / 1024 / 1024).toFixed(1) + ' MiB';
  }
  function jobLink(name) {
    return h('a', { href: '#/jobs/' + encodeURIComponent(name), 'data-key': 'job:' + name }, name);
  }
  function submissionLink(id) {
    return h('a', { href: '#/submissions/' + encodeURIComponent(id), 'data-key': 'sub:' + id }, id);
  }

  // ---- the API ------------------------------------------------------------------------------
  function token() { return store.getItem('zkcron.token') || ''; }
  function actor() { return store.getItem('zkcron.actor') || ''; }
  async function api(method, path, body) {
    const headers = { Accept: 'application/json', 'X-Zkcron-Client': 'console' };
    if (token()) headers.Authorization = 'Bearer ' + token();
    if (actor()) headers['X-Zkcron-Actor'] = actor();
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let response;
    try {
      response = await fetch(path, {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body),
        credentials: 'omit', cache: 'no-store',
      });
    } catch (err) {
      return { ok: false, status: 0, body: { error: 'this node does not answer: ' + err.message } };
    }
    let answer = null;
    const text = await response.text();
    try { answer = text ? JSON.parse(text) : null; } catch (_) { answer = { error: text }; }
    if (response.status === 401 && method === 'GET' && !declined) needsToken('This node\'s API needs a read token.');
    return { ok: response.ok, status: response.status, body: answer };
  }
  // What a refused or failed request says, for the person.
  function failure(answer) {
    return answer.body && answer.body.error ? answer.body.error : 'HTTP ' + answer.status;
  }
  function say(text, good) {
    const answer = document.getElementById('answer');
    answer.className = good ? 'good' : 'bad';
    answer.setAttribute('role', good ? 'status' : 'alert');
    fill(answer, text);
  }

  // ---- token and confirmation dialogs -------------------------------------------------------
  const tokenDialog = document.getElementById('token-dialog');
  let afterToken = null;
  function needsToken(why) {
    if (tokenDialog.open) return;
    document.getElementById('token-title').textContent = why || 'Steer this cluster';
    document.getElementById('token-input').value = token();
    document.getElementById('actor-input').value = actor();
    tokenDialog.showModal();
  }
  document.getElementById('sign-in').addEventListener('click', () => needsToken());
  document.getElementById('token-form').addEventListener('submit', (event) => {
    event.preventDefault();
    store.setItem('zkcron.token', document.getElementById('token-input').value.trim());
    store.setItem('zkcron.actor', document.getElementById('actor-input').value.trim());
    tokenDialog.close();
    showWho();
    const next = afterToken;
    afterToken = null;
    if (next) next(); else tick();
  });
  document.getElementById('token-forget').addEventListener('click', () => {
    store.removeItem('zkcron.token');
    store.removeItem('zkcron.actor');
    afterToken = null;
    tokenDialog.close();
    showWho();
  });
  document.getElementById('token-cancel').addEventListener('click', () => {
    afterToken = null;
    // Not asked again by the refresh; the Token… button asks.
    declined = true;
    tokenDialog.close();
  });
  function showWho() {
    const who = document.getElementById('who');
    who.textContent = token() ? 'steering as ' + (actor() || 'token holder') : 'read-only';
    document.getElementById('sign-in').textContent = token() ? 'Token…' : 'Sign in to steer…';
  }

  const confirmDialog = document.getElementById('confirm');
  let pending = null;
  // Asks, then sends one write; the answer (or the refusal) is shown and the page refreshed.
  function act(step) {
    if (!token()) {
      afterToken = () => act(step);
      needsToken('A write needs the API token');
      return;
    }
    pending = step;
    document.getElementById('confirm-title').textContent = step.title;
    document.getElementById('confirm-text').textContent = step.text || '';
    document.getElementById('confirm-reason-row').hidden = !step.reason;
    document.getElementById('confirm-reason').value = '';
    document.getElementById('confirm-ok').textContent = step.verb || 'Confirm';
    confirmDialog.showModal();
  }
  document.getElementById('confirm-cancel').addEventListener('click', () => {
    pending = null;
    confirmDialog.close();
  });
  document.getElementById('confirm-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const step = pending;
    pending = null;
    confirmDialog.close();
    if (!step) return;
    const reason = document.getElementById('confirm-reason').value.trim();
    const answer = await api(step.method, step.path, step.body ? step.body(reason) : undefined);
    if (answer.ok) {
      say(step.done(answer.body || {}), true);
    } else {
      const why = failure(answer);
      say(step.title.replace(/\?$/, '') + ' was refused: ' + why, false);
    }
    tick();
  });

  function pauseButton(job, paused) {
    const path = '/v1/jobs/' + encodeURIComponent(job);
    if (paused) {
      return h('button', {
        type: 'button', 'data-key': 'resume:' + job,
        on: { click: () => act({
          title: 'Resume ' + job + '?', text: 'Its next tick fires on time; pending submissions run.',
          verb: 'Resume', method: 'POST', path: path + '/resume',
          done: () => job + ' resumed.',
        }) },
      }, 'Resume');
    }
    return h('button', {
      type: 'button', 'data-key': 'pause:' + job,
      on: { click: () => act({
        title: 'Pause ' + job + '?', verb: 'Pause', reason: true,
        text: 'No tick or submission of it fires until it is resumed. Runs alive now go on.',
        method: 'POST', path: path + '/pause', body: (reason) => (reason ? { reason } : {}),
        done: (answer) => job + ' paused' + (answer.by ? ' (by ' + answer.by + ')' : '') + '.',
      }) },
    }, 'Pause');
  }
  function triggerButton(job) {
    return h('button', {
      type: 'button', 'data-key': 'trigger:' + job,
      on: { click: () => act({
        title: 'Trigger ' + job + ' now?', verb: 'Trigger',
        text: 'One run, now, through the owner like a submission due now.',
        method: 'POST', path: '/v1/jobs/' + encodeURIComponent(job) + '/trigger',
        done: (answer) => job + ' triggered: submission ' + answer.submission_id + '.',
      }) },
    }, 'Trigger');
  }
  function cancelButton(id) {
    return h('button', {
      type: 'button', class: 'danger', 'data-key': 'cancel:' + id,
      on: { click: () => act({
        title: 'Cancel submission ' + id + '?', verb: 'Cancel it',
        text: 'It will not run; its record says it was cancelled.',
        method: 'DELETE', path: '/v1/submissions/' + encodeURIComponent(id),
        done: () => 'Submission ' + id + ' cancelled.',
      }) },
    }, 'Cancel');
  }

  // ---- banners (every page) -----------------------------------------------------------------
  function banners() {
    const region = document.getElementById('banners');
    const shown = [];
    const o = overview;
    if (o) {
      if (!o.node.connected || !o.cluster) {
        shown.push(h('div', { class: 'banner bad', role: 'alert' },
          'ZooKeeper is unreachable from this node' + (o.error ? ': ' + o.error : '') + '.'));
      }
      if (o.cluster) {
        for (const group of o.cluster.groups) {
          if (group.lock.state !== 'held') {
            shown.push(h('div', { class: 'banner bad', role: 'alert' },
              'No node owns ' + (o.cluster.groups.length > 1 ? 'group ' + group.name : 'the lock') +
              ': its jobs fire nothing until one does.'));
          }
        }
        if (o.cluster.unplaceable.length) {
          shown.push(h('div', { class: 'banner bad' },
            'No live member may own: ' + o.cluster.unplaceable.join(', ') + '.'));
        }
        if (o.cluster.schedule_drift.length) {
          shown.push(h('div', { class: 'banner warn' },
            o.cluster.schedule_drift.length + ' member(s) run another schedule than the owner.'));
        }
      }
      if (o.paused.length) {
        shown.push(h('div', { class: 'banner warn' },
          h('a', { href: '#/jobs?status=paused' },
            o.paused.length === 1 ? '1 job is paused' : o.paused.length + ' jobs are paused'),
          ': ' + o.paused.slice(0, 5).map((p) => p.job).join(', ') + (o.paused.length > 5 ? ', …' : '')));
      }
    }
    fill(region, shown);
    document.getElementById('node').textContent = o ? 'this node: ' + o.node.node_id : '';
  }

  // ---- overview -----------------------------------------------------------------------------
  function overviewPage() {
    const body = h('div', {});
    fill(main, h('h1', {}, 'Overview'), body);
    return {
      fromOverview: true,
      refresh: async () => {
        const o = overview;
        if (!o) return;
        const cards = [];
        const mine = h('div', { class: 'card', 'aria-label': 'This node' },
          h('h3', {}, 'This node'),
          h('dl', {},
            h('dt', {}, 'Node'), h('dd', { class: 'mono' }, o.node.node_id),
            h('dt', {}, 'ZooKeeper'), h('dd', {}, o.node.connected ? 'connected' : 'not connected'),
            h('dt', {}, 'Owns the lock'), h('dd', {}, o.node.owner ? 'yes, token ' + o.node.fencing_token : 'no'),
            o.node.lease_until_unix_ms ? [h('dt', {}, 'Lease until'), h('dd', {}, when(o.node.lease_until_unix_ms))] : null));
        cards.push(mine);
        if (o.cluster) {
          for (const group of o.cluster.groups) {
            const lock = group.lock;
            const owner = lock.owner;
            const ours = owner && owner.node_id === o.node.node_id;
            cards.push(h('div', { class: 'card group', 'data-group': group.name },
              h('h3', {}, o.cluster.groups.length > 1 ? 'Group ' + group.name : 'Lock ' + lock.name),
              h('dl', {},
                h('dt', {}, 'Owner'),
                h('dd', { class: 'owner mono' }, owner ? owner.node_id : (lock.state === 'none' ? 'nobody' : lock.state)),
                owner ? [h('dt', {}, 'Host'), h('dd', {}, owner.host + ' (' + owner.ip + ')')] : null,
                owner && owner.since_unix_ms ? [h('dt', {}, 'Since'), h('dd', {}, when(owner.since_unix_ms))] : null,
                h('dt', {}, 'Fencing token'), h('dd', { class: 'token mono' }, lock.fencing_token === null ? '—' : String(lock.fencing_token)),
                h('dt', {}, 'Jobs'), h('dd', {}, String(group.jobs.length)),
                group.requires.length ? [h('dt', {}, 'Requires'), h('dd', {}, group.requires.join(', '))] : null),
              ours ? h('p', {}, h('button', {
                type: 'button', 'data-key': 'release:' + group.name,
                on: { click: () => act({
                  title: 'Release ' + (o.cluster.groups.length > 1 ? 'group ' + group.name : 'the lock') + '?',
                  verb: 'Release',
                  text: 'This node hands it to a peer at once, for maintenance; runs alive here go on.',
                  method: 'POST', path: '/v1/release?group=' + encodeURIComponent(group.name),
                  done: (a) => 'Released by ' + a.from + ', taken by ' + a.to + ' after ' + a.after_ms + ' ms.',
                }) },
              }, 'Release')) : null));
          }
        }
        const parts = [h('div', { class: 'cards' }, cards)];
        if (o.cluster) {
          const drift = new Map(o.cluster.schedule_drift.map((d) => [d.node, d]));
          const owns = new Map(o.cluster.balance.map((b) => [b.node_id, b.groups]));
          parts.push(h('h2', {}, 'Members (' + o.cluster.members.length + ')'),
            h('div', { class: 'table-wrap' }, h('table', {},
              h('thead', {}, h('tr', {},
                h('th', { scope: 'col' }, 'Node'), h('th', { scope: 'col' }, 'Host'),
                h('th', { scope: 'col' }, 'Version'), h('th', { scope: 'col', class: 'wide' }, 'Tags'),
                h('th', { scope: 'col' }, 'Owns'), h('th', { scope: 'col', class: 'wide' }, 'Clock'),
                h('th', { scope: 'col' }, 'Schedule'))),
              h('tbody', {}, o.cluster.members.map((m) => {
                const info = m.info || {};
                const d = drift.get(m.node_id);
                return h('tr', { 'data-member': m.node_id },
                  h('td', { class: 'mono' }, m.node_id),
                  h('td', {}, info.host ? info.host + ' (' + info.ip + ')' : '—'),
                  h('td', {}, info.version || '—'),
                  h('td', { class: 'wide' }, (info.tags || []).join(', ') || '—'),
                  h('td', {}, (owns.get(m.node_id) || []).join(', ') || '—'),
                  h('td', { class: 'wide' }, m.clock ? (m.clock.skewed ? 'skewed, ' : '') + m.clock.off_fleet_ms + ' ms off the fleet' : '—'),
                  h('td', {}, d ? h('span', { class: 'status s-timed_out' }, 'differs') : 'same as owner'));
              })))));
        }
        const lists = [];
        if (o.failing.length) lists.push(h('p', {}, h('strong', {}, 'Failing: '), o.failing.map((j, i) => [i ? ', ' : '', jobLink(j)])));
        if (o.running.length) lists.push(h('p', {}, h('strong', {}, 'Running now: '), o.running.map((j, i) => [i ? ', ' : '', jobLink(j)])));
        if (o.paused.length) {
          lists.push(h('h2', {}, 'Paused'), h('ul', {}, o.paused.map((p) => h('li', {},
            jobLink(p.job), ' by ' + p.by, p.reason ? ': “' + p.reason + '”' : '', ' ', when(p.since_unix_ms)))));
        }
        parts.push(h('h2', {}, 'Jobs'), h('p', {}, o.jobs_declared + ' declared. ', h('a', { href: '#/jobs' }, 'All jobs'), ' · ',
          h('a', { href: '#/jobs?status=failing' }, 'failing'), ' · ', h('a', { href: '#/jobs?status=missed' }, 'with missed ticks')), lists);
        fill(body, parts);
      },
    };
  }

  // ---- jobs ---------------------------------------------------------------------------------
  function jobsPage(params) {
    const query = {
      q: params.get('q') || '', status: params.get('status') || 'all',
      sort: params.get('sort') || 'name', offset: Number(params.get('offset')) || 0,
    };
    const remember = () => {
      const p = new URLSearchParams();
      if (query.q) p.set('q', query.q);
      if (query.status !== 'all') p.set('status', query.status);
      if (query.sort !== 'name') p.set('sort', query.sort);
      if (query.offset) p.set('offset', String(query.offset));
      const hash = '#/jobs' + (p.toString() ? '?' + p : '');
      history.replaceState(null, '', hash);
    };
    const search = h('input', { id: 'job-filter', type: 'search', value: query.q, placeholder: 'part of a name', autocomplete: 'off' });
    let typing = null;
    search.addEventListener('input', () => {
      clearTimeout(typing);
      typing = setTimeout(() => { query.q = search.value.trim(); query.offset = 0; remember(); refresh(); }, 200);
    });
    const sort = h('select', { id: 'job-sort' },
      [['name', 'name'], ['next', 'next fire'], ['last', 'newest run'], ['missed', 'most missed']].map(
        ([value, label]) => h('option', { value, selected: query.sort === value }, label)));
    sort.addEventListener('change', () => { query.sort = sort.value; query.offset = 0; remember(); refresh(); });
    const chips = h('div', { class: 'chips', role: 'group', 'aria-label': 'Show jobs by status' });
    const note = h('p', { class: 'muted', 'aria-live': 'polite' });
    const table = h('div', {});
    const pager = h('div', { class: 'pager' });
    fill(main, h('h1', {}, 'Jobs'),
      h('div', { class: 'filters' },
        h('span', {}, h('label', { for: 'job-filter' }, 'Filter'), search),
        h('span', {}, h('label', { for: 'job-sort' }, 'Sort by'), sort)),
      chips, note, table, pager, legend());
    async function refresh() {
      const p = new URLSearchParams({ status: query.status, sort: query.sort, offset: String(query.offset), limit: String(PAGE) });
      if (query.q) p.set('q', query.q);
      const answer = await api('GET', '/v1/jobs?' + p);
      if (!rendered) performance.mark('zkcron-answered');
      if (!answer.ok) { fill(note, failure(answer)); return; }
      const page = answer.body;
      fill(chips, STATUSES.map((status) => h('button', {
        type: 'button', 'aria-pressed': String(query.status === status), 'data-key': 'status:' + status,
        on: { click: () => { query.status = status; query.offset = 0; remember(); refresh(); } },
      }, words(status) + ' (' + page.counts[status] + ')')));
      fill(note, page.index.ready ? '' : 'Reading the run history: ' + page.index.jobs_loaded + ' of ' + page.index.jobs_to_load + ' jobs so far.');
      fill(table, h('div', { class: 'table-wrap' }, h('table', { id: 'jobs' },
        h('caption', { class: 'skip' }, 'Jobs'),
        h('thead', {}, h('tr', {},
          h('th', { scope: 'col' }, 'Job'), h('th', { scope: 'col' }, 'Schedule'),
          h('th', { scope: 'col' }, 'Next'), h('th', { scope: 'col' }, 'Last run'),
          h('th', { scope: 'col' }, 'Missed'), h('th', { scope: 'col', class: 'wide' }, 'Last 30 runs'),
          h('th', { scope: 'col' }, 'Steer'))),
        h('tbody', {}, page.jobs.length ? page.jobs.map(jobRow)
          : h('tr', {}, h('td', { colspan: 7, class: 'muted' }, 'No job matches.'))))));
      if (!rendered) performance.mark('zkcron-drawn');
      const last = Math.min(page.offset + page.jobs.length, page.matched);
      fill(pager,
        h('button', { type: 'button', 'data-key': 'prev', disabled: page.offset === 0,
          on: { click: () => { query.offset = Math.max(0, query.offset - PAGE); remember(); refresh(); } } }, '← Previous'),
        h('span', {}, page.matched ? (page.offset + 1) + '–' + last + ' of ' + page.matched + ' matching' : '0 matching',
          ' (' + page.total + ' declared)'),
        h('button', { type: 'button', 'data-key': 'next', disabled: last >= page.matched,
          on: { click: () => { query.offset += PAGE; remember(); refresh(); } } }, 'Next →'));
    }
    return { refresh };
  }
  function strip(runs) {
    const counts = {};
    for (const run of runs) counts[run.status] = (counts[run.status] || 0) + 1;
    const label = runs.length ? 'last ' + runs.length + ' runs: ' + Object.entries(counts).map(([s, n]) => n + ' ' + words(s)).join(', ') : 'no runs kept';
    return h('div', { class: 'strip', role: 'img', 'aria-label': label },
      runs.map((run) => h('span', { class: 's-' + run.status, title: new Date(run.scheduled_unix_ms).toISOString() + ' ' + words(run.status) })));
  }
  function legend() {
    return h('div', { class: 'legend', 'aria-hidden': 'true' },
      ['succeeded', 'failed', 'timed_out', 'interrupted', 'missed', 'skipped', 'cancelled', 'running'].map(
        (s) => h('span', {}, h('span', { class: 'status s-' + s }, words(s)))));
  }
  // A broadcast job's nodes: "on every node", or "on every node tagged web, eu".
  function broadcastText(job) {
    return 'on every node' + (job.broadcast.length ? ' tagged ' + job.broadcast.join(', ') : '');
  }
  // A chained job's parents: "after extract, clean (succeeded)".
  function afterText(job) {
    return 'after ' + job.after.join(', ') + ' (' + job.after_status + ')';
  }
  function jobRow(job) {
    const last = job.last;
    return h('tr', { 'data-job': job.name },
      h('td', {}, jobLink(job.name),
        job.group !== 'default' ? h('div', { class: 'muted' }, 'group ' + job.group) : null,
        job.paused ? h('div', { title: 'since ' + new Date(job.paused.since_unix_ms).toISOString() }, badge('paused', 'paused'),
          h('span', { class: 'muted' }, ' by ' + job.paused.by + (job.paused.reason ? ': ' + job.paused.reason : ''))) : null,
        !job.enabled ? h('div', {}, badge('skipped', 'disabled')) : null,
        job.running ? h('div', {}, badge('running', 'running now')) : null),
      h('td', {}, job.schedule ? [h('div', {}, job.schedule_words || ''), h('code', {}, job.schedule), h('span', { class: 'muted' }, ' ' + job.timezone),
          job.broadcast ? h('div', { class: 'broadcast muted' }, broadcastText(job)) : null]
        : job.after ? h('span', { class: 'after' }, afterText(job))
        : h('span', { class: 'muted' }, 'on demand')),
      h('td', {}, when(job.next_unix_ms)),
      h('td', { class: 'last' }, !job.indexed ? h('span', { class: 'muted' }, 'reading…')
        : last ? [badge(last.status), ' ', when(last.scheduled_unix_ms),
          h('div', { class: 'muted' }, [last.node_id, took(last), exit(last)].filter(Boolean).join(' · '))]
          : badge(null)),
      h('td', { class: 'missed' }, job.indexed ? String(job.missed_ticks) : '…'),
      h('td', { class: 'wide' }, strip(job.runs)),
      // A broadcast runs on every node on time only: nothing to trigger.
      h('td', { class: 'actions' }, pauseButton(job.name, job.paused), job.broadcast ? null : triggerButton(job.name)));
  }

  // ---- one job ------------------------------------------------------------------------------
  function jobPage(name) {
    const head = h('div', {});
    const runs = h('div', {});
    fill(main, h('p', {}, h('a', { href: '#/jobs' }, '← All jobs')), h('h1', {}, name), head, h('h2', {}, 'Runs'), runs);
    async function refresh() {
      const [row, history] = await Promise.all([
        api('GET', '/v1/jobs?' + new URLSearchParams({ name, limit: '1' })),
        api('GET', '/v1/jobs/' + encodeURIComponent(name) + '/runs?limit=200'),
      ]);
      const job = row.ok && row.body.jobs.length ? row.body.jobs[0] : null;
      if (!job) { fill(head, h('p', {}, 'This node\'s schedule does not declare ' + name + '.')); }
      else {
        fill(head, h('div', { class: 'card' }, h('dl', {},
          h('dt', {}, 'Schedule'), h('dd', {}, job.schedule ? [job.schedule_words ? job.schedule_words + ' · ' : '', h('code', {}, job.schedule), ' ' + job.timezone] : job.after ? afterText(job) : 'on demand'),
          h('dt', {}, 'Next fire'), h('dd', {}, when(job.next_unix_ms)),
          h('dt', {}, 'State'), h('dd', { class: 'state' }, job.paused
            ? [badge('paused', 'paused'), ' by ' + job.paused.by, job.paused.reason ? ': “' + job.paused.reason + '”' : '', ' ', when(job.paused.since_unix_ms)]
            : job.running ? badge('running', 'running now') : job.enabled ? 'active' : 'disabled'),
          h('dt', {}, 'Missed ticks'), h('dd', {}, String(job.missed_ticks) + ' among the kept records'),
          h('dt', {}, 'Group'), h('dd', {}, job.group)),
          h('p', { class: 'actions' }, pauseButton(job.name, job.paused), ' ', triggerButton(job.name))));
      }
      if (!history.ok) { fill(runs, h('p', {}, failure(history))); return; }
      fill(runs, history.body.length ? h('div', { class: 'table-wrap' }, h('table', { id: 'runs' },
        h('thead', {}, h('tr', {},
          h('th', { scope: 'col' }, 'Scheduled'), h('th', { scope: 'col' }, 'Status'),
          h('th', { scope: 'col', class: 'wide' }, 'Started'), h('th', { scope: 'col' }, 'Took'),
          h('th', { scope: 'col' }, 'Node'), h('th', { scope: 'col', class: 'wide' }, 'Token'),
          h('th', { scope: 'col', class: 'wide' }, 'Attempt'), h('th', { scope: 'col' }, 'Exit'))),
        h('tbody', {}, history.body.map(runRow)))) : h('p', { class: 'muted' }, 'No run is kept.'));
    }
    return { refresh };
  }
  function runRow(run) {
    if (run.status === 'missed') {
      const ticks = run.missed_ticks || 1;
      return h('tr', { class: 'gap', 'data-run': run.run_id },
        h('td', { colspan: 8 }, badge('missed'), ' ',
          ticks + (ticks === 1 ? ' tick' : ' ticks') + ' not fired, ',
          run.missed_from_unix_ms ? ['from ', when(run.missed_from_unix_ms), ' to '] : 'at ', when(run.scheduled_unix_ms),
          run.error ? ': ' + run.error : ''));
    }
    const cells = [
      h('td', {}, when(run.scheduled_unix_ms),
        run.submission_id ? h('div', { class: 'muted' }, 'submission ', submissionLink(run.submission_id)) : null,
        run.requested_by ? h('div', { class: 'muted' }, 'triggered by ' + run.requested_by) : null,
        run.backfill ? h('div', { class: 'muted' }, 'backfill') : null),
      h('td', {}, badge(run.status), run.error ? h('div', { class: 'muted' }, run.error) : null,
        run.output ? h('details', {}, h('summary', {}, 'output'), h('pre', {}, run.output)) : null,
        run.started_unix_ms ? h('div', {}, h('a', { href: outputHref(run), class: 'output-link', 'data-key': 'output:' + run.run_id }, 'whole output')) : null),
      h('td', { class: 'wide' }, when(run.started_unix_ms)),
      h('td', {}, took(run)),
      h('td', { class: 'mono' }, run.node_id),
      h('td', { class: 'wide' }, String(run.fencing_token)),
      h('td', { class: 'wide' }, String(run.attempt)),
      h('td', {}, exit(run) || '—'),
    ];
    return h('tr', { 'data-run': run.run_id }, cells);
  }

  // ---- one run's whole output -----------------------------------------------------------------
  // Kept on the node that ran it; this node passes it on. Shown as text, fetched again while the
  // run has not ended.
  function outputHref(run) {
    return '#/jobs/' + encodeURIComponent(run.job) + '/runs/' + encodeURIComponent(run.run_id) + '/output?' +
      new URLSearchParams({ node: run.node_id, attempt: String(run.attempt) });
  }
  function outputPage(job, run, params) {
    const text = h('pre', { id: 'output', class: 'output' });
    const said = h('p', { class: 'muted' });
    fill(main, h('p', {}, h('a', { href: '#/jobs/' + encodeURIComponent(job) }, '← ' + job)),
      h('h1', {}, 'Output of ' + run), said, text);
    let ended = false;
    async function refresh() {
      if (ended) return;
      const query = new URLSearchParams({ node: params.get('node') || '', attempt: params.get('attempt') || '' });
      const answer = await apiText('/v1/jobs/' + encodeURIComponent(job) + '/runs/' + encodeURIComponent(run) + '/output?' + query);
      if (!answer.ok) { fill(said, answer.error); return; }
      ended = /^\S+ zkcron ended: /m.test(answer.text);
      fill(said, 'attempt ' + (params.get('attempt') || '?') + ' on node ' + (params.get('node') || '?') +
        (ended ? '' : ' · still going: shown again every few seconds'));
      text.textContent = answer.text;
    }
    return { refresh };
  }
  async function apiText(path) {
    const headers = { 'X-Zkcron-Client': 'console' };
    if (token()) headers.Authorization = 'Bearer ' + token();
    let response;
    try {
      response = await fetch(path, { headers, credentials: 'omit', cache: 'no-store' });
    } catch (err) {
      return { ok: false, error: 'this node does not answer: ' + err.message };
    }
    const text = await response.text();
    if (response.ok) return { ok: true, text };
    if (response.status === 401 && !declined) needsToken('A run\'s output needs a token.');
    let error = text;
    try { error = JSON.parse(text).error || text; } catch (_) { /* not JSON: said as it is */ }
    return { ok: false, error };
  }

  // ---- submissions --------------------------------------------------------------------------
  function submissionsPage() {
    const input = h('input', { id: 'submission-id', autocomplete: 'off', spellcheck: 'false', placeholder: 'order-42' });
    const form = h('form', { class: 'search', role: 'search' },
      h('label', { for: 'submission-id' }, 'Find a submission by id'), input,
      h('button', { type: 'submit' }, 'Show'));
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      if (input.value.trim()) location.hash = '#/submissions/' + encodeURIComponent(input.value.trim());
    });
    const pendingRegion = h('div', {});
    const recentRegion = h('div', {});
    fill(main, h('h1', {}, 'Submissions'), form,
      h('h2', {}, 'Pending, in due order'), pendingRegion,
      h('h2', {}, 'Recent runs'), recentRegion);
    async function refresh() {
      const [waiting, recent] = await Promise.all([
        api('GET', '/v1/submissions?state=pending&limit=100'),
        api('GET', '/v1/submissions?state=recent&limit=100'),
      ]);
      fill(pendingRegion, !waiting.ok ? h('p', {}, failure(waiting))
        : waiting.body.length ? h('div', { class: 'table-wrap' }, h('table', { id: 'pending' },
          h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Id'), h('th', { scope: 'col' }, 'Job'),
            h('th', { scope: 'col' }, 'Due'), h('th', { scope: 'col', class: 'wide' }, 'Payload'),
            h('th', { scope: 'col' }, 'Steer'))),
          h('tbody', {}, waiting.body.map((s) => h('tr', { 'data-submission': s.id },
            h('td', { class: 'mono' }, submissionLink(s.id)), h('td', {}, jobLink(s.job)),
            h('td', {}, when(s.due_unix_ms)), h('td', { class: 'wide' }, bytes(s.payload_bytes)),
            h('td', { class: 'actions' }, cancelButton(s.id)))))))
          : h('p', { class: 'muted' }, 'Nothing is pending.'));
      fill(recentRegion, !recent.ok ? h('p', {}, failure(recent))
        : recent.body.length ? h('div', { class: 'table-wrap' }, h('table', { id: 'recent' },
          h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Id'), h('th', { scope: 'col' }, 'Job'),
            h('th', { scope: 'col' }, 'Due'), h('th', { scope: 'col' }, 'Status'),
            h('th', { scope: 'col', class: 'wide' }, 'Node'), h('th', { scope: 'col' }, 'Took'))),
          h('tbody', {}, recent.body.map((r) => h('tr', { 'data-submission': r.submission_id },
            h('td', { class: 'mono' }, submissionLink(r.submission_id)), h('td', {}, jobLink(r.job)),
            h('td', {}, when(r.scheduled_unix_ms)), h('td', {}, badge(r.status), ' ', exit(r)),
            h('td', { class: 'wide mono' }, r.node_id), h('td', {}, took(r)))))))
          : h('p', { class: 'muted' }, 'No submission run is kept.'));
    }
    return { refresh };
  }
  function submissionPage(id) {
    const body = h('div', {});
    fill(main, h('p', {}, h('a', { href: '#/submissions' }, '← Submissions')), h('h1', {}, 'Submission ', h('span', { class: 'mono' }, id)), body);
    async function refresh() {
      const answer = await api('GET', '/v1/submissions/' + encodeURIComponent(id));
      if (!answer.ok) { fill(body, h('p', { role: 'alert' }, failure(answer))); return; }
      const s = answer.body;
      const record = s.record;
      fill(body, h('div', { class: 'card' }, h('dl', {},
        h('dt', {}, 'Job'), h('dd', {}, jobLink(s.job)),
        h('dt', {}, 'Due'), h('dd', {}, when(s.due_unix_ms)),
        h('dt', {}, 'Submitted'), h('dd', {}, when(s.submitted_unix_ms)),
        h('dt', {}, 'State'), h('dd', { class: 'state' }, record ? badge(record.status) : s.state),
        s.requested_by ? [h('dt', {}, 'Triggered by'), h('dd', {}, s.requested_by)] : null,
        s.retry_of ? [h('dt', {}, 'Retry of'), h('dd', {}, submissionLink(s.retry_of))] : null,
        record ? [h('dt', {}, 'Ran on'), h('dd', {}, record.node_id + ' · ' + took(record) + (exit(record) ? ' · ' + exit(record) : ''))] : null,
        record && record.error ? [h('dt', {}, 'Error'), h('dd', {}, record.error)] : null,
        h('dt', {}, 'Payload'), h('dd', {}, bytes(s.payload_bytes) + (s.payload_bytes ? ', shown as ' + s.payload.kind + (s.payload.truncated ? ' (the first bytes)' : '') : ''))),
        s.state === 'pending' ? h('p', {}, cancelButton(id)) : null),
        s.payload_bytes ? h('pre', { id: 'payload', class: 'payload-' + s.payload.kind }, s.payload.shown) : null,
        record && record.output ? [h('h2', {}, 'Output'), h('pre', {}, record.output)] : null);
    }
    return { refresh };
  }

  // The operator actions of the last week, newest first: who did what, from where, how it ended.
  function auditPage() {
    const region = h('div', {});
    fill(main, h('h1', {}, 'Audit'),
      h('p', { class: 'muted' }, 'Every pause, resume, trigger, release, backfill, and cancel, reschedule or retry of a submission, and every write refused for its token, of the last seven days.'),
      region);
    async function refresh() {
      const since = Date.now() - 7 * 24 * 3600 * 1000;
      const answer = await api('GET', '/v1/audit?since_unix_ms=' + since);
      if (!answer.ok) { fill(region, h('p', { role: 'alert' }, failure(answer))); return; }
      const entries = answer.body.slice().reverse();
      const details = (e) => Object.entries(e.args || {}).map(([k, v]) => k + '=' + v).join(' ');
      fill(region, entries.length ? h('div', { class: 'table-wrap' }, h('table', { id: 'audit' },
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'When'), h('th', { scope: 'col' }, 'Action'),
          h('th', { scope: 'col' }, 'Job'), h('th', { scope: 'col' }, 'By'), h('th', { scope: 'col' }, 'From'),
          h('th', { scope: 'col', class: 'wide' }, 'Details'), h('th', { scope: 'col' }, 'Result'))),
        h('tbody', {}, entries.map((e) => h('tr', { 'data-action': e.action },
          h('td', {}, when(e.at_unix_ms)), h('td', {}, e.action), h('td', {}, e.job ? jobLink(e.job) : '–'),
          h('td', {}, e.by), h('td', {}, e.from), h('td', { class: 'wide mono' }, details(e)),
          h('td', {}, e.result === 'ok' ? badge('succeeded', 'ok') : badge('failed', e.result)))))))
        : h('p', { class: 'muted' }, 'No operator action in the last seven days.'));
    }
    return { refresh };
  }

  // ---- routing and refresh ------------------------------------------------------------------
  function route() {
    const hash = location.hash.replace(/^#/, '') || '/';
    const [path, search] = hash.split('?');
    const params = new URLSearchParams(search || '');
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    let section = 'overview';
    if (parts[0] === 'jobs' && parts[2] === 'runs' && parts[4] === 'output') { section = 'jobs'; view = outputPage(parts[1], parts[3], params); }
    else if (parts[0] === 'jobs' && parts[1]) { section = 'jobs'; view = jobPage(parts[1]); }
    else if (parts[0] === 'jobs') { section = 'jobs'; view = jobsPage(params); }
    else if (parts[0] === 'submissions' && parts[1]) { section = 'submissions'; view = submissionPage(parts[1]); }
    else if (parts[0] === 'submissions') { section = 'submissions'; view = submissionsPage(); }
    else if (parts[0] === 'audit') { section = 'audit'; view = auditPage(); }
    else { view = overviewPage(); }
    for (const link of document.querySelectorAll('nav a')) {
      if (link.dataset.nav === section) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
    document.title = 'zkcron · ' + section;
    tick();
  }
  // bench/console.sh reads this mark: the first frame with the page's data, from the start of
  // the navigation.
  function drawn() {
    if (rendered) return;
    rendered = true;
    requestAnimationFrame(() => performance.mark('zkcron-rendered'));
  }
  async function tick() {
    if (confirmDialog.open || tokenDialog.open) return;
    if (busy) { again = true; return; }
    busy = true;
    try {
      const shown = view;
      // A page's own data and the overview (the banners) are asked at once and drawn as each
      // comes; the overview page draws from the overview answer itself.
      const own = shown && !shown.fromOverview ? shown.refresh().then(drawn) : null;
      const answer = await api('GET', '/v1/overview');
      overview = answer.ok ? answer.body : { node: { connected: false, node_id: '?' }, cluster: null, error: answer.body && answer.body.error, paused: [], running: [], failing: [], jobs_declared: 0 };
      banners();
      if (shown && shown.fromOverview) await shown.refresh().then(drawn);
      await own;
      document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    } finally {
      busy = false;
    }
    if (again) { again = false; tick(); }
  }
  window.addEventListener('hashchange', () => { document.getElementById('answer').replaceChildren(); route(); main.focus(); });
  showWho();
  route();
  setInterval(tick, REFRESH_MS);
})();
