// Retries, timeouts and odd error bodies. A real 429 (a one-slot embedding queue under
// concurrent load) and a real 503 (a server whose model is missing) come from `loopguard serve`
// itself; what the real server cannot be made to answer on demand (an HTTP-date Retry-After, a
// 503 timeout, a hung answer, a proxy's HTML page) comes from a tiny stub server in this file.

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import {
  Client,
  InvalidResponseError,
  NO_RETRY,
  OverloadedError,
  RequestTimeoutError,
  RetryPolicy,
  ServerError,
  ServiceUnavailableError,
  TransportError,
  response,
  type RetryEvent,
} from "../src/index.js";
import type { LocalServer } from "../src/testing.js";
import { startServer, task } from "./helpers.js";

const WORDS =
  "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu".split(
    " ",
  );

/** Distinct words, not numbers: equal texts would hit the embedding cache. */
function words(seed: number): string {
  let x = seed;
  const out = [];
  for (let i = 0; i < 60; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    out.push(WORDS[x % WORDS.length]);
  }
  return out.join(" ");
}

describe("a real 429", () => {
  let server: LocalServer;
  before(async () => {
    server = await startServer("one-slot", ["--set", "model.queue_capacity=1", "--set", "model.max_batch=1"]);
  });
  after(async () => server?.stop());

  async function flood(lg: Client, n = 16): Promise<Array<unknown>> {
    const run = task("flood");
    await Promise.all(Array.from({ length: n }, (_, i) => lg.evaluate(response(words(i + 1)), { taskId: `${run}-${i}` })));
    return Promise.all(
      Array.from({ length: n }, (_, i) =>
        lg.evaluate(response(words(1000 + i)), { taskId: `${run}-${i}` }).catch((e: unknown) => e),
      ),
    );
  }

  it("is thrown without retries and absorbed with them", async () => {
    const refused = (await flood(server.client({ retry: NO_RETRY, timeoutMs: 60_000 }))).filter(
      (r) => r instanceof OverloadedError,
    ) as OverloadedError[];
    assert.ok(refused.length, "a one-slot queue under 16 concurrent requests refuses some");
    assert.deepEqual([refused[0]!.status, refused[0]!.code, refused[0]!.retryAfter], [429, "overloaded", 1]);
    const retries: RetryEvent[] = [];
    const results = await flood(
      server.client({ retry: new RetryPolicy({ maxRetries: 20 }), onRetry: (e) => retries.push(e), timeoutMs: 60_000 }),
    );
    assert.ok(results.every((r) => !(r instanceof Error)), String(results.find((r) => r instanceof Error)));
    assert.ok(retries.length, "the flood was refused again, and retried");
    assert.deepEqual(new Set(retries.map((r) => r.delay)), new Set([1]), "the wait is the server's Retry-After");
    assert.ok(retries.every((r) => r.method === "POST" && r.path === "/v1/evaluate" && r.error.code === "overloaded"));
  });
});

describe("a real 503", () => {
  it("is retried, then thrown with its code; nothing was applied", async () => {
    const { LocalServer } = await import("../src/testing.js");
    const { REPO, dataDir } = await import("./helpers.js");
    const server = await LocalServer.start({
      checkout: REPO,
      dataDir: dataDir("no-model"),
      args: ["--set", 'model.dir="/nonexistent/all-MiniLM-L6-v2"'],
    });
    try {
      const retries: RetryEvent[] = [];
      const lg = server.client({ retry: new RetryPolicy({ maxRetries: 2, maxRetryAfter: 0.05 }), onRetry: (e) => retries.push(e) });
      await assert.rejects(lg.waitReady({ timeoutMs: 30_000 }), (e: unknown) => e instanceof ServiceUnavailableError && e.code === "model_unavailable");
      const ready = await lg.readyz();
      assert.ok(ready.status === "failed" && ready.error);
      // The first event of a task needs no model; the second, different one does.
      await lg.evaluate(response("I will read the config"), { taskId: "t" });
      const e = await lg.evaluate(response("Let me look at the logs"), { taskId: "t" }).catch((x: unknown) => x);
      assert.ok(e instanceof ServiceUnavailableError, String(e));
      assert.deepEqual([e.status, e.code, e.retryAfter], [503, "model_unavailable", 5]);
      assert.deepEqual(retries.map((r) => [r.attempt, r.delay]), [[2, 0.05], [3, 0.05]]);
      assert.equal((await lg.getTask("t")).events_total, 1);
    } finally {
      await server.stop();
    }
  });
});

type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

/** A stub server answering each request with the next handler (the last one repeats). */
async function stub(...handlers: Handler[]): Promise<{ url: string; seen: Array<{ method: string; url: string; headers: IncomingMessage["headers"]; body: string }>; close: () => Promise<void> }> {
  const seen: Array<{ method: string; url: string; headers: IncomingMessage["headers"]; body: string }> = [];
  const server: Server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
      const h = handlers[Math.min(seen.length - 1, handlers.length - 1)]!;
      h(req, res, body);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () => {
      server.closeAllConnections();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

function reply(status: number, body: unknown, headers: Record<string, string> = {}): Handler {
  return (_req, res) => {
    res.writeHead(status, { "content-type": typeof body === "string" ? "text/html" : "application/json", ...headers });
    res.end(typeof body === "string" ? body : JSON.stringify(body));
  };
}

const VERDICT = {
  task_id: "t", seq: 1, loop: false, kind: "none", loop_count: 0, counted: false,
  action: { type: "continue", target: null, message: null }, reason: "", pivot_count: 0, status: "active",
};
const TASK = { task_id: "t", root_task_id: "t", status: "active", loop_count: 0, entropy_count: 0, pivot_count: 0, events_total: 1, kind_counts: {}, step_entries: {}, window: [], last_verdicts: [], created_at: "", updated_at: "" };
const TIMEOUT = { code: "timeout", message: "the request took longer than 10000 ms", path: null };

describe("retry rules against a stub", () => {
  it("honours Retry-After as an HTTP date", async () => {
    const s = await stub(reply(429, { code: "overloaded", message: "busy", path: null }, { "retry-after": new Date(Date.now() + 1500).toUTCString() }), reply(200, VERDICT));
    try {
      const retries: RetryEvent[] = [];
      await new Client(s.url, { onRetry: (e) => retries.push(e) }).evaluate(response("x"), { taskId: "t" });
      assert.equal(retries.length, 1);
      assert.ok(retries[0]!.delay > 0 && retries[0]!.delay <= 1.5, String(retries[0]!.delay));
    } finally {
      await s.close();
    }
  });

  it("without Retry-After backs off, doubling up to its cap", () => {
    const p = new RetryPolicy({ backoff: 0.25, maxBackoff: 1, jitter: false });
    const e = new ServiceUnavailableError("storage_error", "x", { status: 503 });
    assert.deepEqual([1, 2, 3, 4].map((a) => p.delay(a, e)), [0.25, 0.5, 1, 1]);
    const jittered = new RetryPolicy({ backoff: 1, random: () => 0 });
    assert.equal(jittered.delay(1, e), 0.5, "jitter waits between half and the whole backoff");
  });

  it("does not resend a write after a 503 timeout but does a read", async () => {
    const s = await stub(reply(503, TIMEOUT, { "retry-after": "0" }), reply(200, TASK));
    try {
      const lg = new Client(s.url);
      const e = await lg.evaluate(response("x"), { taskId: "t" }).catch((x: unknown) => x);
      assert.ok(e instanceof ServiceUnavailableError && e.code === "timeout");
      assert.equal(s.seen.length, 1, "the write was sent once");
      const s2 = await stub(reply(503, TIMEOUT, { "retry-after": "0" }), reply(200, TASK));
      try {
        await new Client(s2.url).getTask("t");
        assert.equal(s2.seen.length, 2, "the read was sent again");
      } finally {
        await s2.close();
      }
    } finally {
      await s.close();
    }
  });

  it("times out on the client and does not resend a write", async () => {
    const s = await stub(() => undefined);
    try {
      const e = await new Client(s.url, { timeoutMs: 200 }).evaluate(response("x"), { taskId: "t" }).catch((x: unknown) => x);
      assert.ok(e instanceof RequestTimeoutError, String(e));
      assert.equal(s.seen.length, 1);
    } finally {
      await s.close();
    }
  });

  it("retries a refused connection, then throws", async () => {
    const s = await stub(reply(200, VERDICT));
    const url = s.url;
    await s.close();
    const retries: RetryEvent[] = [];
    const e = await new Client(url, { retry: new RetryPolicy({ maxRetries: 2, backoff: 0.01 }), onRetry: (r) => retries.push(r) })
      .evaluate(response("x"), { taskId: "t" })
      .catch((x: unknown) => x);
    assert.ok(e instanceof TransportError && e.code === "connect_error", String(e));
    assert.equal(e.status, null);
    assert.equal(retries.length, 2);
  });

  it("turns any error body into a readable error", async () => {
    const cases: Array<[Handler, (e: unknown) => boolean]> = [
      [reply(502, "<html><body>Bad Gateway</body></html>"), (e) => e instanceof ServerError && e.code === "http_502" && e.detail.includes("Bad Gateway")],
      [reply(500, ""), (e) => e instanceof ServerError && e.code === "http_500"],
      [reply(400, { error: "something odd" }), (e) => e instanceof Error && (e as { detail?: string }).detail === "something odd"],
      [reply(418, { code: "teapot", message: "short and stout", path: "x" }), (e) => e instanceof Error && (e as { path?: string }).path === "x"],
    ];
    for (const [h, ok] of cases) {
      const s = await stub(h);
      try {
        const e = await new Client(s.url, { retry: NO_RETRY }).getTask("t").catch((x: unknown) => x);
        assert.ok(ok(e), String(e));
      } finally {
        await s.close();
      }
    }
  });

  it("rejects a 2xx that is not the documented shape", async () => {
    const s = await stub(reply(200, { hello: "world" }), reply(200, "not json"));
    try {
      const lg = new Client(s.url);
      await assert.rejects(lg.evaluate(response("x"), { taskId: "t" }), InvalidResponseError);
      await assert.rejects(lg.getTask("t"), InvalidResponseError);
    } finally {
      await s.close();
    }
  });

  it("sends the token, JSON and encoded task ids", async () => {
    const s = await stub(reply(200, TASK), reply(200, VERDICT));
    try {
      await new Client(s.url, { token: "sekrit", headers: { "x-team": "core" } }).getTask("epic-9/sub 2");
      await new Client(s.url, { token: "sekrit" }).evaluate(response("x"), { taskId: "t", agentId: "a" });
      const [get, post] = s.seen;
      assert.equal(get!.url, "/v1/tasks/epic-9%2Fsub%202");
      assert.equal(get!.headers.authorization, "Bearer sekrit");
      assert.equal(get!.headers["x-team"], "core");
      assert.ok(String(get!.headers["user-agent"]).startsWith("loopguard-typescript/"));
      assert.equal(post!.headers["content-type"], "application/json");
      assert.deepEqual(JSON.parse(post!.body), { task_id: "t", agent_id: "a", event: { type: "response", text: "x" } });
    } finally {
      await s.close();
    }
  });
});
