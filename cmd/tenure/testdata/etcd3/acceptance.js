'use strict';
// The npm etcd3 client against a group of tenure etcd serve nodes: the
// scenario of TestEtcd3Node (cmd/tenure/etcd3_node_test.go), which starts
// the nodes, runs this script with node and asserts on what it prints.
//
// Environment: TENURE_ETCD_ENDPOINTS (every node's client URL, comma
// separated) and TENURE_ETCD_TTL (the TTL of the leases, in seconds).
//
// The script prints one JSON object a line on stdout, each with a "step".
// It reports what the client saw, not verdicts: the Go test checks it. At
// the line {"step":"kill-leader"} the test kills the group's leader and
// answers "killed" on stdin; the script keeps writing meanwhile. The last
// line is {"step":"done"}; a failure prints {"step":"error"} and exits 1.

const { Etcd3 } = require('etcd3');
const readline = require('readline');

const hosts = process.env.TENURE_ETCD_ENDPOINTS.split(',');
const ttl = Number(process.env.TENURE_ETCD_TTL || '3');

function emit(step, fields) {
  process.stdout.write(JSON.stringify({ step, ...fields }) + '\n');
}

const delay = ms => new Promise(resolve => setTimeout(resolve, ms));

// eventually polls f until it returns a value other than undefined, and
// fails after ms.
async function eventually(what, ms, f) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v !== undefined) {
      return v;
    }
    if (Date.now() > deadline) {
      throw new Error(`${what}: not within ${ms} ms`);
    }
    await delay(50);
  }
}

// within rejects if p does not settle within ms.
function within(what, ms, p) {
  let timer;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
    }),
  ]);
}

const errText = e => `${e && e.constructor ? e.constructor.name : 'Error'}: ${e && e.message}`;

const newClient = () => new Etcd3({ hosts });

// "killed" lines from the test, one per kill-leader request.
const lines = readline.createInterface({ input: process.stdin });
const killed = [];
let onKilled = () => {};
lines.on('line', line => {
  killed.push(line.trim());
  onKilled();
});
function waitKilled() {
  return new Promise(resolve => {
    if (killed.length > 0) {
      resolve(killed[0]);
      return;
    }
    onKilled = () => resolve(killed[0]);
  });
}

// record records a watcher's events in the order the client emits them,
// the member ID of the node that answered each (re)creation, its
// disconnections and errors.
function record(watcher) {
  const events = [];
  const state = { watcher, events, members: [], disconnects: [], errors: [] };
  watcher.on('put', kv => events.push({ type: 'PUT', key: kv.key.toString(), value: kv.value.toString(), rev: Number(kv.mod_revision) }));
  watcher.on('delete', kv => events.push({ type: 'DELETE', key: kv.key.toString(), rev: Number(kv.mod_revision) }));
  watcher.on('connected', res => state.members.push(String(res.header.member_id)));
  watcher.on('disconnected', e => state.disconnects.push(errText(e)));
  watcher.on('error', e => state.errors.push(errText(e)));
  return state;
}

// watch starts a watch of prefix from startRev on client, recorded from its
// creation on.
async function watch(client, prefix, startRev) {
  const watcher = client.watch().prefix(prefix).startRevision(String(startRev)).watcher();
  const state = record(watcher);
  await within(`watch ${prefix}`, 20000, new Promise((resolve, reject) => {
    watcher.once('connected', resolve);
    watcher.once('error', reject);
  }));
  return state;
}

// lastRev is the highest revision among events.
const lastRev = events => events.reduce((m, e) => Math.max(m, e.rev), 0);

async function kv(c) {
  const revs = [];
  for (const [k, v] of [['a/1', 'one'], ['a/2', 'two'], ['a/3', 'three'], ['b', 'bee']]) {
    revs.push(Number((await c.put(k).value(v).exec()).header.revision));
  }
  const get = await c.get('a/2').string();
  const prefix = await c.getAll().prefix('a/').strings();
  const count = await c.getAll().prefix('a/').count();
  const limited = await c.getAll().prefix('a/').sort('Key', 'Ascend').limit(2).exec();
  const updateRev = Number((await c.put('a/1').value('uno').exec()).header.revision);
  const atFirst = await c.get('a/1').revision(revs[0]).string();
  const latest = (await c.get('a/1').exec()).kvs[0];
  const deletedPrev = await c.delete().key('a/3').getPrevious();
  const deleted = await c.delete().prefix('a/').exec();
  const afterDelete = await c.get('a/3').string();
  const remaining = await c.getAll().prefix('a/').count();
  emit('kv', {
    putRevisions: revs,
    get,
    prefix,
    count,
    limitedKeys: limited.kvs.map(kv => kv.key.toString()),
    limitedMore: limited.more,
    limitedCount: Number(limited.count),
    updateRevision: updateRev,
    atFirstRevision: atFirst,
    latest: { value: latest.value.toString(), createRevision: Number(latest.create_revision), modRevision: Number(latest.mod_revision), version: Number(latest.version) },
    deletedPrev: deletedPrev.map(kv => [kv.key.toString(), kv.value.toString()]),
    deletedCount: Number(deleted.deleted),
    afterDelete,
    remaining,
  });
}

async function txn(c) {
  await c.put('t').value('1');
  const cas = () => c.if('t', 'Value', '==', '1').then(c.put('t').value('2')).else(c.get('t')).commit();
  const first = await cas();
  const second = await cas();
  const elseKvs = second.responses.length > 0 && second.responses[0].response_range ? second.responses[0].response_range.kvs : [];
  emit('txn', {
    first: first.succeeded,
    second: second.succeeded,
    secondElse: elseKvs.map(kv => kv.value.toString()),
    value: await c.get('t').string(),
  });
}

// putLoop writes w/00000, w/00001, ... until stopped, each until a put of
// it is acknowledged, and records every acknowledgement and failure.
function putLoop(c) {
  const loop = { acked: [], failures: [], stop: false, ackedAfter: () => 0 };
  loop.done = (async () => {
    for (let i = 0; !loop.stop; i++) {
      const key = `w/${String(i).padStart(5, '0')}`;
      const value = `v${i}`;
      for (;;) {
        try {
          const r = await c.put(key).value(value).options({ deadline: Date.now() + 15000 }).exec();
          loop.acked.push({ key, value, rev: Number(r.header.revision), at: Date.now() });
          break;
        } catch (e) {
          loop.failures.push({ key, error: errText(e), at: Date.now() });
          if (loop.failures.length > 500) {
            throw new Error(`put ${key}: 500 failures, the last ${errText(e)}`);
          }
          await delay(100);
        }
      }
    }
  })();
  return loop;
}

// large reads a prefix whose answer (2 MB) is larger than a request may be
// (--max-request-bytes, 1.5 MiB by default) but within what grpc-js
// receives (4 MiB), then deletes it.
async function large(c) {
  const n = 5;
  const size = 400 << 10;
  for (let i = 0; i < n; i++) {
    await c.put(`big/${i}`).value(Buffer.alloc(size, String(i)));
  }
  const r = await c.getAll().prefix('big/').exec();
  emit('large', {
    count: Number(r.count),
    keys: r.kvs.map(kv => kv.key.toString()),
    sizes: r.kvs.map(kv => kv.value.length),
    intact: r.kvs.map((kv, i) => kv.value.equals(Buffer.alloc(size, String(i)))),
  });
  await c.delete().prefix('big/');
}

async function main() {
  const c = newClient();
  await kv(c);
  await txn(c);
  await large(c);

  // The watchers, on a client of their own whose stream the leader
  // serves, so that the kill makes the client resume them on another node.
  // The client picks an endpoint at random: new clients are made until one
  // lands on the leader.
  const startRev = Number((await c.get('t').exec()).header.revision) + 1;
  const leaderBefore = String((await c.maintenance.status()).leader);
  let watchClient;
  let ww;
  for (let tries = 1; ; tries++) {
    watchClient = newClient();
    ww = await watch(watchClient, 'w/', startRev);
    if (ww.members[0] === leaderBefore) {
      break;
    }
    await ww.watcher.cancel();
    watchClient.close();
    if (tries === 50) {
      throw new Error(`50 watch clients, none on the leader ${leaderBefore}`);
    }
  }
  const lw = await watch(watchClient, 'l/', startRev);

  // A lease kept alive through the leader's kill.
  const kept = c.lease(ttl);
  const keptStats = { succeeded: 0, succeededAfterKill: 0, failed: [], lost: [] };
  let killedAt = 0;
  kept.on('keepaliveSucceeded', () => {
    keptStats.succeeded++;
    if (killedAt && Date.now() > killedAt) {
      keptStats.succeededAfterKill++;
    }
  });
  kept.on('keepaliveFailed', e => keptStats.failed.push({ error: errText(e), at: Date.now() }));
  kept.on('lost', e => keptStats.lost.push(errText(e)));
  const keptID = await kept.grant();
  await kept.put('l/kept').value('k');

  // The election: alpha campaigns first and leads, beta waits; an observer
  // on a third client follows the leader.
  const clientA = newClient();
  const clientB = newClient();
  const clientObs = newClient();
  const campaignErrors = [];
  const alpha = clientA.election('acceptance', ttl).campaign('alpha');
  alpha.on('error', e => campaignErrors.push(`alpha: ${errText(e)}`));
  await within('alpha elected', 20000, alpha.wait());
  let betaElected = false;
  const beta = clientB.election('acceptance', ttl).campaign('beta');
  beta.on('error', e => campaignErrors.push(`beta: ${errText(e)}`));
  beta.on('elected', () => {
    betaElected = true;
  });
  const observer = await clientObs.election('acceptance', ttl).observe();
  const changes = [];
  observer.on('change', v => changes.push(v === undefined ? null : v));
  observer.on('error', e => campaignErrors.push(`observer: ${errText(e)}`));
  const elected = await clientObs.election('acceptance', ttl).leader();
  emit('election', { leader: elected, observed: observer.leader() || null, betaElected });

  // Writes go on while the test kills the leader.
  const loop = putLoop(c);
  await eventually('20 puts before the kill', 30000, () => (loop.acked.length >= 20 ? true : undefined));
  // The lease left to expire is granted just before the kill, so that the
  // new leader expires it.
  const expiringGrantStart = Date.now();
  const expiring = c.lease(ttl, { autoKeepAlive: false });
  const expiringID = await expiring.grant();
  await expiring.put('l/expiring').value('e');
  emit('leases', { kept: keptID, expiring: expiringID, expiringPresent: await c.get('l/expiring').string() });
  emit('kill-leader', { ackedBefore: loop.acked.length });
  const victim = await within('the kill', 60000, waitKilled());
  killedAt = Date.now();
  const ackedAtKill = loop.acked.length;

  // The expiring lease, granted before the kill, expires under the new
  // leader.
  await eventually('the expiring lease expires', 30000, async () =>
    (await c.get('l/expiring').string()) === null ? true : undefined);
  const expiredAfter = Date.now() - expiringGrantStart;

  // The kept lease lives on for three TTLs after the kill, and 20 more
  // writes are acknowledged.
  await eventually('20 puts after the kill', 30000, () => (loop.acked.length >= ackedAtKill + 20 ? true : undefined));
  await eventually('three TTLs after the kill', 60000, () => (Date.now() - killedAt >= 3 * ttl * 1000 ? true : undefined));
  loop.stop = true;
  await loop.done;
  const keptValue = await c.get('l/kept').string();
  const keptTTL = await c.leaseClient.leaseTimeToLive({ ID: keptID, keys: true });
  emit('kept', {
    victim,
    value: keptValue,
    ttl: Number(keptTTL.TTL),
    grantedTTL: Number(keptTTL.grantedTTL),
    keys: (keptTTL.keys || []).map(k => k.toString()),
    keepalives: keptStats.succeeded,
    keepalivesAfterKill: keptStats.succeededAfterKill,
    // Each failure the client saw, with when: ms after the kill.
    keepaliveFailures: keptStats.failed.map(f => ({ error: f.error, ms: f.at - killedAt })),
    lost: keptStats.lost,
  });

  // Every acknowledged write reads back, at the revision acknowledged.
  const all = await c.getAll().prefix('w/').exec();
  const stored = {};
  for (const kv of all.kvs) {
    stored[kv.key.toString()] = { value: kv.value.toString(), rev: Number(kv.mod_revision) };
  }
  emit('puts', {
    acked: loop.acked.map(a => ({ key: a.key, value: a.value, rev: a.rev })),
    ackedBeforeKill: ackedAtKill,
    failures: loop.failures.map(f => ({ key: f.key, error: f.error, afterKill: f.at >= killedAt })),
    stored,
  });

  // The election held through the kill; alpha resigns and beta leads.
  const leaderAfterKill = await clientObs.election('acceptance', ttl).leader();
  const betaElectedAfterKill = betaElected;
  await alpha.resign();
  await within('beta elected', 20000, beta.wait());
  await eventually('the observer sees beta', 20000, () => (observer.leader() === 'beta' ? true : undefined));
  emit('election-after', {
    leaderAfterKill,
    betaElectedAfterKill,
    leaderAfterResign: await clientObs.election('acceptance', ttl).leader(),
    observed: observer.leader() || null,
    changes,
    errors: campaignErrors,
  });

  // The kept lease is revoked: its key goes.
  await kept.revoke();
  const afterRevoke = await c.get('l/kept').string();

  // The live watchers catch up to the last write, then a watch from the
  // first revision reads the same history back.
  const endRev = Number((await c.get('l/kept').exec()).header.revision);
  const lastWrite = Math.max(...loop.acked.map(a => a.rev));
  await eventually('the w/ watcher sees the last write', 30000, () => (lastRev(ww.events) >= lastWrite ? true : undefined));
  await eventually('the l/ watcher sees the revoke', 30000, () =>
    (lw.events.some(e => e.type === 'DELETE' && e.key === 'l/kept') ? true : undefined));
  const historyClient = newClient();
  const hw = await watch(historyClient, 'w/', startRev);
  await eventually('the history watcher reaches the last write', 30000, () => (lastRev(hw.events) >= lastWrite ? true : undefined));
  const leaderAfter = String((await c.maintenance.status()).leader);
  emit('watch', {
    leaderBefore,
    leaderAfter,
    members: ww.members,
    startRevision: startRev,
    endRevision: endRev,
    events: ww.events,
    history: hw.events,
    leaseEvents: lw.events,
    disconnects: ww.disconnects,
    errors: ww.errors.concat(lw.errors, hw.errors),
  });
  emit('revoked', { afterRevoke, expiredAfterMs: expiredAfter, ttl });

  await observer.cancel();
  for (const x of [c, watchClient, clientA, clientB, clientObs, historyClient]) {
    x.close();
  }
  lines.close();
  emit('done', {});
}

main().then(
  () => process.exit(0),
  e => {
    emit('error', { message: errText(e), stack: String(e && e.stack) });
    process.exit(1);
  },
);
