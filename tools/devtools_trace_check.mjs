// Loads a csan-lint Chrome trace (`csan-lint --replay T --format chrome`, `--trace-out`) with the
// trace engine of Chrome DevTools' Performance panel, and checks that it sees what was drawn:
// every slice on a named thread, every arrow (flow) bound at both ends. The engine is fetched
// from npm, never committed:
//
//   npm install --prefix /tmp/devtools @paulirish/trace_engine@0.0.65
//   node tools/devtools_trace_check.mjs /tmp/devtools run.json
//
// Prints what it found; exit status 1 if a slice, a thread name or an arrow was lost.
import fs from 'node:fs';
import path from 'node:path';
import {pathToFileURL} from 'node:url';

const [prefix, tracePath] = process.argv.slice(2);
if (!prefix || !tracePath) {
  console.error('usage: node tools/devtools_trace_check.mjs NPM_PREFIX TRACE.json');
  process.exit(2);
}
const engine = path.join(prefix, 'node_modules/@paulirish/trace_engine/models/trace/trace.js');
const Trace = await import(pathToFileURL(engine).href);
// The engine's insights measure layout boxes, which Node lacks.
globalThis.DOMRect ??= class { constructor(x = 0, y = 0, width = 0, height = 0) { Object.assign(this, {x, y, width, height}); } };

const document = JSON.parse(fs.readFileSync(tracePath, 'utf8'));
const model = Trace.TraceModel.Model.createWithAllHandlers();
await model.parse(document.traceEvents);
const parsed = model.parsedTrace(0) ?? model.parsedTrace();
const data = parsed.data ?? parsed;

const threads = [];
for (const [pid, process_] of data.Renderer.processes) {
  for (const [tid, thread] of process_.threads) threads.push({pid, tid, name: thread.name, entries: thread.entries.length});
}
const key = event => `${event.pid}/${event.tid}@${event.ts}`;
const linked = new Set(data.Flows.flows.flatMap(flow => flow.map(key)));
const starts = new Map(document.traceEvents.filter(e => e.ph === 's').map(e => [`${e.cat}:${e.id}`, e]));
const arrows = document.traceEvents.filter(e => e.ph === 'f').map(end => [starts.get(`${end.cat}:${end.id}`), end]);
const bound = arrows.filter(([start, end]) => start && linked.has(key(start)) && linked.has(key(end)));
const slices = document.traceEvents.filter(e => e.ph === 'X').length;
const entries = threads.reduce((sum, thread) => sum + thread.entries, 0);
const unnamed = threads.filter(thread => !thread.name);
const summary = {
  threads: threads.map(thread => thread.name),
  slices, slicesOnThreads: entries,
  arrows: arrows.length, arrowsBound: bound.length,
  races: arrows.filter(([start]) => start?.cat === 'race').length,
};
console.log(JSON.stringify(summary, null, 1));
process.exit(entries === slices && bound.length === arrows.length && unnamed.length === 0 ? 0 : 1);
