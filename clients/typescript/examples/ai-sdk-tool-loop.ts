/**
 * A Vercel AI SDK tool loop (`generateText` with tools and `stopWhen`) watched by loopguard.
 *
 * Every tool call and its output go to `POST /v1/evaluate` from inside the tool's `execute`;
 * a warning or the strategy-pivot directive is appended to the tool result, so it is in what
 * the model reads next; `escalate` / `pause` / `terminate` end the loop through `stopWhen`.
 *
 * It runs offline: a scripted model (the AI SDK's `MockLanguageModelV3`) stands in for the LLM,
 * as in the Python examples (examples/wordcount_task.py). Convinced that a failing test comes
 * from a stale bytecode cache, it re-runs the test in ever new wordings, and changes plan only
 * when the directive reaches it; a `stubborn` one ignores that too and is paused for a human.
 * The commands really run (`python3`), in a temporary workspace.
 *
 *     cargo run --release -- serve &                    # loopguard on 127.0.0.1:8080
 *     cd clients/typescript && npm ci && npm run example  # add -- --stubborn to see the pause
 */

import { execSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";
import { Client, guidesAgent, stopsAgent, toolCall, toolResult, type Verdict } from "../src/index.js";

const TASK =
  "word_count() in textstats.py returns the wrong number of words when words are separated by more than one space. Make `python3 test_textstats.py` pass.";
const SOURCE = 'def word_count(text):\n    """Number of words in text, however they are spaced."""\n    return len(text.split(" "))\n';
const TEST =
  'from textstats import word_count\n\nassert word_count("one two three") == 3\nassert word_count("one  two") == 2, word_count("one  two")\nassert word_count("  padded   words  ") == 2\nprint("all tests passed")\n';

/** The stuck plan: one wrong theory (a stale cache), the same failing step in new words. */
const STUCK = [
  "python3 test_textstats.py",
  "rm -rf __pycache__ && python3 test_textstats.py",
  "find . -name '*.pyc' -delete && python3 test_textstats.py",
  "python3 -B test_textstats.py",
  "PYTHONDONTWRITEBYTECODE=1 python3 -B ./test_textstats.py",
  'env -i PATH="$PATH" python3 -B test_textstats.py',
  "PYTHONPATH=. python3 -B test_textstats.py",
];
/** After a pivot: read the code, fix the cause, verify. */
const PIVOTED = ["cat textstats.py", "sed -i 's/text.split(\" \")/text.split()/' textstats.py && python3 test_textstats.py"];
/** What the scripted model recognises in loopguard's pivot directive. */
export const DIRECTIVE = "STRATEGY PIVOT REQUIRED";

/** A model that reads its prompt as an LLM would and picks its next step from a script. */
function scriptedModel(stubborn: boolean) {
  let stuck = 0;
  let pivoted = -1;
  let calls = 0;
  return new MockLanguageModelV3({
    doGenerate: async ({ prompt }) => {
      calls += 1;
      // What the model was shown since its last turn: the tool results.
      const lastAssistant = prompt.map((m) => m.role).lastIndexOf("assistant");
      const fresh = JSON.stringify(prompt.slice(lastAssistant + 1));
      if (fresh.includes(DIRECTIVE) && !stubborn && pivoted < 0) pivoted = 0;
      const usage = {
        inputTokens: { total: 100, noCache: 100, cacheRead: 0, cacheWrite: 0 },
        outputTokens: { total: 20, text: 20, reasoning: 0 },
      };
      if (pivoted >= PIVOTED.length) {
        return {
          content: [{ type: "text", text: "The test passes: word_count() now splits on any run of whitespace." }],
          finishReason: { unified: "stop", raw: "stop" },
          usage,
          warnings: [],
        };
      }
      const command = pivoted >= 0 ? PIVOTED[pivoted++]! : STUCK[Math.min(stuck++, STUCK.length - 1)]!;
      return {
        content: [{ type: "tool-call", toolCallId: `call-${calls}`, toolName: "bash", input: JSON.stringify({ command }) }],
        finishReason: { unified: "tool-calls", raw: "tool_calls" },
        usage,
        warnings: [],
      };
    },
  });
}

export interface RunOptions {
  /** null: the same agent without loopguard. */
  lg: Client | null;
  taskId: string;
  stubborn?: boolean;
  maxSteps?: number;
  log?: (line: string) => void;
}

export interface RunResult {
  commands: string[];
  verdicts: Verdict[];
  /** The verdict that ended the loop (escalate, pause, terminate), if one did. */
  stoppedBy: Verdict | null;
  solved: boolean;
  steps: number;
  text: string;
}

export async function runAgent(options: RunOptions): Promise<RunResult> {
  const { lg, taskId, stubborn = false, maxSteps = 12, log = () => {} } = options;
  const ws = mkdtempSync(join(tmpdir(), "wordcount-"));
  writeFileSync(join(ws, "textstats.py"), SOURCE);
  writeFileSync(join(ws, "test_textstats.py"), TEST);
  const commands: string[] = [];
  const verdicts: Verdict[] = [];
  let stoppedBy: Verdict | null = null;
  let solved = false;

  const bash = tool({
    description: "Run a shell command in the workspace",
    inputSchema: z.object({ command: z.string() }),
    execute: async ({ command }) => {
      commands.push(command);
      log(`agent     $ ${command}`);
      let output: string;
      let exitCode = 0;
      try {
        output = execSync(command, { cwd: ws, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], shell: "/bin/sh" });
      } catch (e) {
        const err = e as { status?: number; stdout?: string; stderr?: string };
        exitCode = err.status ?? 1;
        output = `${err.stdout ?? ""}${err.stderr ?? ""}`;
      }
      if (output.includes("all tests passed")) solved = true;
      log(`output    ${output.trim().split("\n").at(-1)}`);
      if (!lg) return output;
      // loopguard sees the call and what it returned; its answer goes where the model reads.
      const v = await lg.evaluate(toolCall("bash", { command }, toolResult(output, { exitCode, isError: exitCode !== 0 })), {
        taskId,
        agentId: "ai-sdk-agent",
        goal: TASK,
      });
      verdicts.push(v);
      if (stopsAgent(v)) {
        stoppedBy = v;
        log(`loopguard ${v.action.type}: ${v.reason}`);
        return `${output}\n\n[loopguard] ${v.action.type}: ${v.action.message ?? v.reason}`;
      }
      if (guidesAgent(v) && v.action.message) {
        log(`loopguard ${v.action.message.split("\n")[0]}`);
        return `${output}\n\n[loopguard] ${v.action.message}`;
      }
      return output;
    },
  });

  const result = await generateText({
    model: scriptedModel(stubborn),
    tools: { bash },
    // loopguard said stop (escalate, pause, terminate): no next step.
    stopWhen: [stepCountIs(maxSteps), () => stoppedBy !== null],
    prompt: TASK,
  });
  return { commands, verdicts, stoppedBy, solved, steps: result.steps.length, text: result.text };
}

// Run as a script: `node build/examples/ai-sdk-tool-loop.js [--stubborn]`.
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const lg = new Client();
  await lg.waitReady();
  const r = await runAgent({
    lg,
    taskId: `ai-sdk-demo-${Date.now()}`,
    stubborn: process.argv.includes("--stubborn"),
    log: (l) => console.log(l),
  });
  console.log(r.solved ? "exit      solved" : `exit      ${r.stoppedBy ? `stopped by loopguard (${r.stoppedBy.action.type})` : "step limit"}`);
}
