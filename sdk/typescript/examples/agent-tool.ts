// An "agent tool": the function a language model calls to run the code it wrote. Each conversation
// gets a sandbox of its own, kept across the model's calls (files it writes stay for its next
// call) and terminated when the conversation ends (or, should it never end, paused after ten idle
// minutes, resumed by its next call, and terminated after an hour: its lifetime); each run has a time
// limit and an output cap, and its result goes back to the model as plain JSON.
//
//   SANDBOXD_URL=http://127.0.0.1:4311 node build/examples/agent-tool.js
//
// The host provider does not isolate anything, so the tool refuses it unless
// SANDBOXD_ALLOW_HOST_PROCESS=1 says that is fine (for trying the example on a laptop).

import { Client, Sandbox } from "@sandboxd/sdk";

/** The tool as a model sees it (the JSON Schema most tool-calling APIs take). */
export const runCodeTool = {
  name: "run_code",
  description:
    "Run a program in an isolated sandbox and get its exit code and output. Files persist between calls " +
    "of one conversation. Programs have a time limit and 64 KiB of output per stream.",
  parameters: {
    type: "object",
    properties: {
      language: { enum: ["python", "javascript", "shell"] },
      code: { type: "string", description: "the whole program" },
      stdin: { type: "string", description: "standard input for the program" },
    },
    required: ["language", "code"],
  },
} as const;

export interface RunCodeArgs {
  language: "python" | "javascript" | "shell";
  code: string;
  stdin?: string;
}

/** What the model gets back. */
export interface RunCodeResult {
  exitCode: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  truncated: boolean;
  durationMs: number;
}

const programs = {
  python: { file: "main.py", argv: ["python3", "main.py"] },
  javascript: { file: "main.mjs", argv: ["node", "main.mjs"] },
  shell: { file: "main.sh", argv: ["sh", "main.sh"] },
} as const;

/** One conversation's sandbox. */
export class CodeSession implements AsyncDisposable {
  private constructor(
    private readonly sandbox: Sandbox,
    private readonly timeoutSeconds: number,
  ) {}

  /**
   * Starts a session whose programs may run timeoutSeconds each, refusing a provider that does not
   * isolate unless allowHostProcess is set.
   */
  static async start(client: Client, { allowHostProcess = false, timeoutSeconds = 10 } = {}): Promise<CodeSession> {
    const { provider } = await client.runtime();
    if (provider.runtimeClass === "host-process" && !allowHostProcess) {
      throw new Error(
        `provider ${provider.name} runs code as host processes, without isolation: refusing model-written code`,
      );
    }
    const lifetime = { ttlSeconds: 3600, idleSeconds: 600 };
    return new CodeSession(await Sandbox.create(client, { lifetime }, { timeoutMs: 30_000 }), timeoutSeconds);
  }

  /** The tool's implementation: never throws for what the program does, only when the sandbox fails. */
  async runCode(args: RunCodeArgs): Promise<RunCodeResult> {
    const program = programs[args.language];
    await this.sandbox.files.write(program.file, args.code);
    const r = await this.sandbox.run(program.argv, {
      timeoutSeconds: this.timeoutSeconds,
      maxOutputBytes: 64 << 10,
      stdin: args.stdin,
    });
    return {
      exitCode: r.exitCode,
      stdout: r.stdoutText,
      stderr: r.stderrText,
      timedOut: r.timedOut,
      truncated: r.truncated,
      durationMs: r.durationMs,
    };
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.sandbox.terminate({ wait: false });
  }
}

// What a model might send in one conversation: a program, one that reads the first one's file, one
// that never ends, and one that fails.
const calls: RunCodeArgs[] = [
  {
    language: "javascript",
    code: 'import { writeFileSync } from "node:fs";\nconst primes = [];\nfor (let n = 2; primes.length < 10; n++) if (primes.every((p) => n % p)) primes.push(n);\nwriteFileSync("primes.json", JSON.stringify(primes));\nconsole.log(primes.join(" "));\n',
  },
  { language: "shell", code: 'read name; echo "hello $name, primes: $(cat primes.json)"\n', stdin: "model\n" },
  { language: "javascript", code: "for (;;) {}\n" },
  { language: "shell", code: "echo about to fail >&2; exit 4\n" },
];

async function main(): Promise<void> {
  const client = new Client();
  await using session = await CodeSession.start(client, {
    allowHostProcess: process.env["SANDBOXD_ALLOW_HOST_PROCESS"] === "1",
    timeoutSeconds: 2, // short, so that the endless program's timeout shows soon
  });
  for (const call of calls) {
    const result = await session.runCode(call);
    console.log(JSON.stringify({ tool: runCodeTool.name, language: call.language, result }));
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((e: unknown) => {
    console.error(e);
    process.exit(1);
  });
}
