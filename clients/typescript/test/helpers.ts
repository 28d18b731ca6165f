/**
 * A real `loopguard serve` for the tests: the binary cargo built from this repository
 * (`$LOOPGUARD_BIN` to choose another), the real model from `models/`, a free port and a
 * temporary data directory. A missing binary or model fails the tests; nothing is skipped.
 */

import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { LocalServer } from "../src/testing.js";

/** The repository root (this file runs from build/test/). */
export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
export const TOKEN = "test-token-ts-5f2c";

export function dataDir(name: string): string {
  return mkdtempSync(join(tmpdir(), `loopguard-ts-${name}-`));
}

export async function startServer(name: string, args: string[] = [], token?: string): Promise<LocalServer> {
  const server = await LocalServer.start({ checkout: REPO, dataDir: dataDir(name), args, token });
  await server.client({ timeoutMs: 5_000 }).waitReady({ timeoutMs: 120_000 });
  return server;
}

let n = 0;
/** A task id no other test uses. */
export function task(prefix: string): string {
  n += 1;
  return `${prefix}-${process.pid}-${n}-${Math.random().toString(36).slice(2, 8)}`;
}

/** The same failure, reworded three times (the service's own end-to-end test uses them too). */
export const REWORDED = [
  "TypeError: Cannot read properties of undefined (reading 'name') at UserCard (src/components/UserCard.tsx:14:22)",
  "Uncaught TypeError: cannot read property 'name' of undefined in UserCard.tsx line 14",
  "TypeError: undefined has no properties (reading 'name') — UserCard component",
];
