// The AI SDK example end to end against a real server: the loop is caught, the directive is in
// what the model reads next and changes its commands; a stubborn agent stops at the gate; without
// loopguard the same agent runs until its step limit.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { runAgent } from "../examples/ai-sdk-tool-loop.js";
import type { LocalServer } from "../src/testing.js";
import { startServer, task } from "./helpers.js";

let server: LocalServer;
before(async () => {
  server = await startServer("example");
});
after(async () => server?.stop());

describe("a Vercel AI SDK tool loop watched by loopguard", () => {
  it("turns a stuck agent around with the pivot directive", async () => {
    const r = await runAgent({ lg: server.client(), taskId: task("ai-sdk") });
    const actions = r.verdicts.map((v) => v.action.type);
    const pivot = actions.indexOf("pivot");
    assert.ok(pivot > 0, `no pivot: ${actions}`);
    assert.ok(actions.slice(0, pivot).includes("warn"), `a warning first: ${actions}`);
    assert.equal(r.commands[pivot + 1], "cat textstats.py", "the directive changed the next command");
    assert.ok(r.solved, `not solved: ${r.commands.join(" | ")}`);
    assert.equal(r.stoppedBy, null);
    assert.ok(r.text.includes("test passes"));
  });

  it("pauses a stubborn agent at the gate", async () => {
    const r = await runAgent({ lg: server.client(), taskId: task("ai-sdk-stubborn"), stubborn: true });
    assert.equal(r.stoppedBy?.action.type, "pause");
    assert.equal(r.stoppedBy?.status, "paused");
    assert.ok(!r.solved && r.steps < 12, `${r.steps} steps`);
  });

  it("without loopguard runs until its step limit", async () => {
    const r = await runAgent({ lg: null, taskId: task("ai-sdk-alone"), maxSteps: 8 });
    assert.equal(r.steps, 8);
    assert.ok(!r.solved);
  });
});
