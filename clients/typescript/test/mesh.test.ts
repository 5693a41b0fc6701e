/**
 * @agentrt/client against the real mesh (started by tests/e2e/test_typescript_client.py with
 * the same code as `agentrt up`, the provider emulator as the model, and a bearer token that
 * every service requires). Run from pytest only: the environment names the mesh.
 *
 * AGENTRT_RUNS_ADDR, AGENTRT_SESSIONS_ADDR  the services
 * AGENTRT_AUTH_TOKEN                        the token the mesh requires
 * AGENTRT_EMULATOR_URL                      the provider emulator (POST /_emulator/script)
 * AGENTRT_TEST_DIR                          a scratch directory for workspaces
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import {
  AgentrtClient,
  AgentrtError,
  Code,
  ErrorReason,
  PendingCallKind,
  RunStatus,
  ToolResultStatus,
} from "../src/index.js";
import type { Reconnect, RunEvent, StartRunInit } from "../src/index.js";

function required(name: string): string {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: run these tests through tests/e2e/test_typescript_client.py`);
  }
  return value;
}

const RUNS = required("AGENTRT_RUNS_ADDR");
const SESSIONS = required("AGENTRT_SESSIONS_ADDR");
const TOKEN = required("AGENTRT_AUTH_TOKEN");
const EMULATOR = required("AGENTRT_EMULATOR_URL");
const SCRATCH = required("AGENTRT_TEST_DIR");

interface ScriptedReply {
  text?: string;
  tool_calls?: { name: string; arguments: string }[];
}

async function script(replies: ScriptedReply[]): Promise<void> {
  const response = await fetch(`${EMULATOR}/_emulator/script`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(replies),
  });
  assert.equal(response.status, 200);
}

function client(tenant: string, runs = RUNS): AgentrtClient {
  return new AgentrtClient({ runs, sessions: SESSIONS, token: TOKEN, tenant });
}

function runRequest(name: string, needsApproval: boolean): StartRunInit {
  return {
    agent: {
      name: "node-agent",
      instructions: "Use exec_command, then answer.",
      model: { provider: "openai", model: "gpt-test" },
      tools: [{ name: "exec_command", needsApproval }],
      limits: { maxTurns: 4 },
    },
    input: `write ${name}`,
    workspace: path.join(SCRATCH, name),
  };
}

function writeCall(file: string): ScriptedReply {
  return { tool_calls: [{ name: "exec_command", arguments: JSON.stringify({ cmd: `printf node > ${file}` }) }] };
}

function kinds(events: RunEvent[]): string[] {
  return events.map((e) => e.payload.case ?? "");
}

function assertSeqsStrictlyIncrease(events: RunEvent[]): void {
  const seqs = events.filter((e) => e.payload.case !== "gap").map((e) => e.seq);
  for (let i = 1; i < seqs.length; i++) {
    assert.ok(seqs[i]! > seqs[i - 1]!, `seq ${seqs[i]} follows ${seqs[i - 1]}`);
  }
}

test("a run with a tool call streams to completion and its session reads back", async () => {
  await script([writeCall("one.txt"), { text: "one.txt is written" }]);
  const mesh = client("node-acme");
  const started = await mesh.startRun(runRequest("one", false));
  const events: RunEvent[] = [];
  for await (const event of mesh.events(started.runId)) {
    events.push(event);
  }
  assertSeqsStrictlyIncrease(events);
  const seen = kinds(events);
  assert.equal(seen[0], "runStarted");
  assert.deepEqual(seen.slice(-2), ["runCompleted", "streamEnd"]);
  assert.ok(!seen.includes("gap"));
  const called = events.flatMap((e) => (e.payload.case === "toolCalled" ? [e.payload.value.call!] : []));
  assert.deepEqual(
    called.map((c) => [c.name, c.arguments]),
    [["exec_command", JSON.stringify({ cmd: "printf node > one.txt" })]],
  );
  const returned = events.flatMap((e) => (e.payload.case === "toolReturned" ? [e.payload.value.result!] : []));
  assert.equal(returned.length, 1);
  assert.equal(returned[0]!.status, ToolResultStatus.OK);
  const end = events.at(-1)!;
  assert.ok(end.payload.case === "streamEnd" && end.payload.value.status === RunStatus.COMPLETED);
  assert.equal(readFileSync(path.join(SCRATCH, "one", "one.txt"), "utf8"), "node");

  const run = await mesh.getRun(started.runId);
  assert.equal(run.status, RunStatus.COMPLETED);
  assert.equal(run.finalOutput, "one.txt is written");
  const session = await mesh.getSession(started.sessionId);
  assert.equal(session.sessionId, started.sessionId);
  const entries = await mesh.listEntries(started.sessionId);
  const calls = entries.filter((e) => e.item?.toolCall !== undefined).map((e) => e.item!.toolCall!);
  const results = entries.filter((e) => e.item?.toolResult !== undefined).map((e) => e.item!.toolResult!);
  assert.deepEqual(calls.map((c) => c.name), ["exec_command"]);
  assert.deepEqual(results.map((r) => r.callId), [calls[0]!.callId]);
  assert.equal(session.lastSeq, entries.at(-1)!.seq);

  // a cursor from an earlier life of the timeline: the gap is surfaced, then all of it
  const replayed: RunEvent[] = [];
  for await (const event of mesh.events(started.runId, { afterSeq: 10_000n })) {
    replayed.push(event);
  }
  const gap = replayed[0]!;
  assert.ok(gap.payload.case === "gap" && gap.payload.value.lastGood === 0n && gap.payload.value.dropped === 10_000n);
  assert.deepEqual(
    replayed.slice(1).map((e) => e.seq),
    events.map((e) => e.seq),
  );
});

test("an approval is answered from Node and the run goes on", async () => {
  await script([writeCall("two.txt"), { text: "approved and written" }]);
  const mesh = client("node-acme");
  const started = await mesh.startRun(runRequest("two", true));
  const events: RunEvent[] = [];
  let approvals = 0;
  for await (const event of mesh.events(started.runId)) {
    events.push(event);
    if (event.payload.case === "runSuspended") {
      const [pending] = event.payload.value.pendingCalls;
      assert.equal(pending!.kind, PendingCallKind.APPROVAL);
      assert.equal(existsSync(path.join(SCRATCH, "two", "two.txt")), false, "nothing ran before the approval");
      const run = await mesh.getRun(started.runId);
      assert.equal(run.status, RunStatus.SUSPENDED);
      await mesh.approve(started.runId, pending!.call!.callId);
      approvals += 1;
    }
  }
  assert.equal(approvals, 1);
  const seen = kinds(events);
  assert.ok(seen.indexOf("runSuspended") < seen.indexOf("runResumed"));
  assert.ok(seen.indexOf("runResumed") < seen.indexOf("toolReturned"));
  assert.equal(readFileSync(path.join(SCRATCH, "two", "two.txt"), "utf8"), "node");
  assert.equal((await mesh.getRun(started.runId)).finalOutput, "approved and written");
});

/** A TCP proxy whose open connections can be cut at once. */
class CuttableProxy {
  readonly sockets = new Set<net.Socket>();
  connections = 0;
  readonly #server: net.Server;

  constructor(target: string) {
    const [host, port] = [target.slice(0, target.lastIndexOf(":")), Number(target.slice(target.lastIndexOf(":") + 1))];
    this.#server = net.createServer((downstream) => {
      this.connections += 1;
      const upstream = net.connect(port, host);
      for (const socket of [downstream, upstream]) {
        this.sockets.add(socket);
        socket.on("close", () => this.sockets.delete(socket));
        socket.on("error", () => undefined);
      }
      downstream.pipe(upstream).pipe(downstream);
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.#server.listen(0, "127.0.0.1", resolve));
    return `127.0.0.1:${(this.#server.address() as net.AddressInfo).port}`;
  }

  cut(): void {
    for (const socket of this.sockets) {
      socket.destroy();
    }
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise((resolve) => this.#server.close(resolve));
  }
}

test("a stream cut mid-run resumes from the last seq: nothing lost, nothing repeated", async () => {
  await script([writeCall("three.txt"), { text: "survived the cut" }]);
  const proxy = new CuttableProxy(RUNS);
  const address = await proxy.listen();
  const mesh = client("node-acme", address);
  const direct = client("node-acme");
  try {
    const started = await mesh.startRun(runRequest("three", true));
    const events: RunEvent[] = [];
    const reconnects: Reconnect[] = [];
    for await (const event of mesh.events(started.runId, { onReconnect: (r) => reconnects.push(r) })) {
      events.push(event);
      if (event.payload.case === "runSuspended") {
        proxy.cut(); // the open StreamRunEvents call breaks here
        // answered on a connection of its own: a unary call on the cut one fails, unretried
        await direct.approve(started.runId, event.payload.value.pendingCalls[0]!.call!.callId);
      }
    }
    assert.ok(reconnects.length >= 1, "the stream was reopened");
    const suspendedSeq = events.find((e) => e.payload.case === "runSuspended")!.seq;
    assert.equal(reconnects[0]!.afterSeq, suspendedSeq);
    assert.ok(proxy.connections >= 2);
    // every seq from 1 to the end exactly once
    const seqs = events.map((e) => Number(e.seq));
    assert.deepEqual(seqs, Array.from({ length: seqs.length }, (_, i) => i + 1));
    assert.deepEqual(kinds(events).slice(-2), ["runCompleted", "streamEnd"]);
    assert.equal((await mesh.getRun(started.runId)).finalOutput, "survived the cut");
    assert.ok(!kinds(events).includes("gap"), "a reconnect from the last seq loses nothing");
  } finally {
    await proxy.close();
  }
});

async function refusal(promise: Promise<unknown>): Promise<AgentrtError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof AgentrtError, `an AgentrtError, not ${String(err)}`);
    return err;
  }
  assert.fail("the request was not refused");
}

test("a refused request surfaces its status and ErrorInfo reason", async () => {
  const mesh = client("node-acme");
  const bad = runRequest("four", false);
  bad.agent!.name = "not a valid name!";
  const invalid = await refusal(mesh.startRun(bad));
  assert.equal(invalid.code, Code.InvalidArgument);
  assert.equal(invalid.codeName, "INVALID_ARGUMENT");
  assert.equal(invalid.reason, ErrorReason.INVALID_AGENT);
  assert.equal(invalid.reasonName, "INVALID_AGENT");
  assert.equal(invalid.metadata["field"], "agent.name");

  // another tenant's run is NOT_FOUND, on unary and streaming calls alike
  await script([{ text: "mine" }]);
  const started = await mesh.startRun(runRequest("five", false));
  for await (const _ of mesh.events(started.runId)) {
    // drain to the end
  }
  const other = client("node-globex");
  const hidden = await refusal(other.getRun(started.runId));
  assert.equal(hidden.code, Code.NotFound);
  assert.equal(hidden.reason, ErrorReason.RUN_NOT_FOUND);
  const hiddenStream = await refusal(other.events(started.runId).next());
  assert.equal(hiddenStream.reason, ErrorReason.RUN_NOT_FOUND);
  const hiddenSession = await refusal(other.getSession(started.sessionId));
  assert.equal(hiddenSession.reason, ErrorReason.SESSION_NOT_FOUND);

  // resuming a run that does not wait is FAILED_PRECONDITION/RUN_FINISHED or RUN_NOT_SUSPENDED
  const late = await refusal(mesh.approve(started.runId, "call-1"));
  assert.equal(late.code, Code.FailedPrecondition);
  assert.ok([ErrorReason.RUN_NOT_SUSPENDED, ErrorReason.RUN_FINISHED].includes(late.reason), late.reasonName);

  // without the token every call is UNAUTHENTICATED
  const anonymous = new AgentrtClient({ runs: RUNS, sessions: SESSIONS });
  const denied = await refusal(anonymous.getRun(started.runId));
  assert.equal(denied.code, Code.Unauthenticated);
  assert.equal(denied.reason, ErrorReason.UNAUTHENTICATED);
});
