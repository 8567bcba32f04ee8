// Types for ojsd-client (ojsd.js). Kept by hand beside the code; `npm pack` ships both.
import type { ConnectionOptions } from "node:tls";

/** A job envelope (PROTOCOL.md §3). The server adds `id`, `state`, `attempt`, ... */
export interface Job {
  id?: string;
  type: string;
  args?: unknown[];
  queue?: string;
  priority?: number | "HIGH" | "NORMAL" | "LOW";
  meta?: Record<string, unknown>;
  timeout?: number;
  scheduled_at?: string;
  expires_at?: string;
  retry?: Record<string, unknown>;
  unique?: Record<string, unknown>;
  pending?: boolean;
  [attribute: string]: unknown;
}

/** A job as the server returns it: every stored job has an id and a state. */
export interface StoredJob extends Job {
  id: string;
  state: "scheduled" | "available" | "pending" | "active" | "completed" | "retryable" | "cancelled" | "discarded";
  attempt: number;
}

export type Directive = "quiet" | "terminate";

export interface ClientOptions {
  password?: string;
  /** Worker id: makes the connection a consumer (PROTOCOL.md §5). */
  wid?: string;
  labels?: string[];
  timeoutMs?: number;
  /** Node's tls.connect options, for a TLS listener. */
  tls?: ConnectionOptions;
  /** Extra HELLO fields; the server keeps them with the worker's record. */
  hello?: Record<string, unknown>;
}

/** The command was refused (`-ERR CODE message`) and nothing changed. */
export class OjsdError extends Error {
  constructor(code: string, message: string);
  /** The server's error code, e.g. "NOT_FOUND", "INVALID_JOB_TYPE". */
  code: string;
  detail: string;
}

/** The server sent something this client cannot read, or went away. */
export class ProtocolError extends Error {}

/** One connection; commands may be pipelined, replies resolve in order. */
export class Client {
  static connect(addr?: string, opts?: ClientOptions): Promise<Client>;
  constructor(addr: string, opts?: ClientOptions);
  readonly wid?: string;
  open(): Promise<Client>;
  /** Any command: "OK" (a simple reply), a JSON value, or null. */
  call(verb: string, payload?: string | object): Promise<any>;
  push(job: Job): Promise<StoredJob>;
  /** Atomic: all are stored or none. */
  pushb(jobs: Job[]): Promise<StoredJob[]>;
  fetch(queues?: string[]): Promise<StoredJob | null>;
  fetch(queues: string[], count: number): Promise<StoredJob[] | null>;
  ack(id: string, result?: unknown): Promise<"OK">;
  /** ACK and take the next job from `queues` in one round trip (PROTOCOL.md §5.2). */
  ackFetch(id: string, queues: string[], result?: unknown, opts?: { waitMs?: number }): Promise<StoredJob | null>;
  /** ACK each of these jobs on its own, in one round trip (ACKB, PROTOCOL.md §5.2). */
  ackb(acks: Array<string | [string, unknown]>): Promise<{ acked: number; rejected: Array<{ index: number; code: string; message: string }> }>;
  fail(id: string, type: string, message: string, backtrace?: string[]): Promise<"OK">;
  /** null while the worker should run on. */
  beat(activeIds?: string[]): Promise<Directive | null>;
  job(id: string): Promise<StoredJob>;
  info(): Promise<any>;
  close(): void;
}

export type Handler = (...args: any[]) => unknown | Promise<unknown>;

export interface Logger {
  info(message: string): void;
  warn(message: string): void;
}

export interface WorkerOptions {
  addr?: string;
  queues?: string[];
  password?: string;
  wid?: string;
  concurrency?: number;
  beatMs?: number;
  labels?: string[];
  tls?: ConnectionOptions;
  /** Where connection state changes go; default console, null for silence. */
  logger?: Logger | null;
}

/** Why run() ended. */
export type WorkerState = "running" | "quiet" | "terminate" | "stopped";

export class Worker {
  constructor(opts?: WorkerOptions);
  readonly wid: string;
  state: WorkerState;
  readonly stopping: boolean;
  register(type: string, fn: Handler): this;
  /** Stop fetching, finish the jobs in hand; run() resolves to "stopped". */
  stop(): void;
  run(opts?: { signals?: boolean }): Promise<Exclude<WorkerState, "running">>;
}

export function passwordHash(password: string, salt: string, iterations: number): string;
