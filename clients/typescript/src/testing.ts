/**
 * A local `loopguard serve` on a free port, for tests of your orchestrator (Node only).
 *
 * ```ts
 * const server = await LocalServer.start({ checkout: "/path/to/loopguard", dataDir });
 * const lg = server.client();
 * ...
 * await server.stop();
 * ```
 */

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { delimiter, join } from "node:path";
import { createInterface } from "node:readline";
import { Client, type ClientOptions } from "./client.js";

/** The `loopguard` binary: `$LOOPGUARD_BIN`; else cargo's build in `checkout`
 * (`$CARGO_TARGET_DIR` or `target/`, debug then release); else `loopguard` on `PATH`. */
export function findBinary(checkout?: string): string {
  const fromEnv = process.env.LOOPGUARD_BIN;
  if (fromEnv) return fromEnv;
  if (checkout !== undefined) {
    const target = process.env.CARGO_TARGET_DIR || join(checkout, "target");
    for (const profile of ["debug", "release"]) {
      const candidate = join(target, profile, "loopguard");
      if (existsSync(candidate)) return candidate;
    }
  }
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    const candidate = join(dir, "loopguard");
    if (dir && existsSync(candidate)) return candidate;
  }
  const where = checkout !== undefined ? ` under ${checkout}/target` : "";
  throw new Error(`no loopguard binary${where}: build it with \`cargo build\`, or set LOOPGUARD_BIN`);
}

export interface LocalServerOptions {
  /** The binary; default {@link findBinary}(checkout). */
  binary?: string;
  /** A loopguard checkout: where the binary is looked for, and where it runs (its `models/`). */
  checkout?: string;
  dataDir: string;
  /** More flags (`["--set", "k=v"]`). */
  args?: string[];
  token?: string;
  /** Where relative paths of the configuration are resolved (default: `checkout`). */
  cwd?: string;
  /** `LOOPGUARD_LOG` (default `warn`). */
  log?: string;
}

/** `loopguard serve --addr 127.0.0.1:0` with its own data directory; `url` is where it listens. */
export class LocalServer {
  readonly stderr: string[] = [];

  private constructor(
    readonly url: string,
    readonly token: string | undefined,
    private readonly proc: ChildProcess,
  ) {}

  static async start(options: LocalServerOptions): Promise<LocalServer> {
    const binary = options.binary ?? findBinary(options.checkout);
    const args = ["serve", "--addr", "127.0.0.1:0", "--data-dir", options.dataDir];
    if (options.token) args.push("--set", `server.auth_token="${options.token}"`);
    args.push(...(options.args ?? []));
    const proc = spawn(binary, args, {
      cwd: options.cwd ?? options.checkout,
      env: { ...process.env, LOOPGUARD_LOG: options.log ?? "warn" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const stderr: string[] = [];
    // Drained so a chatty server never blocks on a full pipe; kept for error messages.
    proc.stderr!.on("data", (chunk: Buffer) => stderr.push(chunk.toString()));
    const lines = createInterface({ input: proc.stdout! });
    const first = await new Promise<string>((resolve) => {
      lines.once("line", resolve);
      proc.once("exit", () => resolve(""));
    });
    const prefix = "loopguard listening on ";
    if (!first.startsWith(prefix)) {
      proc.kill("SIGKILL");
      throw new Error(`loopguard serve did not start (first line ${JSON.stringify(first)}):\n${stderr.join("").slice(-4000)}`);
    }
    const server = new LocalServer(first.slice(prefix.length).trim(), options.token, proc);
    server.stderr.push(...stderr);
    proc.stderr!.on("data", (chunk: Buffer) => server.stderr.push(chunk.toString()));
    return server;
  }

  client(options: ClientOptions = {}): Client {
    return new Client({ token: this.token ?? null, ...options, baseUrl: this.url });
  }

  /** SIGTERM (the server drains and flushes), then SIGKILL after 20 s. */
  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => this.proc.once("exit", () => resolve()));
    this.proc.kill("SIGTERM");
    const timer = setTimeout(() => this.proc.kill("SIGKILL"), 20_000);
    await exited;
    clearTimeout(timer);
  }
}
