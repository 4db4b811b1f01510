// End-to-end test of `revl mcp` through the official TypeScript MCP SDK client: the short
// version of client_py.py, so that two independent clients agree.
//
// Usage: node client_ts.mjs /path/to/revl /path/to/dir-with-node_modules
//
// A loopback HTTP sink (127.0.0.1, ephemeral port) counts every request. The scenario:
// write files, provide a key, hold a send, approve an emission from the terminal while
// the server runs, fork over it (the report lists it in emissionsCrossed), confirm, check
// the bytes on disk and that the rewind sent nothing, commit the branch (exactly its sends
// arrive), and see the frozen parent refuse through a second server.

import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, existsSync, writeFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const REVL = process.argv[2] ?? process.env.REVL_BIN ?? "revl";
const NODE_DIR = process.argv[3] ?? process.env.REVL_TEST_NODE_DIR;
if (!NODE_DIR) {
  console.error("client_ts: give the directory holding node_modules (argv[3] or REVL_TEST_NODE_DIR)");
  process.exit(2);
}
const sdk = (p) => pathToFileURL(join(NODE_DIR, "node_modules/@modelcontextprotocol/sdk/dist/esm", p)).href;
const { Client } = await import(sdk("client/index.js"));
const { StdioClientTransport } = await import(sdk("client/stdio.js"));

let checks = 0;
function check(cond, what, detail) {
  if (!cond) throw new Error(what + (detail === undefined ? "" : ": " + JSON.stringify(detail)));
  checks++;
}

// ---- the sink ----
const received = [];
const sink = createServer((req, res) => {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    received.push({ path: req.url, body: body ? JSON.parse(body) : null });
    res.writeHead(200, { "content-type": "application/json" });
    res.end('{"ok": true}');
  });
});
await new Promise((r) => sink.listen(0, "127.0.0.1", r));
const url = (p) => `http://127.0.0.1:${sink.address().port}${p}`;
const count = (p) => received.filter((x) => p === undefined || x.path === p).length;

const tmp = mkdtempSync(join(tmpdir(), "revl-mcp-ts-"));
const store = join(tmp, "store");
const ws = join(tmp, "ws");
const manifest = join(tmp, "revl.toml");
writeFileSync(
  manifest,
  `
[[tool]]
name = "send_email"
class = "deferred"
service = "mail"
method = "send"
scope = ["mail"]
http = { method = "POST", url = "${url("/send")}" }

[[tool]]
name = "post_note"
class = "emission"
service = "notes"
method = "post"
scope = ["net"]
http = { method = "POST", url = "${url("/emit")}" }
`,
);
const disk = (rel) => (existsSync(join(ws, rel)) ? readFileSync(join(ws, rel), "utf8") : null);

const clients = [];
async function connect(args) {
  const transport = new StdioClientTransport({ command: REVL, args: ["--store", store, "mcp", ...args], stderr: "inherit" });
  const client = new Client({ name: "revl-test-ts", version: "1.0.0" });
  await client.connect(transport);
  clients.push(client);
  return client;
}

function docOf(r) {
  check(r.structuredContent !== undefined, "a result carries structured content", r);
  const text = r.content.find((c) => c.type === "text");
  check(text !== undefined, "a result carries the JSON as text", r);
  check(JSON.stringify(JSON.parse(text.text)) === JSON.stringify(r.structuredContent), "text and structured content agree");
  return r.structuredContent;
}
async function ok(c, name, args = {}) {
  const r = await c.callTool({ name, arguments: args });
  const d = docOf(r);
  check(!r.isError, `${name} succeeds`, d);
  return d;
}
async function refused(c, name, args = {}) {
  const r = await c.callTool({ name, arguments: args });
  const d = docOf(r);
  check(r.isError === true, `${name} is refused with isError`, d);
  return d;
}

const started = Date.now();
try {
  const c = await connect(["--workspace", ws, "--manifest", manifest]);
  const names = (await c.listTools()).tools.map((t) => t.name).sort();
  check(names.length === 26 && names.includes("revl_log") && names.includes("revl_diff") && names.includes("revl_fork_confirm") && names.includes("revl_note_model"), "the tool set", names);
  check(!names.some((n) => /approve|resend|recover/.test(n)), "no operator tool", names);
  check((c.getInstructions() ?? "").includes("approv"), "server instructions");

  const parent = (await ok(c, "revl_status")).session;
  await ok(c, "revl_write", { path: "a.txt", content: "one\n" });
  const k = (await ok(c, "revl_boundary", {})).step;
  await ok(c, "revl_provide", { key: "token", value: "s3cret" });
  await ok(c, "revl_write", { path: "a.txt", content: "two\n" });
  await ok(c, "revl_write", { path: "new.txt", content: "later\n" });
  check((await ok(c, "revl_call", { tool: "send_email", args: { subject: "parent" } })).queued === true, "held send");
  const need = await refused(c, "revl_call", { tool: "post_note", args: { text: "hi" } });
  check(need.approvalRequired === true && typeof need.ticket === "string", "approval required", need);
  const ap = spawnSync(REVL, ["--store", store, "approve", parent, "--ticket", need.ticket], { encoding: "utf8" });
  check(ap.status === 0, "revl approve --ticket from the terminal while the server runs", ap.stderr);
  const emitted = await ok(c, "revl_call", { tool: "post_note", args: { text: "hi" } });
  check(count("/emit") === 1 && count("/send") === 0, "the emission arrived, the held send did not", received);

  const report = await ok(c, "revl_fork", { at: k });
  check(report.emissionsCrossed.some((e) => e.index === emitted.step), "emissionsCrossed lists the emission", report);
  check(report.droppedDeferred.length === 1, "the held send will be dropped", report.droppedDeferred);
  check(disk("a.txt") === "two\n", "enumeration changed no file");
  const forked = await ok(c, "revl_fork_confirm", { hash: report.hash });
  check(forked.forked === true && forked.branch, "forked", forked);
  check(disk("a.txt") === "one\n" && disk("new.txt") === null, "the files are back at step k on disk");
  check(count() === 1, "the rewind sent nothing", received);
  const st = await ok(c, "revl_status");
  check(st.session === forked.branch && st.parent === parent, "the server continues on the branch", st);

  const esc = await refused(c, "revl_write", { path: "../x", content: "no" });
  check(esc.error.code === "path-outside", "path escape", esc);
  const bad = await refused(c, "revl_inspect_step", { at: "x" });
  check(bad.error.code === "bad-args", "wrong argument type", bad);
  let unknown = null;
  try {
    await c.callTool({ name: "revl_resend", arguments: {} });
  } catch (e) {
    unknown = e;
  }
  check(unknown && /unknown tool/.test(String(unknown.message)), "an unknown tool is a JSON-RPC error", String(unknown));

  await ok(c, "revl_write", { path: "a.txt", content: "branch\n" });
  await ok(c, "revl_call", { tool: "send_email", args: { subject: "branch" } });
  const plan = await ok(c, "revl_commit");
  check(count("/send") === 0, "nothing sent before commit-confirm");
  const done = await ok(c, "revl_commit_confirm", { hash: plan.hash });
  check(done.committed === true, "committed", done);
  const sends = received.filter((x) => x.path === "/send").map((x) => x.body.subject);
  check(JSON.stringify(sends) === '["branch"]', "exactly the branch's send arrived", sends);
  await c.close();

  const p = await connect(["--session", parent]);
  const frozen = await refused(p, "revl_write", { path: "p.txt", content: "no" });
  check(frozen.error.code === "frozen" && frozen.error.message.includes("frozen"), "the frozen parent refuses", frozen);
  check((await ok(p, "revl_read", { path: "a.txt" })).content === "branch\n", "reads work on the frozen parent");
  await p.close();
  check(disk("p.txt") === null && count() === 2, "nothing else happened", received);
} catch (e) {
  console.error(`client_ts: FAILED after ${checks} checks: ${e.stack ?? e}`);
  console.log("0 passed, 1 failed");
  process.exitCode = 1;
} finally {
  for (const c of clients) await c.close().catch(() => {});
  sink.close();
  rmSync(tmp, { recursive: true, force: true });
}
if (!process.exitCode) {
  console.log(`client_ts: ${checks} checks passed in ${((Date.now() - started) / 1000).toFixed(1)}s`);
  console.log("1 passed, 0 failed");
}
process.exit(process.exitCode ?? 0);
