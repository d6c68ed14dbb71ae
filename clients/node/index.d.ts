// Type declarations of ratelimitd (index.js).
import type { Agent, IncomingMessage, ServerResponse } from 'node:http';

export declare const QUOTA_HEADERS: readonly string[];

export interface Limit {
  algorithm: 'fixed_window' | 'sliding_window_log' | 'sliding_window_counter' | 'token_bucket' | 'gcra' | 'concurrency';
  limit: number;
  window?: string | number;
  period?: 'minute' | 'hour' | 'day' | 'week' | 'month' | 'year';
  timezone?: string;
  week_start?: string;
  burst?: number;
  align?: 'first' | 'epoch';
}

/** The fields of POST /check and POST /charge (docs/API.md). */
export interface CheckArgs {
  key?: string;
  policy?: string;
  path?: string;
  method?: string;
  cost?: number;
  limits?: Limit[];
  /** Sent as X-Forwarded-For, for the daemon's `forwarded` identity source. */
  clientIp?: string;
  headers?: Record<string, string>;
}

export interface ChargeArgs extends CheckArgs {
  cost: number;
}

/** What the daemon answered, or what the failure policy decided. */
export interface Decision {
  /** The request may go on (a charge: whether a check of cost 0 would pass now). */
  allowed: boolean;
  /** 200 / 429 the daemon's; 400 it refused the call; 200 failing open, 503 failing closed. */
  status: number;
  /** The failure policy decided, or the daemon answered without its backend. */
  degraded: boolean;
  /** Seconds, on a 429 and a fail-closed 503; else null. */
  retryAfter: number | null;
  /** The daemon's quota headers (lower-case names), to pass on. */
  headers: Record<string, string>;
  /** The daemon's JSON answer ({} when none). */
  body: Record<string, unknown>;
  reason: string | null;
  elapsedMs: number;
  policy: string | null;
  limit: number | null;
  remaining: number | null;
  lease: string | null;
  charged: number | null;
  overdraft: number | null;
  released: boolean | null;
  /** A reserving check's reservation, for settle(). */
  reservation: string | null;
  /** A settle: true applied, false not held; null unknown. */
  settled: boolean | null;
  /** A charge or settle the daemon keeps to apply later (202). */
  pending: boolean;
}

export interface ReserveArgs extends CheckArgs {
  /** The estimate, taken now. */
  cost: number;
  /** The cost a failed or aborted piece of work settles at when it reported none (default: the estimate). */
  errorCost?: number;
}

export declare class Reservation {
  readonly decision: Decision;
  readonly estimate: number;
  errorCost: number | null;
  /** The real cost, as the work learns it. */
  cost: number | null;
  /** The settle's answer, once the daemon gave a definite one. */
  result: Decision | null;
  readonly allowed: boolean;
  readonly id: string | null;
  add(units: number): void;
  settle(cost?: number): Promise<Decision | null>;
  run<T>(fn: (r: Reservation) => Promise<T> | T): Promise<T>;
  settleOnClose(res: ServerResponse): Promise<Decision | null>;
}

export interface ClientOptions {
  /** http://host:port of the check listener (default http://127.0.0.1:8080). */
  url?: string;
  /** ms for a whole call (default 200). */
  timeout?: number;
  /** Allow (true, default) or deny with 503 when the daemon cannot answer. */
  failOpen?: boolean;
  /** The policy every call names unless it names its own. */
  policy?: string;
  logger?: Pick<Console, 'warn' | 'error'>;
  agent?: Agent;
  maxSockets?: number;
}

export declare class Client {
  constructor(opts?: ClientOptions);
  readonly url: URL;
  timeout: number;
  failOpen: boolean;
  policy?: string;
  readonly agent: Agent;
  check(args?: CheckArgs): Promise<Decision>;
  charge(args: ChargeArgs): Promise<Decision>;
  reserve(args: ReserveArgs): Promise<Reservation>;
  settle(reservation: string, cost: number): Promise<Decision>;
  release(lease: string): Promise<Decision>;
  close(): void;
}

export declare function createClient(opts?: ClientOptions): Client;

export interface MiddlewareOptions<Req> extends ClientOptions {
  client?: Client;
  /** The caller (an API key, a user id), or undefined for the daemon's identity chain. */
  key?: (req: Req) => string | undefined | null;
  clientIp?: (req: Req) => string | undefined;
  cost?: (req: Req) => number | undefined;
  /** Also pass the quota headers on allowed answers. */
  headers?: boolean;
  /** Reserve this estimate instead of a check; the Reservation settles when the response closes. */
  reserve?: (req: Req) => number;
}

export type ConnectMiddleware = ((req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => Promise<void>) & { client: Client };

export declare function expressMiddleware(opts?: MiddlewareOptions<any>): ConnectMiddleware;
export declare const rateLimit: typeof expressMiddleware;
export declare function fastifyPlugin(fastify: any, opts?: MiddlewareOptions<any>): Promise<void>;
export default Client;
